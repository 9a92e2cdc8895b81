// Compressor pooling, lightning-indexer scores/top-k and attention with a sink.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/cpu/ops.h"

namespace hs::cpu {

void compress_pool(const float* kv, const float* gate, int slots, int64_t d, float* out) {
  for (int64_t ch = 0; ch < d; ++ch) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int s = 0; s < slots; ++s) mx = std::max(mx, gate[s * d + ch]);
    double den = 0, num = 0;
    for (int s = 0; s < slots; ++s) {
      const float g = gate[s * d + ch];
      if (g == -std::numeric_limits<float>::infinity()) continue;  // absent slot: weight 0
      const double e = std::exp(static_cast<double>(g - mx));
      den += e;
      num += e * kv[s * d + ch];
    }
    out[ch] = static_cast<float>(num / den);
  }
}

void indexer_scores(const float* q, const float* w, int ih, int64_t id, const float* keys, int64_t n_entries,
                    float* score) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(id));
  for (int64_t i = 0; i < n_entries; ++i) {
    const float* k = keys + i * id;
    double s = 0;
    for (int h = 0; h < ih; ++h) {
      double dotp = 0;
      for (int64_t c = 0; c < id; ++c) dotp += static_cast<double>(q[h * id + c]) * k[c];
      const float r = std::max(0.0f, static_cast<float>(dotp)) * scale;
      s += static_cast<double>(r) * w[h];
    }
    score[i] = static_cast<float>(s);
  }
}

std::vector<int32_t> topk_indices(const float* score, int64_t n_visible, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n_visible));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t kk = std::min(k, n_visible);
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int32_t a, int32_t b) {
    return score[a] > score[b] || (score[a] == score[b] && a < b);
  });
  idx.resize(static_cast<size_t>(kk));
  return idx;
}

void attention_sink(const float* q, int64_t heads, int64_t hd, const float* const* rows, int64_t n_rows,
                    const float* sinks, float scale, float* out) {
  std::vector<double> logit(static_cast<size_t>(n_rows));
  for (int64_t h = 0; h < heads; ++h) {
    const float* qh = q + h * hd;
    double mx = sinks[h];
    for (int64_t j = 0; j < n_rows; ++j) {
      double d = 0;
      for (int64_t c = 0; c < hd; ++c) d += static_cast<double>(qh[c]) * rows[j][c];
      logit[static_cast<size_t>(j)] = d * scale;
      mx = std::max(mx, logit[static_cast<size_t>(j)]);
    }
    double den = std::exp(static_cast<double>(sinks[h]) - mx);
    for (int64_t j = 0; j < n_rows; ++j) {
      logit[static_cast<size_t>(j)] = std::exp(logit[static_cast<size_t>(j)] - mx);
      den += logit[static_cast<size_t>(j)];
    }
    float* oh = out + h * hd;
    for (int64_t c = 0; c < hd; ++c) {
      double s = 0;
      for (int64_t j = 0; j < n_rows; ++j) s += logit[static_cast<size_t>(j)] * rows[j][c];
      oh[c] = static_cast<float>(s / den);
    }
  }
}

}  // namespace hs::cpu
