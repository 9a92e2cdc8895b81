// Speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
// Decoding"; Chen et al. 2023): k drafted tokens d_i ~ q_i are checked against the target's
// distributions p_0..p_k of one verify step. d_i is accepted with probability min(1, p(d)/q(d));
// at the first rejection the token is drawn from norm(max(p - q, 0)); when all k are accepted a
// bonus token is drawn from p_k. The output has exactly the target's distribution. p and q are
// the distributions the sampler draws from (sampling_probs: temperature, top-k, min-p, top-p),
// so greedy decoding (one-hot p and q) accepts exactly the drafts equal to the target's argmax.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace hs {

// The distribution pick_token(logits, vocab, p, u) draws from as u runs over [0, 1): greedy
// (temperature <= 0 or top_k == 1) is one-hot at pick_token's argmax (ties to the lower id).
void sampling_probs(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<float>& probs);

struct DraftVerdict {
  int accepted = 0;    // drafts accepted, 0..k
  int32_t next = -1;   // the token after them (the resampled one, or the bonus)
};

// target [k + 1, vocab] and draft [k, vocab] probabilities; uniform() gives numbers in [0, 1)
// (drawn only where the outcome is random: never for one-hot p and q).
DraftVerdict verify_drafts(std::span<const int32_t> drafts, const float* target, const float* draft, int64_t vocab,
                           const std::function<float()>& uniform);

// Adaptive draft length from acceptance history (both drafters; DSpark's confidence head cuts
// further): an estimate a of the chance that a draft is accepted (exponential average over the
// drafts' outcomes) gives the longest k whose last draft still has a chance a^k >= 1/4 of being
// used; below that nothing is drafted, except one probe draft where a clock the caller gives is
// a multiple of a probe interval: 16 (or where the caller starts it), then 32, 64, up to 128
// while the probes fail (back to 16 when a draft is accepted). The intervals are powers of two,
// so sequences that share a clock (the scheduler's step count, for greedy requests:
// Slot::draft_clock) probe in the same steps (one drafter pass for all). A prompt where drafts
// fail then costs little: a shadow probe every 128 steps, and the drafter fed only the kLead
// steps before each probe (wants_rows); one where drafts start to work is noticed.
class DraftLength {
 public:
  static constexpr double kStart = 0.6;  // the estimate a request starts from, at most (Scheduler: its prior)
  static constexpr int kProbeMin = 16, kProbeMax = 128, kLead = 4;
  // probe_every: the probe interval it backs off from (Scheduler: what recent greedy requests had
  // reached, so a new one where drafts fail like theirs does not probe every 8 steps first).
  explicit DraftLength(int max_k, double start = kStart, int probe_every = kProbeMin)
      : max_k_(max_k), rate_(start), probe_every_(std::clamp(probe_every, kProbeMin, kProbeMax)) {}
  int next(int64_t step);                // drafts to make at clock value `step` (0..max_k)
  // Whether the rows of that step should reach the drafter: it drafts by its rate, or a probe
  // is at most kLead steps away (the drafter then restarts there, with that much context).
  bool wants_rows(int64_t step) const;
  void observe(int drafted, int accepted);
  bool probing() const { return probing_; }  // the last next() was a probe
  double acceptance() const { return rate_; }
  int64_t judged() const { return judged_; }  // drafts whose outcome is known so far
  int probe_every() const { return probe_every_; }

 private:
  int max_k_;
  double rate_;
  int probe_every_;
  bool probing_ = false;  // the last next() was a probe
  int64_t judged_ = 0;
  int by_rate() const;  // the longest k with a^k >= 1/4 (0: none)
};

}  // namespace hs
