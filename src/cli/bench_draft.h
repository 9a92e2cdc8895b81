// `bench --draft mtp|auto` (cmd_bench.cpp): what speculative decoding costs and can gain. The
// cost of a verify step of k + 1 rows (all positions' logits, then the rollback of the rejected
// tail) against a plain decode step, for k = 1..7, and the drafter's pass per drafted token; from
// them the expected speedup as a function of the acceptance rate a (a drafted token accepted
// with chance a, so a step yields (1 - a^(k+1)) / (1 - a) tokens) and the break-even rate per k.
// Random weights accept (almost) nothing: the table is the cost side; the acceptance of a real
// checkpoint's MTP block decides where on it a model lands.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace hs::cli {

// depth: the context the steps run at; reps: timed repetitions (median).
nlohmann::ordered_json bench_draft(Engine& eng, int64_t depth, int64_t reps, bool synthetic);

}  // namespace hs::cli
