#include "engine/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/ops.h"
#include "util/error.h"

namespace hs {

float* CpuOps::alloc(int64_t n) {
  scratch_.push_back(std::make_unique<float[]>(static_cast<size_t>(std::max<int64_t>(n, 1))));
  return scratch_.back().get();
}

void CpuOps::upload(float* dst, const float* host, int64_t n) { std::memcpy(dst, host, static_cast<size_t>(n) * 4); }

void CpuOps::download(float* host, const float* src, int64_t n) { std::memcpy(host, src, static_cast<size_t>(n) * 4); }

void CpuOps::embed(const Mat& table, const int32_t* tokens, int64_t n, int hc, float* X) {
  for (int64_t t = 0; t < n; ++t) {
    for (int j = 0; j < hc; ++j)
      std::memcpy(X + (t * hc + j) * table.cols, table.row(tokens[t]), static_cast<size_t>(table.cols) * 4);
  }
}

void CpuOps::matmul(const Mat& W, const float* x, int64_t n, float* y) {
  cpu::matmul(pool_, W.w.data(), W.rows, W.cols, x, n, y);
}

void CpuOps::grouped_matmul(const Mat& W, int groups, const float* x, int64_t n, float* y) {
  const int64_t R = W.rows / groups, in = W.cols;
  std::vector<float> xg(static_cast<size_t>(n * in)), yg(static_cast<size_t>(n * R));
  for (int g = 0; g < groups; ++g) {
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(xg.data() + t * in, x + t * groups * in + g * in, static_cast<size_t>(in) * 4);
    cpu::matmul(pool_, W.w.data() + g * R * in, R, in, xg.data(), n, yg.data());
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(y + t * groups * R + g * R, yg.data() + t * R, static_cast<size_t>(R) * 4);
  }
}

void CpuOps::rmsnorm(const float* x, const std::vector<float>& w, int64_t rows, float eps, float* y) {
  cpu::rmsnorm(x, w.data(), rows, static_cast<int64_t>(w.size()), eps, y);
}

void CpuOps::rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps) {
  cpu::rmsnorm_unweighted(x, rows, d, eps);
}

void CpuOps::rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const RopeTable& t, const int64_t* pos,
                  int sign) {
  cpu::rope(x, n, heads, head_dim, t.rope_dim, pos, t.inv_freq.data(), sign);
}

void CpuOps::scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuOps::add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void CpuOps::hc_pre(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* u, float* post,
                    float* comb) {
  cpu::HcParams p{w.fn.data(), w.base.data(), w.scale.data(), c.hc_mult, c.dim, c.hc_sinkhorn_iters, c.hc_eps,
                  c.norm_eps};
  cpu::hc_pre(pool_, p, X, n, u, post, comb);
}

void CpuOps::hc_post(const float* y, const float* post, const float* comb, int64_t n, const ModelConfig& c,
                     float* X) {
  cpu::hc_post(y, post, comb, n, c.hc_mult, c.dim, X);
}

void CpuOps::hc_head(const HcWeights& w, const ModelConfig& c, const float* X, int64_t n, float* h) {
  cpu::hc_head(w.fn.data(), w.base.data(), w.scale.data(), c.hc_mult, c.dim, c.hc_eps, c.norm_eps, X, n, h);
}

void CpuOps::hc_stream_mean(const float* X, int64_t n, const ModelConfig& c, float* out, int64_t stride) {
  cpu::hc_stream_mean(X, n, c.hc_mult, c.dim, out, stride);
}

void CpuOps::moe(const LayerWeights& w, const ModelConfig& c, const float* x, const float* xq, const int32_t* tokens,
                 int64_t n, Numerics num, float* y) {
  const bool model = num == Numerics::Model;
  const int E = c.n_experts, K = c.n_active_experts;
  const int64_t D = c.dim, I = c.moe_inter;
  // The experts' input: x, or under model numerics its FP8 round trip (row by row, so the routed
  // experts' gathered rows are the same whether quantised before or after the gather).
  std::vector<float> xq_own;
  const float* xe = x;
  if (model) {
    if (!xq) {
      xq_own.assign(x, x + n * D);
      act_quant_fp8(xq_own.data(), n, D);
      xq = xq_own.data();
    }
    xe = xq;
  }
  std::vector<float> logits(static_cast<size_t>(n * E));
  cpu::matmul(pool_, w.gate.w.data(), E, D, x, n, logits.data());
  std::vector<int32_t> idx(static_cast<size_t>(n * K));
  std::vector<float> wt(static_cast<size_t>(n * K));
  for (int64_t t = 0; t < n; ++t) {
    const int32_t* hash = w.tid2eid.empty() ? nullptr : w.tid2eid.data() + static_cast<int64_t>(tokens[t]) * K;
    cpu::moe_route(logits.data() + t * E, E, K, w.gate_bias.empty() ? nullptr : w.gate_bias.data(), hash,
                   c.route_scale, idx.data() + t * K, wt.data() + t * K);
  }
  // Routed experts in ascending expert id, each over the tokens routed to it.
  std::fill(y, y + n * D, 0.0f);
  std::vector<float> xs, g, u, h, d;
  for (int e = 0; e < E; ++e) {
    std::vector<std::pair<int64_t, float>> toks;
    for (int64_t t = 0; t < n; ++t)
      for (int k = 0; k < K; ++k)
        if (idx[static_cast<size_t>(t * K + k)] == e) toks.push_back({t, wt[static_cast<size_t>(t * K + k)]});
    if (toks.empty()) continue;
    const int64_t m = static_cast<int64_t>(toks.size());
    xs.resize(static_cast<size_t>(m * D));
    for (int64_t i = 0; i < m; ++i) std::memcpy(xs.data() + i * D, xe + toks[i].first * D, static_cast<size_t>(D) * 4);
    g.resize(static_cast<size_t>(m * I));
    u.resize(g.size());
    h.resize(g.size());
    d.resize(static_cast<size_t>(m * D));
    cpu::matmul(pool_, w.w1.row(e * I), I, D, xs.data(), m, g.data());
    cpu::matmul(pool_, w.w3.row(e * I), I, D, xs.data(), m, u.data());
    cpu::swiglu_clamp(g.data(), u.data(), m * I, c.swiglu_limit, h.data());
    // The routing weight scales h before the down projection (ds4-model-spec.md §6.5).
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < I; ++j) h[static_cast<size_t>(i * I + j)] *= toks[static_cast<size_t>(i)].second;
    if (model) act_quant_fp8(h.data(), m, I);
    cpu::matmul(pool_, w.w2.row(e * D), D, I, h.data(), m, d.data());
    if (model) cpu::round_bf16(d.data(), m * D);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t ch = 0; ch < D; ++ch) y[toks[i].first * D + ch] += d[i * D + ch];
  }
  // Shared expert, same clamped SwiGLU, no routing weight.
  g.resize(static_cast<size_t>(n * I));
  u.resize(g.size());
  h.resize(g.size());
  d.resize(static_cast<size_t>(n * D));
  cpu::matmul(pool_, w.sh_w1.w.data(), I, D, xe, n, g.data());
  cpu::matmul(pool_, w.sh_w3.w.data(), I, D, xe, n, u.data());
  cpu::swiglu_clamp(g.data(), u.data(), n * I, c.swiglu_limit, h.data());
  if (model) act_quant_fp8(h.data(), n, I);
  cpu::matmul(pool_, w.sh_w2.w.data(), D, I, h.data(), n, d.data());
  if (model) cpu::round_bf16(d.data(), n * D);
  for (int64_t i = 0; i < n * D; ++i) y[i] += d[i];
  if (model) cpu::round_bf16(y, n * D);
}

void CpuOps::round_bf16(float* x, int64_t n) { cpu::round_bf16(x, n); }

void CpuOps::act_quant_fp8(float* x, int64_t rows, int64_t cols) { cpu::fp8_round_trip(x, rows, cols, cols, 128); }

void CpuOps::kv_fp8_sim(float* x, int64_t rows, int64_t head_dim, int64_t channels) {
  cpu::fp8_round_trip(x, rows, head_dim, channels, 64);
  cpu::round_bf16(x, rows * head_dim);
}

void CpuOps::indexer_fp4_sim(float* x, int64_t rows, int64_t d) {
  cpu::hadamard(x, rows, d);
  cpu::round_bf16(x, rows * d);
  cpu::fp4_round_trip(x, rows, d, 32);
  cpu::round_bf16(x, rows * d);
}

}  // namespace hs
