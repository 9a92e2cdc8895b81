// The DSpark drafter in the scheduler (issue 16; docs/speculative.md). Every committed row of a
// drafting request (prompt chunks, decode steps, a verify step's last token and accepted drafts)
// goes into the drafter's context with its taps (StepItem::taps); a decoder's drafts are one
// block after its last token, drawn left to right through the request's sampler (the Markov bias
// makes each depend on the one before), cut at the first draft the confidence head doubts.
// Verification, acceptance and rollback are the MTP path's (scheduler_draft.cpp verify). The
// step's context rows, and its blocks, go through the drafter in one pass for all requests.
#include <algorithm>
#include <cmath>

#include "engine/dspark.h"
#include "engine/scheduler_slot.h"
#include "engine/speculative.h"
#include "util/error.h"

namespace hs {

void Scheduler::dspark_context(Slot& s, int64_t p0, int64_t n) {
  DsparkDrafter* d = engine_.dspark();
  if (!d || n <= 0 || !s.seq->dspark) return;
  HS_CHECK(static_cast<int64_t>(s.taps.size()) >= n * d->tap_width(), "internal: DSpark taps of ", n, " rows missing");
  dspark_rows_.push_back({&s, s.id, p0, n});
}

// One drafter pass for the step's context rows of every request (backed-off requests take taps
// in the same steps, before their aligned probes: their rows come together).
void Scheduler::flush_dspark_context() {
  DsparkDrafter* d = engine_.dspark();
  std::vector<DsparkContextRows> rows;
  std::vector<Slot*> fed;
  for (const DsparkRows& r : dspark_rows_) {
    Slot& s = *r.slot;
    if (!s.busy || s.id != r.id || !s.drafting || !s.seq->dspark) continue;
    rows.push_back({s.seq->dspark.get(), r.p0, s.taps.data(), r.n});
    fed.push_back(&s);
  }
  dspark_rows_.clear();
  if (!d || rows.empty()) return;
  try {
    d->add_context(rows);
  } catch (const std::exception& e) {  // one pass for all: every request in it stops drafting
    for (Slot* s : fed) stop_drafting(*s, e);
  }
}

void Scheduler::make_dspark_drafts(const std::vector<std::pair<Slot*, int>>& want) {
  if (!engine_.dspark() || want.empty()) return;
  DsparkDrafter& d = *engine_.dspark();
  std::vector<Slot*> slots;
  std::vector<int> ks;
  std::vector<const DsparkSequence*> seqs;
  std::vector<int32_t> anchors;
  for (const auto& [s, k0] : want) {
    if (!s->seq->dspark) continue;
    const DsparkSequence& ds = *s->seq->dspark;
    // The context must end right before the last token (its position is n_past): otherwise (the
    // first decode step after a restored prefix) there is nothing to draft from yet.
    if (ds.rows == 0 || ds.next != s->seq->n_past()) continue;
    const int k = std::min(k0, d.block());
    if (k <= 0) continue;
    slots.push_back(s);
    ks.push_back(k);
    seqs.push_back(&ds);
    anchors.push_back(s->last);
  }
  if (slots.empty()) return;
  // Only the drafts asked for get logits (a shadow probe asks for one).
  const std::vector<DsparkBlock> blocks = d.draft_blocks(seqs, anchors, ks);
  const int64_t V = engine_.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(V)), q;
  std::vector<int32_t> idx;
  // The shadow probes (scheduler_draft.cpp shadow_probe; no confidence cut): their first drafts
  // in one pass.
  std::vector<const DsparkBlock*> pb;
  std::vector<int32_t> prevs;
  std::vector<Slot*> probing;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i]->draft_len->probing()) {
      pb.push_back(&blocks[i]);
      prevs.push_back(slots[i]->last);
      probing.push_back(slots[i]);
    }
  if (!pb.empty()) {
    std::vector<float> pl(pb.size() * static_cast<size_t>(V));
    d.steps(pb, std::vector<int>(pb.size(), 0), prevs, pl.data());
    for (size_t i = 0; i < probing.size(); ++i) probing[i]->shadow_draft(pl.data() + i * V, V, idx);
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = *slots[i];
    if (s.draft_len->probing()) continue;
    const DsparkBlock& b = blocks[i];
    int32_t prev = s.last;
    for (int j = 0; j < ks[i]; ++j) {
      float conf = 0.0f;
      d.step(b, j, prev, logits.data(), &conf);
      // DeepSpec's confident prefix: stop at the first draft below the threshold. A head that
      // doubts even the first draft counts as a rejected one for the draft length: a request
      // where it keeps doubting backs off (no taps, no block pass a step) like one whose drafts fail.
      if (opts_.draft_confidence > 0.0f && 1.0 / (1.0 + std::exp(-static_cast<double>(conf))) < opts_.draft_confidence) {
        if (j == 0) s.draft_len->observe(1, 0);
        break;
      }
      sampling_probs(logits.data(), V, s.sampler->params(), q);
      s.draft_probs.insert(s.draft_probs.end(), q.begin(), q.end());
      prev = pick_token(logits.data(), V, s.sampler->params(), s.sampler->next_uniform(), idx);
      s.drafts.push_back(prev);
    }
  }
}

}  // namespace hs
