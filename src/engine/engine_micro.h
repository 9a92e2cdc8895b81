// Engine internals shared by engine.cpp and engine_ranks.cpp: one micro-batch of a step.
#pragma once
#include <span>
#include <vector>

#include "engine/engine.h"

namespace hs {

// One micro-batch on its way through the shards: whole items, their rows concatenated.
struct Engine::Micro {
  std::span<const StepItem> items;
  int64_t rows = 0;
  int64_t pad = 0;                     // padding rows after the items' (a decode step rounded up for a graph)
  std::vector<HcState> X;              // per shard: the state on its backend (one buffer while the backend stays)
  std::vector<HandoffFlight> flights;  // per boundary: the state on its way (ShardHandoff)
  // The last rank of a pipeline: the logits rows it sends to rank 0 at the end of the step.
  float* out = nullptr;
  int64_t out_rows = 0;
};

}  // namespace hs
