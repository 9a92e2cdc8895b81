#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "util/error.h"

namespace hs {

SampleResult Sampler::sample(const float* logits, int64_t vocab) {
  HS_CHECK(vocab > 0, "sampler: empty vocabulary");
  SampleResult res;
  // Log-softmax of the raw logits (what logprobs report).
  float mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double z = 0;
  for (int64_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(logits[i] - mx));
  const float log_z = mx + static_cast<float>(std::log(z));

  work_.assign(logits, logits + vocab);
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f)
    for (const auto& [tok, n] : counts_)
      if (tok >= 0 && tok < vocab) work_[static_cast<size_t>(tok)] -= p_.presence_penalty + p_.frequency_penalty * n;

  int32_t chosen = 0;
  if (p_.temperature <= 0.0f) {
    for (int64_t i = 1; i < vocab; ++i)
      if (work_[static_cast<size_t>(i)] > work_[static_cast<size_t>(chosen)]) chosen = static_cast<int32_t>(i);
  } else {
    // Candidates by descending logit; top-k cuts first, then top-p and min-p on the softmax.
    idx_.resize(static_cast<size_t>(vocab));
    std::iota(idx_.begin(), idx_.end(), 0);
    auto by_logit = [&](int32_t a, int32_t b) {
      return work_[static_cast<size_t>(a)] > work_[static_cast<size_t>(b)] ||
             (work_[static_cast<size_t>(a)] == work_[static_cast<size_t>(b)] && a < b);
    };
    int64_t k = vocab;
    if (p_.top_k > 0 && p_.top_k < vocab) {
      k = p_.top_k;
      std::nth_element(idx_.begin(), idx_.begin() + k, idx_.end(), by_logit);
    }
    idx_.resize(static_cast<size_t>(k));
    std::sort(idx_.begin(), idx_.end(), by_logit);
    const float top = work_[static_cast<size_t>(idx_[0])];
    std::vector<double> prob(idx_.size());
    double sum = 0;
    for (size_t i = 0; i < idx_.size(); ++i) {
      prob[i] = std::exp(static_cast<double>((work_[static_cast<size_t>(idx_[i])] - top) / p_.temperature));
      sum += prob[i];
    }
    size_t keep = idx_.size();
    if (p_.top_p < 1.0f) {
      double cum = 0;
      for (size_t i = 0; i < idx_.size(); ++i) {
        cum += prob[i] / sum;
        if (cum >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
    }
    if (p_.min_p > 0.0f) {
      const double floor_p = p_.min_p * prob[0];  // prob[0] is the largest
      size_t m = 1;
      while (m < keep && prob[m] >= floor_p) ++m;
      keep = m;
    }
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += prob[i];
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * kept;
    double acc = 0;
    chosen = idx_[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      acc += prob[i];
      if (u < acc) {
        chosen = idx_[i];
        break;
      }
    }
  }
  res.token = chosen;
  res.logprob = logits[chosen] - log_z;
  if (p_.top_logprobs > 0) {
    const int64_t n = std::min<int64_t>(p_.top_logprobs, vocab);
    std::vector<int32_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + n, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int64_t i = 0; i < n; ++i) res.top.push_back({order[static_cast<size_t>(i)], logits[order[static_cast<size_t>(i)]] - log_z});
  }
  return res;
}

}  // namespace hs
