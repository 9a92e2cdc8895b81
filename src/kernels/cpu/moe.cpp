// MoE routing (sqrt-softplus scores, bias for selection only, hash rows), the clamped SwiGLU,
// and the sampler's token mask (the twins of kernels/cuda/moe_sample.cu).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/ops.h"

namespace hs::cpu {

namespace {
inline float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }  // torch's threshold
}  // namespace

void moe_route(const float* logits, int n_experts, int k, const float* bias, const int32_t* hash_row,
               float route_scale, int32_t* idx, float* weight) {
  std::vector<float> s(static_cast<size_t>(n_experts));
  for (int e = 0; e < n_experts; ++e) s[static_cast<size_t>(e)] = std::sqrt(softplus(logits[e]));
  if (hash_row) {
    for (int i = 0; i < k; ++i) idx[i] = hash_row[i];
  } else {
    std::vector<int32_t> order(static_cast<size_t>(n_experts));
    std::iota(order.begin(), order.end(), 0);
    auto key = [&](int32_t e) { return s[static_cast<size_t>(e)] + (bias ? bias[e] : 0.0f); };
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return key(a) > key(b) || (key(a) == key(b) && a < b); });
    for (int i = 0; i < k; ++i) idx[i] = order[static_cast<size_t>(i)];
  }
  float sum = 0;
  for (int i = 0; i < k; ++i) sum += s[static_cast<size_t>(idx[i])];
  for (int i = 0; i < k; ++i) weight[i] = s[static_cast<size_t>(idx[i])] / (sum + 1e-20f) * route_scale;
}

void swiglu_clamp(const float* g, const float* u, int64_t n, float limit, float* h) {
  for (int64_t i = 0; i < n; ++i) {
    const float gg = std::min(g[i], limit);
    const float uu = std::clamp(u[i], -limit, limit);
    h[i] = gg / (1.0f + std::exp(-gg)) * uu;
  }
}

void mask_tokens(float* logits, int64_t vocab, const uint64_t* bits) {
  for (int64_t i = 0; i < vocab; ++i)
    if (!((bits[i >> 6] >> (i & 63)) & 1u)) logits[i] = -std::numeric_limits<float>::infinity();
}

}  // namespace hs::cpu
