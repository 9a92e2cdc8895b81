#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "util/error.h"

namespace hs {

namespace {

// Sorts ids (given in ascending order) by (logit desc, id asc): a stable LSD radix sort on the
// logits' order-preserving bit patterns, the same order as comparing the floats (-0 as +0),
// in four linear passes instead of a comparison sort (a 129,280-id row: ~1 ms, not ~15).
void radix_sort_desc(const float* logits, std::vector<int32_t>& ids) {
  const size_t n = ids.size();
  std::vector<uint32_t> key(n), key2(n);
  std::vector<int32_t> ids2(n);
  for (size_t i = 0; i < n; ++i) {
    const float f = logits[ids[i]] == 0.0f ? 0.0f : logits[ids[i]];
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with the float
    key[i] = ~u;                                      // descending
  }
  for (int shift = 0; shift < 32; shift += 8) {
    size_t count[257] = {};
    for (size_t i = 0; i < n; ++i) ++count[((key[i] >> shift) & 0xFF) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (size_t i = 0; i < n; ++i) {
      const size_t at = count[(key[i] >> shift) & 0xFF]++;
      key2[at] = key[i];
      ids2[at] = ids[i];
    }
    key.swap(key2);
    ids.swap(ids2);
  }
}

}  // namespace

int64_t sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<int32_t>& idx,
                            std::vector<float>& ev, double& total) {
  // Candidates by (logit desc, id asc): the same order as z = logit / temperature.
  auto before = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  // Masked tokens (-inf: structured output) have no mass and sort last: leaving them out
  // changes no pick and makes a small mask cheap.
  idx.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (logits[i] != -std::numeric_limits<float>::infinity()) idx.push_back(static_cast<int32_t>(i));
  if (idx.empty()) {
    idx.resize(static_cast<size_t>(vocab));
    std::iota(idx.begin(), idx.end(), 0);
  }
  const auto n = static_cast<int64_t>(idx.size());
  const int64_t m = p.top_k > 0 ? std::min<int64_t>(p.top_k, n) : n;
  if (m < n) std::nth_element(idx.begin(), idx.begin() + m, idx.end(), before);
  idx.resize(static_cast<size_t>(m));
  if (m > 4096 && m == n) radix_sort_desc(logits, idx);
  else std::sort(idx.begin(), idx.end(), before);
  // e_i = p_i / p_0, in float as the device computes it (once each); sums in double.
  const float inv_t = 1.0f / p.temperature;
  const float z0 = logits[idx[0]] * inv_t;
  ev.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) ev[static_cast<size_t>(i)] = std::exp(logits[idx[static_cast<size_t>(i)]] * inv_t - z0);
  auto e = [&](int64_t i) { return static_cast<double>(ev[static_cast<size_t>(i)]); };
  // min-p: e_i is non-increasing, so the survivors are a prefix (at least the first).
  int64_t m2 = m;
  if (p.min_p > 0.0f) {
    m2 = 1;
    while (m2 < m && e(m2) >= p.min_p) ++m2;
  }
  // top-p over the survivors: the shortest prefix whose mass reaches top_p of theirs.
  double z2 = 0;
  for (int64_t i = 0; i < m2; ++i) z2 += e(i);
  int64_t m3 = m2;
  total = z2;
  if (p.top_p < 1.0f) {
    double c = 0;
    for (int64_t i = 0; i < m2; ++i) {
      c += e(i);
      if (c >= p.top_p * z2) {
        m3 = i + 1;
        total = c;
        break;
      }
    }
  }
  return m3;
}

int32_t pick_token(const float* logits, int64_t vocab, const SamplingParams& p, float u, std::vector<int32_t>& idx) {
  if (!draws_uniform(p)) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  std::vector<float> ev;
  double z3 = 0;
  const int64_t m3 = sampling_candidates(logits, vocab, p, idx, ev, z3);
  // The first candidate whose cumulative mass exceeds u * z3.
  double c = 0;
  for (int64_t i = 0; i < m3; ++i) {
    c += static_cast<double>(ev[static_cast<size_t>(i)]);
    if (c > u * z3) return idx[static_cast<size_t>(i)];
  }
  return idx[static_cast<size_t>(m3 - 1)];
}

SampleResult Sampler::sample(const float* logits, int64_t vocab, float u) {
  HS_CHECK(vocab > 0, "sampler: empty vocabulary");
  SampleResult res;
  // Log-softmax of the raw logits (what logprobs report).
  float log_z = 0;
  if (p_.logprob || p_.top_logprobs > 0) {
    float mx = logits[0];
    for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
    double z = 0;
    for (int64_t i = 0; i < vocab; ++i) z += std::exp(static_cast<double>(logits[i] - mx));
    log_z = mx + static_cast<float>(std::log(z));
  }

  const float* w = logits;
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    work_.assign(logits, logits + vocab);
    for (const auto& [tok, n] : counts_)
      if (tok >= 0 && tok < vocab) work_[static_cast<size_t>(tok)] -= p_.presence_penalty + p_.frequency_penalty * n;
    w = work_.data();
  }
  const int32_t chosen = pick_token(w, vocab, p_, u, idx_);
  res.token = chosen;
  if (p_.logprob || p_.top_logprobs > 0) res.logprob = logits[chosen] - log_z;
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
