// The engine as one rank of a multi-process pipeline (EngineOptions::link; issue 19): the step
// plan rank 0 sends, the plans the other ranks run, the logits coming home, the pools budgeted
// alike. The step itself is Engine::run_step, the same path as in one process (engine.cpp).
#include "engine/engine.h"
#include "engine/engine_micro.h"
#include "engine/rank_link.h"
#include "util/error.h"

namespace hs {

dist::StepPlan Engine::make_plan(std::span<const StepItem> items, int micro_batches) const {
  dist::StepPlan p;
  p.ops = log_->take();
  p.micro_batches = micro_batches;
  for (const StepItem& it : items) {
    uint32_t flags = 0;
    if (it.output) flags |= dist::kItemOutput;
    if (it.all_positions) flags |= dist::kFlagAllPositions;
    p.items.push_back({it.seq->id, it.seq->n_past(), it.n, flags});
    p.tokens.insert(p.tokens.end(), it.tokens, it.tokens + it.n);
  }
  return p;
}

void Engine::step_planned(std::span<const StepItem> items, int micro_batches) {
  HS_CHECK(link_ && link_->rank() > 0, "internal: step_planned is for the ranks > 0 of a pipeline");
  run_step(items, micro_batches);
}

// After every micro-batch ran: the last rank sends each one's logits rows, rank 0 receives them
// into its scratch and hands them out; the ranks between have none. (At the end, not per
// micro-batch: rank 0 is still sending states while the last rank finishes the first ones.)
void Engine::exchange_outputs(std::vector<Micro>& mbs) {
  Shard& sh = *shards_.back();
  Ops& ops = sh.ops();
  const int64_t V = config_.vocab_size;
  if (sh.owns_output()) {
    for (const Micro& mb : mbs)
      if (mb.out_rows > 0) link_->send_outputs(ops, mb.out, mb.out_rows * V);
    return;
  }
  if (link_->rank() != 0) return;
  for (const Micro& mb : mbs) {
    int64_t wanted = 0;
    for (const StepItem& it : mb.items) {
      if (!it.output) continue;
      wanted += it.all_positions ? it.n : 1;
      if (it.sample) it.sample->sampled = false;  // (can_sample() is false here)
    }
    if (wanted == 0) continue;
    const size_t mark = ops.mark();
    float* out = ops.alloc(wanted * V);
    link_->recv_outputs(ops, out, wanted * V);
    scatter_logits(mb, out);
    ops.release_to(mark);
  }
}

void Engine::limit_state(int64_t cmp_pages, int64_t swa_pages) {
  for (auto& sh : shards_) sh->pool().limit(cmp_pages, swa_pages);
}

}  // namespace hs
