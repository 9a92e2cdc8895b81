// Speculative decoding in the scheduler (issue 16): each drafting decoder gets k drafted tokens
// from the MTP drafter (batched over the sequences, one drafter pass per draft position), the
// engine step verifies them with k + 1 rows (the sequence's last token and the drafts, all
// positions' logits), rejection sampling (engine/speculative.h) keeps a prefix of them plus one
// token, and the rejected tail is rolled back in the model's state and in the drafter's.
//
// The drafter's row for position p continues the model's final HC state at p with token p + 1,
// so it lags the model by one: the rows of a step are kept (Slot::pend_*) until the token after
// each is known (a prompt chunk's next prompt token; the sampled token) and fed then, in the
// next drafting pass (or, for prompt chunks, right after the step).
#include <algorithm>

#include "engine/mtp.h"
#include "engine/scheduler_slot.h"
#include "util/error.h"
#include "util/log.h"

namespace hs {

namespace {

// Puts the drafter state where the pending rows begin: a state that is elsewhere (a restored
// prefix, a reset) starts afresh there. The MTP block is SWA-only (ratio 0: attention depends
// only on relative positions), so starting at an offset costs only the context before it.
void align(Sequence& seq, int64_t pos) {
  if (seq.draft->n_past() + seq.draft_offset == pos) return;
  seq.draft->reset();
  seq.draft_offset = pos;
}

}  // namespace

// Drafting only ever saves steps: a drafter that fails (an error in its pass, its context)
// leaves the request decoding plainly, with a warning, instead of failing it. (Slots that were
// not drafting, or have ended, are left alone.)
void Scheduler::stop_drafting(Slot& s, const std::exception& e) {
  if (!s.busy || !s.drafting) return;
  log_warn("request ", s.id, ": speculative decoding stopped (the drafter failed): ", e.what());
  s.drafting = false;
  s.clear_drafts();
}

bool Scheduler::may_draft(const GenerationRequest& q) const {
  if (opts_.draft_max <= 0 || (!engine_.drafter() && !engine_.dspark() && !q.test_drafts)) return false;
  const SamplingParams& p = q.sampling;
  return !q.logprobs && p.top_logprobs == 0 && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f &&
         !q.constraint && !q.forced_token && !q.override_token;
}

void Scheduler::keep_rows(Slot& s, const StepItem& item, bool prefill) {
  if (!item.hidden || !s.feeds_drafter(engine_)) return;
  const int64_t per = engine_.config().hc_mult * engine_.config().dim;
  const int64_t p0 = s.seq->n_past() - item.n;  // (the step has run)
  if (s.pend_n > 0 && s.pend_pos + s.pend_n != p0) s.clear_drafts();
  if (s.pend_n == 0) s.pend_pos = p0;
  if (s.pend_n > static_cast<int64_t>(s.pend_tokens.size())) s.pend_tokens.push_back(item.tokens[0]);
  s.pend_hidden.insert(s.pend_hidden.end(), item.hidden, item.hidden + item.n * per);
  s.pend_n += item.n;
  // The token after each row: the step's next tokens, and for a prompt chunk that is not the
  // feed's last, the next prompt token (a decode row's comes with the token sampled from it).
  for (int64_t j = 1; j < item.n; ++j) s.pend_tokens.push_back(item.tokens[j]);
  if (prefill && s.feed_done + static_cast<size_t>(item.n) < s.feed.size())
    s.pend_tokens.push_back(s.feed[s.feed_done + static_cast<size_t>(item.n)]);
}

void Scheduler::feed_drafter(const std::vector<Slot*>& slots) {
  MtpDrafter* d = engine_.drafter();
  if (!d) return;
  std::vector<DraftRows> rows;
  std::vector<Slot*> fed;
  for (Slot* s : slots) {
    if (!s->busy || s->pend_n == 0 || static_cast<int64_t>(s->pend_tokens.size()) != s->pend_n) continue;
    align(*s->seq, s->pend_pos);
    rows.push_back({s->seq->draft.get(), s->pend_tokens.data(), s->pend_hidden.data(), s->pend_n});
    fed.push_back(s);
  }
  if (rows.empty()) return;
  d->forward(rows, nullptr, nullptr);
  for (Slot* s : fed) s->clear_drafts();
}

void Scheduler::make_drafts(const std::vector<Slot*>& live) {
  const int64_t V = engine_.config().vocab_size, per = engine_.config().hc_mult * engine_.config().dim;
  std::vector<Slot*> ds;
  std::vector<int> ks;
  std::vector<std::pair<Slot*, int>> dsp;  // the DSpark drafter's, one pass for all
  for (Slot* s : live) {
    s->drafts.clear();
    s->draft_probs.clear();
    if (!s->drafting || s->feed_done < s->feed.size()) continue;
    if (s->req.test_drafter_fail_after >= 0 && s->generated() >= s->req.test_drafter_fail_after)
      fail("drafter failure forced by a test hook after ", s->generated(), " tokens");
    // (DSpark: its confidence head cuts this length further, make_dspark_drafts.)
    int k = s->req.test_drafts ? opts_.draft_max : s->draft_len->next(s->draft_clock(step_no_));
    // No drafts past what the request may still generate or the context can hold.
    k = static_cast<int>(std::min<int64_t>({k, s->req.max_tokens - s->generated() - 1,
                                            opts_.ctx_size - s->seq->n_past() - 1}));
    if (k <= 0) continue;
    if (s->req.test_drafts) {
      s->drafts = s->req.test_drafts(s->generated(), k);
      if (static_cast<int>(s->drafts.size()) > k) s->drafts.resize(static_cast<size_t>(k));
      s->draft_probs.assign(s->drafts.size() * static_cast<size_t>(V), 0.0f);
      for (size_t i = 0; i < s->drafts.size(); ++i) {
        const int32_t t = s->drafts[i];
        HS_CHECK(t >= 0 && t < V, "test_drafts: token ", t, " is outside the vocabulary");
        s->draft_probs[i * static_cast<size_t>(V) + static_cast<size_t>(t)] = 1.0f;
      }
      continue;
    }
    if (s->feeds_dspark(engine_)) {
      dsp.emplace_back(s, k);
      continue;
    }
    if (!engine_.drafter() || s->pend_n == 0) continue;  // (no row to continue from yet)
    ds.push_back(s);
    ks.push_back(k);
  }
  make_dspark_drafts(dsp);
  if (ds.empty()) return;
  MtpDrafter& d = *engine_.drafter();
  // Pass 1: every pending row (the model's own states), the last continued with the last token.
  std::vector<std::vector<int32_t>> first(ds.size());
  std::vector<DraftRows> rows;
  for (size_t i = 0; i < ds.size(); ++i) {
    Slot& s = *ds[i];
    first[i] = s.pend_tokens;
    first[i].push_back(s.last);
    align(*s.seq, s.pend_pos);
    rows.push_back({s.seq->draft.get(), first[i].data(), s.pend_hidden.data(), s.pend_n});
  }
  std::vector<float> logits(ds.size() * static_cast<size_t>(V)), hid(ds.size() * static_cast<size_t>(per));
  d.forward(rows, logits.data(), hid.data());
  std::vector<size_t> at(ds.size());  // each slot's row in this pass's outputs
  for (size_t i = 0; i < ds.size(); ++i) at[i] = i;
  std::vector<float> q;
  std::vector<int32_t> idx;
  for (int j = 0;; ++j) {
    // Draft j of each slot that wants it, drawn from the drafter's distribution (sampling_probs
    // is what pick_token draws from, so q is exactly the draft's distribution).
    std::vector<size_t> next;
    for (size_t i = 0; i < ds.size(); ++i) {
      if (ks[i] <= j) continue;
      Slot& s = *ds[i];
      const float* row = logits.data() + at[i] * static_cast<size_t>(V);
      if (s.draft_len->probing()) {  // a shadow probe (one draft: see shadow_probe)
        s.shadow_draft(row, V, idx);
        continue;
      }
      sampling_probs(row, V, s.sampler->params(), q);
      s.draft_probs.insert(s.draft_probs.end(), q.begin(), q.end());
      s.drafts.push_back(pick_token(row, V, s.sampler->params(), s.sampler->next_uniform(), idx));
      if (ks[i] > j + 1) next.push_back(i);
    }
    if (next.empty()) break;
    // The next pass continues each from the drafter's own output state with its draft.
    rows.clear();
    std::vector<float> chained(next.size() * static_cast<size_t>(per));
    for (size_t r = 0; r < next.size(); ++r) {
      const size_t i = next[r];
      std::copy_n(hid.data() + at[i] * static_cast<size_t>(per), per, chained.data() + r * static_cast<size_t>(per));
      rows.push_back({ds[i]->seq->draft.get(), &ds[i]->drafts.back(), chained.data() + r * static_cast<size_t>(per), 1});
    }
    logits.resize(next.size() * static_cast<size_t>(V));
    hid.resize(next.size() * static_cast<size_t>(per));
    d.forward(rows, logits.data(), hid.data());
    for (size_t r = 0; r < next.size(); ++r) at[next[r]] = r;
  }
  for (Slot* s : ds) {  // those rows are in the drafter now
    s->pend_hidden.clear();
    s->pend_tokens.clear();
    s->pend_n = 0;
  }
}

// A backed-off request's probe is not verified: its one draft (the drafter's argmax) is compared
// with the token the step gives anyway, so the step keeps one row (it can replay as a CUDA
// graph, and the MoE keeps its decode path) and no uniform of the request's generator is drawn
// for it. Greedy: the outcome is the verify step's exactly; sampled: a draft equal to the token
// drawn counts as accepted (a proxy: drafting resumes, verified, when the drafter starts to agree).
void Scheduler::shadow_probe(Slot& s, int32_t token) {
  if (s.shadow < 0) return;
  s.draft_len->observe(1, token == s.shadow ? 1 : 0);
  s.shadow = -1;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.draft_probes++;
}

void Scheduler::verify(Slot& s) {
  const int64_t V = engine_.config().vocab_size, per = engine_.config().hc_mult * engine_.config().dim;
  const int k = static_cast<int>(s.drafts.size());
  const int64_t N = s.seq->n_past() - (k + 1);  // where the verify step began
  std::vector<float> target(static_cast<size_t>((k + 1) * V)), row;
  for (int i = 0; i <= k; ++i) {
    sampling_probs(s.verify_logits.data() + static_cast<size_t>(i) * static_cast<size_t>(V), V, s.sampler->params(), row);
    std::copy(row.begin(), row.end(), target.begin() + static_cast<int64_t>(i) * V);
  }
  const DraftVerdict v = verify_drafts(s.drafts, target.data(), s.draft_probs.data(), V,
                                       [&] { return s.sampler->next_uniform(); });
  const int a = v.accepted;
  // The rejected tail goes: the model keeps its last token and the accepted drafts, the drafter
  // the rows it made from the model's own states (positions < N).
  engine_.truncate(*s.seq, N + a + 1);
  if (s.feeds_drafter(engine_)) {
    Sequence& q = *s.seq;
    if (q.draft->n_past() + q.draft_offset > N) engine_.drafter()->truncate(*q.draft, N - q.draft_offset);
    s.pend_pos = N;
    s.pend_n = a + 1;
    s.pend_hidden.assign(s.hidden.begin(), s.hidden.begin() + (a + 1) * per);
    s.pend_tokens.assign(s.drafts.begin(), s.drafts.begin() + a);
  }
  if (!s.req.test_drafts) s.draft_len->observe(k, a);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.drafted_tokens += k;
    stats_.accepted_tokens += a;
    stats_.verify_steps++;
  }
  if (s.req.on_draft) s.req.on_draft(k, a);
  std::vector<int32_t> out(s.drafts.begin(), s.drafts.begin() + a);
  out.push_back(v.next);
  s.drafts.clear();
  if (s.feeds_dspark(engine_)) {  // the last token and the accepted drafts into its context
    try {
      dspark_context(s, N, a + 1);
    } catch (const std::exception& e) {
      stop_drafting(s, e);
    }
  }
  for (const int32_t t : out) {
    SampleResult r;
    r.token = t;
    if (!emit(s, r, false, false, 0.0)) return;
  }
}

}  // namespace hs
