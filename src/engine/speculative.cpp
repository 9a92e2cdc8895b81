#include "engine/speculative.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "util/error.h"

namespace hs {

void sampling_probs(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<float>& probs) {
  probs.assign(static_cast<size_t>(vocab), 0.0f);
  std::vector<int32_t> idx;
  if (!draws_uniform(p)) {
    probs[static_cast<size_t>(pick_token(logits, vocab, p, 0.0f, idx))] = 1.0f;
    return;
  }
  std::vector<float> ev;
  double total = 0;
  const int64_t m = sampling_candidates(logits, vocab, p, idx, ev, total);
  for (int64_t i = 0; i < m; ++i)
    probs[static_cast<size_t>(idx[static_cast<size_t>(i)])] = static_cast<float>(static_cast<double>(ev[static_cast<size_t>(i)]) / total);
}

namespace {

// A draw from the weights w (not normalised, sum > 0): the first id whose cumulative weight
// exceeds u * total.
int32_t draw(const std::vector<double>& w, double total, float u) {
  double c = 0;
  int32_t last = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0) continue;
    c += w[i];
    last = static_cast<int32_t>(i);
    if (c > static_cast<double>(u) * total) return last;
  }
  return last;
}

bool one_hot(const float* p, int64_t vocab) {
  for (int64_t i = 0; i < vocab; ++i)
    if (p[i] != 0.0f && p[i] != 1.0f) return false;
  return true;
}

}  // namespace

DraftVerdict verify_drafts(std::span<const int32_t> drafts, const float* target, const float* draft, int64_t vocab,
                           const std::function<float()>& uniform) {
  DraftVerdict v;
  const auto k = static_cast<int64_t>(drafts.size());
  for (int64_t i = 0; i < k; ++i) {
    const float* p = target + i * vocab;
    const float* q = draft + i * vocab;
    const int32_t d = drafts[static_cast<size_t>(i)];
    HS_CHECK(d >= 0 && d < vocab, "draft token ", d, " is outside the vocabulary [0, ", vocab, ")");
    const double pd = p[d], qd = q[d];
    // Accept with probability min(1, p/q): no draw when that is 0 or 1.
    bool accept = qd <= 0 ? pd > 0 : pd >= qd ? true : pd <= 0 ? false : static_cast<double>(uniform()) * qd < pd;
    if (accept) {
      ++v.accepted;
      continue;
    }
    std::vector<double> r(static_cast<size_t>(vocab));
    double total = 0;
    for (int64_t j = 0; j < vocab; ++j) {
      r[static_cast<size_t>(j)] = std::max(0.0, static_cast<double>(p[j]) - static_cast<double>(q[j]));
      total += r[static_cast<size_t>(j)];
    }
    if (total <= 0) {  // p == q (up to rounding): the residual is empty, p itself is the answer
      for (int64_t j = 0; j < vocab; ++j) total += (r[static_cast<size_t>(j)] = p[j]);
    }
    int nonzero = 0;
    for (double x : r) nonzero += x > 0;
    v.next = nonzero == 1 ? static_cast<int32_t>(std::find_if(r.begin(), r.end(), [](double x) { return x > 0; }) - r.begin())
                          : draw(r, total, uniform());
    return v;
  }
  const float* p = target + k * vocab;  // every draft accepted: the bonus token from p_k
  std::vector<double> w(p, p + vocab);
  double total = 0;
  for (double x : w) total += x;
  if (one_hot(p, vocab)) {
    v.next = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
  } else {
    v.next = draw(w, total, uniform());
  }
  return v;
}

int DraftLength::by_rate() const {
  int k = 0;
  double chance = 1.0;
  while (k < max_k_ && chance * rate_ >= 0.25) {
    chance *= rate_;
    ++k;
  }
  return k;
}

int DraftLength::next(int64_t step) {
  const int k = by_rate();
  probing_ = false;
  if (k > 0) return k;
  if (step % probe_every_ == 0) {
    probing_ = true;
    return std::min(1, max_k_);
  }
  return 0;
}

bool DraftLength::wants_rows(int64_t step) const {
  const int64_t until_probe = (probe_every_ - step % probe_every_) % probe_every_;
  return by_rate() > 0 || (until_probe >= 1 && until_probe <= kLead);
}

void DraftLength::observe(int drafted, int accepted) {
  // The drafts after the first rejected one were never judged: they say nothing.
  const int judged = std::min(drafted, accepted + 1);
  judged_ += judged;
  for (int i = 0; i < judged; ++i) rate_ = 0.85 * rate_ + 0.15 * (i < accepted ? 1.0 : 0.0);
  // An accepted draft brings the probes back to the shortest interval; a failed probe doubles it
  // (drafts by the rate that fail keep it: a request that started from a longer one goes on there).
  if (accepted > 0) probe_every_ = kProbeMin;
  else if (probing_) probe_every_ = std::min(2 * probe_every_, kProbeMax);
}

}  // namespace hs
