// The DSpark drafter in the scheduler (issue 16; docs/speculative.md). Every committed row of a
// drafting request (prompt chunks, decode steps, a verify step's last token and accepted drafts)
// goes into the drafter's context with its taps (StepItem::taps); a decoder's drafts are one
// block after its last token, drawn left to right through the request's sampler (the Markov bias
// makes each depend on the one before), cut at the first draft the confidence head doubts.
// Verification, acceptance and rollback are the MTP path's (scheduler_draft.cpp verify).
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
  d->add_context(*s.seq->dspark, p0, s.taps.data(), n);
}

void Scheduler::make_dspark_drafts(Slot& s, int k) {
  if (!engine_.dspark() || !s.seq->dspark) return;
  DsparkDrafter& d = *engine_.dspark();
  DsparkSequence& ds = *s.seq->dspark;
  // The context must end right before the last token (its position is n_past): otherwise (the
  // first decode step after a restored prefix) there is nothing to draft from yet.
  if (ds.rows == 0 || ds.next != s.seq->n_past()) return;
  k = std::min(k, d.block());
  if (k <= 0) return;
  const int64_t V = engine_.config().vocab_size;
  const DsparkBlock b = d.draft_block(ds, s.last);
  std::vector<float> logits(static_cast<size_t>(V)), q;
  std::vector<int32_t> idx;
  int32_t prev = s.last;
  for (int j = 0; j < k; ++j) {
    float conf = 0.0f;
    d.step(b, j, prev, logits.data(), &conf);
    if (s.draft_len->probing()) {  // a shadow probe (scheduler_draft.cpp shadow_probe), no confidence cut
      s.shadow_draft(logits.data(), V, idx);
      return;
    }
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

}  // namespace hs
