// The synthetic-model options of `bench` and `serve`: --synthetic PRESET [--layers N]
// [--quant MIX] (model/synthetic.h).
#pragma once
#include <optional>
#include <vector>

#include "cli/args.h"
#include "engine/engine.h"
#include "model/synthetic.h"

namespace hs::cli {

// The option table rows.
std::vector<OptionSpec> synthetic_option_specs();
// nullopt without --synthetic (then --layers/--quant are an error). On a GPU (any of the
// engine's devices cuda:N) the matrices and experts are filled in device memory, except for
// the tiny preset, whose widths do not fit the FP8/K-quant device layouts.
std::optional<SyntheticSpec> synthetic_spec_from(const ParsedArgs& a, const EngineOptions& engine);

}  // namespace hs::cli
