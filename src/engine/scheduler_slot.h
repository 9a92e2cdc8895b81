// The scheduler's per-request slot (scheduler.cpp, and the speculative decoding of
// scheduler_draft.cpp). Private to the scheduler.
#pragma once
#include <memory>
#include <vector>

#include "engine/scheduler.h"
#include "engine/speculative.h"

namespace hs {

struct Scheduler::Slot {
  std::unique_ptr<Sequence> seq;  // allocated once; its pages go back before every reuse
  bool busy = false;
  uint64_t id = 0;
  uint64_t admitted = 0;          // admission order (the newest is preempted first)
  GenerationRequest req;
  std::unique_ptr<Sampler> sampler;
  // What is still to be prefilled: the prompt, or after a preemption the prompt and the tokens
  // generated before the last one (which the next decode step feeds); feed_samples: whether the
  // end of the feed samples a token (the prompt's does, a recompute's does not).
  std::vector<int32_t> feed;
  size_t feed_done = 0;
  bool feed_samples = true;
  bool waiting = false;           // preempted: waits for pages before it recomputes
  std::vector<int32_t> out;       // the tokens generated so far
  int32_t last = -1;
  std::vector<float> logits;
  StepSample device;  // this step's device sampling request (StepItem::sample)
  bool device_drawn = false;      // device.spec.u holds this token's uniform already (a retried step keeps it)
  std::vector<uint64_t> allowed;  // a constrained request's mask for the device sampler (device.spec.allowed)
  // Speculative decoding (scheduler_draft.cpp): whether this request drafts, how many tokens
  // this step, and the drafter rows still to feed: the model's final HC states of positions
  // pend_pos.. and the token after each but the last (whose next token is `last`).
  bool drafting = false;
  std::unique_ptr<DraftLength> draft_len;
  std::vector<int32_t> drafts;       // this step's drafted tokens
  int32_t shadow = -1;               // a backed-off probe's draft: checked against this step's own token, not verified
  // The probe's draft from the drafter's logits [V]: their argmax (no uniform of the request's
  // generator is drawn for a probe; Scheduler::shadow_probe).
  void shadow_draft(const float* logits, int64_t V, std::vector<int32_t>& idx) {
    shadow = pick_token(logits, V, SamplingParams{0.0f}, 0.0f, idx);
  }
  std::vector<float> draft_probs;    // [drafts, vocab]: the distributions they were drawn from
  std::vector<int32_t> verify;       // [last, drafts...]: the verify step's tokens
  std::vector<float> verify_logits;  // [1 + drafts, vocab]
  std::vector<float> hidden;         // this step's rows' final HC states (StepItem::hidden)
  std::vector<float> taps;           // this step's rows' DSpark taps (StepItem::taps)
  std::vector<float> pend_hidden;
  std::vector<int32_t> pend_tokens;
  int64_t pend_pos = 0, pend_n = 0;
  void clear_drafts() {
    drafts.clear();
    shadow = -1;
    draft_probs.clear();
    pend_hidden.clear();
    pend_tokens.clear();
    pend_pos = pend_n = 0;
  }
  int generated() const { return static_cast<int>(out.size()); }
  // Whether its rows go to the drafter (a drafting request on an engine with a drafter; the
  // test hook's drafts need none).
  bool feeds_drafter(const Engine& e) const { return e.drafter() && drafting && !req.test_drafts; }
  // The same for the DSpark drafter: every committed row's taps go into its context.
  bool feeds_dspark(const Engine& e) const { return e.dspark() && drafting && !req.test_drafts; }
  // Whether the rows of scheduler step `step` are kept for its drafter (MTP: the model's HC
  // states downloaded; DSpark: the taps, downloaded too): always for a verify step (verify()
  // keeps them), else not while the draft length has backed off, so failing drafts cost no
  // drafter pass and no download a step.
  bool wants_rows(const Engine& e, int64_t step) const {
    return (feeds_drafter(e) || feeds_dspark(e)) &&
           (!drafts.empty() || !draft_len || draft_len->wants_rows(draft_clock(step)));
  }
  // The count its draft length's probe grid runs on (DraftLength): a greedy request's output is
  // plain greedy's whatever it drafts, so it probes on the scheduler's step count, in the same
  // steps as the other backed-off requests; a sampled one on its own token count, so that which
  // tokens are drafted, and with them the uniforms its seed gives each token, depends on the
  // request alone (a seed reproduces whatever else runs).
  int64_t draft_clock(int64_t step) const { return draws_uniform(req.sampling) ? generated() : step; }
};

}  // namespace hs
