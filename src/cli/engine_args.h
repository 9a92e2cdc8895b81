// The engine options every model-running command takes: --device, --devices, --layer-split,
// --numerics, --threads, --expert-top-k, --micro-batches (logits, bench, serve, run).
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/distributed.h"
#include "engine/engine.h"

namespace hs::cli {

// The option table rows; `numerics_help` says which default applies for this command.
std::vector<OptionSpec> engine_option_specs(const std::string& device_help, const std::string& numerics_help);
// EngineOptions from the parsed options; the defaults apply where an option is absent.
EngineOptions engine_options(const ParsedArgs& a, const std::string& default_device,
                             const std::string& default_numerics);

// Speculative decoding: --draft auto|mtp|off (EngineOptions::draft) and --draft-max N (serve,
// run, bench). draft_options fills engine.draft and returns the draft length (0: --draft off,
// or auto on a model without a drafter is decided later by the engine); --draft-max must be in
// [1, max_rollback].
std::vector<OptionSpec> draft_option_specs();
int draft_options(const ParsedArgs& a, EngineOptions& engine);
// --draft-confidence (DSpark's verify-length threshold), checked: 0..1, default 0.5.
float draft_confidence(const ParsedArgs& a);

// The options of one rank of a multi-process pipeline: --rank, --world, --coordinator,
// --dist-timeout (docs/multi-gpu.md).
std::vector<OptionSpec> distributed_option_specs();
// nullopt when none of --rank/--world/--coordinator is given; otherwise all three must be, and
// they are checked against the engine options (engine/distributed.h validate).
std::optional<DistributedOptions> distributed_options(const ParsedArgs& a, const EngineOptions& eo);
// A pipeline's process after its failure (the peers were told, NCCL aborted): prints `msg` and
// leaves at once, rather than tear down device state behind an aborted communicator (whose
// teardown may wait for a dead rank).
[[noreturn]] void leave_after_pipeline_failure(const std::string& msg);
// A rank > 0 of a pipeline (`cmd` names the command in messages): joins, runs rank 0's steps
// until it says shutdown (returns 0) or the pipeline fails (prints why, leaves with status 1).
int run_pipeline_rank(const char* cmd, const std::string& model, const EngineOptions& opts, const DistributedOptions& d);
// The same on a source every rank makes alike (a synthetic model); `name` names it.
int run_pipeline_rank(const char* cmd, std::unique_ptr<ModelSource> src, const std::string& name,
                      const EngineOptions& opts, const DistributedOptions& d);

}  // namespace hs::cli
