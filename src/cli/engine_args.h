// The engine options every model-running command takes: --device, --devices, --layer-split,
// --numerics, --threads (logits, bench, serve, run).
#pragma once
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/engine.h"

namespace hs::cli {

// The option table rows; `numerics_help` says which default applies for this command.
std::vector<OptionSpec> engine_option_specs(const std::string& device_help, const std::string& numerics_help);
// EngineOptions from the parsed options; the defaults apply where an option is absent.
EngineOptions engine_options(const ParsedArgs& a, const std::string& default_device,
                             const std::string& default_numerics);

}  // namespace hs::cli
