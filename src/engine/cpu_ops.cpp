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

void CpuOps::compressor_update(CompressorState& st, const CompressorWeights& w, const float* a, const float* g,
                               int64_t n, float eps, const RopeTable& rope, Numerics num, EntryQat qat) {
  const int r = st.ratio, co = st.coff;
  const int64_t d = st.d, width = co * d;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> kv(static_cast<size_t>(2 * r * d)), gate(kv.size()), z(static_cast<size_t>(d));
  for (int64_t t = 0; t < n; ++t) {
    std::memcpy(st.buf_kv.data() + st.buf_n * width, a + t * width, static_cast<size_t>(width) * 4);
    std::memcpy(st.buf_gate.data() + st.buf_n * width, g + t * width, static_cast<size_t>(width) * 4);
    if (++st.buf_n < r) continue;
    // A window closed: its entry index is n_entries, its first position n_entries * r.
    int slots = 0;
    if (co == 2) {  // overlapping CSA: previous window's first half, then this window's second half
      for (int s = 0; s < r; ++s)
        for (int64_t ch = 0; ch < d; ++ch) {
          kv[s * d + ch] = st.has_prev ? st.prev_kv[s * d + ch] : 0.0f;
          gate[s * d + ch] = st.has_prev ? st.prev_gate[s * d + ch] : kNegInf;
        }
      for (int s = 0; s < r; ++s)
        for (int64_t ch = 0; ch < d; ++ch) {
          kv[(r + s) * d + ch] = st.buf_kv[s * width + d + ch];
          gate[(r + s) * d + ch] = st.buf_gate[s * width + d + ch] + w.ape[s * width + d + ch];
          st.prev_kv[s * d + ch] = st.buf_kv[s * width + ch];
          st.prev_gate[s * d + ch] = st.buf_gate[s * width + ch] + w.ape[s * width + ch];
        }
      st.has_prev = true;
      slots = 2 * r;
    } else {
      for (int s = 0; s < r; ++s)
        for (int64_t ch = 0; ch < d; ++ch) {
          kv[s * d + ch] = st.buf_kv[s * d + ch];
          gate[s * d + ch] = st.buf_gate[s * d + ch] + w.ape[s * d + ch];
        }
      slots = r;
    }
    cpu::compress_pool(kv.data(), gate.data(), slots, d, z.data());
    const bool model = num == Numerics::Model;
    if (model) cpu::round_bf16(z.data(), d);
    cpu::rmsnorm(z.data(), w.norm.data(), 1, d, eps, z.data());
    if (model) cpu::round_bf16(z.data(), d);
    const int64_t pos = st.n_entries * r;
    cpu::rope(z.data(), 1, 1, d, rope.rope_dim, &pos, rope.inv_freq.data(), +1);
    if (model && qat == EntryQat::Fp8Kv) kv_fp8_sim(z.data(), 1, d, d - rope.rope_dim);
    if (model && qat == EntryQat::IndexerFp4) indexer_fp4_sim(z.data(), 1, d);
    if (model && qat == EntryQat::None) cpu::round_bf16(z.data(), d);
    st.entries.insert(st.entries.end(), z.begin(), z.end());
    ++st.n_entries;
    st.buf_n = 0;
  }
}

void CpuOps::indexer_topk(const float* q, const float* w, int64_t n, int ih, int64_t id, const CompressorState& keys,
                          int64_t p0, int ratio, int k, int32_t* sel) {
  pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    std::vector<float> score(static_cast<size_t>(keys.n_entries));
    for (int64_t t = b; t < e; ++t) {
      const int64_t visible = std::min<int64_t>(keys.n_entries, (p0 + t + 1) / ratio);
      cpu::indexer_scores(q + t * ih * id, w + t * ih, ih, id, keys.entries.data(), visible, score.data());
      const std::vector<int32_t> top = cpu::topk_indices(score.data(), visible, k);
      for (int j = 0; j < k; ++j) sel[t * k + j] = j < static_cast<int>(top.size()) ? top[static_cast<size_t>(j)] : -1;
    }
  });
}

void CpuOps::attention(const float* q, int64_t n, const ModelConfig& c, const LayerState& st, const float* kv_chunk,
                       int64_t p0, const CompressorState* comp, const int32_t* sel, int k,
                       const std::vector<float>& sinks, float* out) {
  const int64_t hd = c.head_dim, W = c.window;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  pool_.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    std::vector<const float*> rows;
    for (int64_t t = b; t < e; ++t) {
      const int64_t p = p0 + t;
      rows.clear();
      for (int64_t s = std::max<int64_t>(0, p - W + 1); s <= p; ++s)
        rows.push_back(s >= p0 ? kv_chunk + (s - p0) * hd : st.ring.data() + (s % W) * hd);
      if (comp) {
        const int64_t visible = std::min<int64_t>(comp->n_entries, (p + 1) / comp->ratio);
        if (!sel) {
          for (int64_t i = 0; i < visible; ++i) rows.push_back(comp->entries.data() + i * hd);
        } else {
          for (int j = 0; j < k; ++j) {
            const int32_t i = sel[t * k + j];
            if (i < 0) continue;
            HS_CHECK(i < visible, "internal: indexer chose entry ", i, " of ", visible, " visible");
            rows.push_back(comp->entries.data() + static_cast<int64_t>(i) * hd);
          }
        }
      }
      cpu::attention_sink(q + t * c.n_heads * hd, c.n_heads, hd, rows.data(), static_cast<int64_t>(rows.size()),
                          sinks.data(), scale, out + t * c.n_heads * hd);
    }
  });
}

void CpuOps::ring_store(LayerState& st, const float* kv_chunk, int64_t n, int64_t p0, int window, int64_t head_dim) {
  for (int64_t t = std::max<int64_t>(0, n - window); t < n; ++t)
    std::memcpy(st.ring.data() + ((p0 + t) % window) * head_dim, kv_chunk + t * head_dim,
                static_cast<size_t>(head_dim) * 4);
}

void CpuOps::moe(const LayerWeights& w, const ModelConfig& c, const float* x, const int32_t* tokens, int64_t n,
                 Numerics num, float* y) {
  const bool model = num == Numerics::Model;
  const int E = c.n_experts, K = c.n_active_experts;
  const int64_t D = c.dim, I = c.moe_inter;
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
    for (int64_t i = 0; i < m; ++i) std::memcpy(xs.data() + i * D, x + toks[i].first * D, static_cast<size_t>(D) * 4);
    if (model) act_quant_fp8(xs.data(), m, D);
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
  std::vector<float> xq;
  const float* xs_in = x;
  if (model) {  // the shared expert's FP8 input; reference numerics reads x as is
    xq.assign(x, x + n * D);
    act_quant_fp8(xq.data(), n, D);
    xs_in = xq.data();
  }
  cpu::matmul(pool_, w.sh_w1.w.data(), I, D, xs_in, n, g.data());
  cpu::matmul(pool_, w.sh_w3.w.data(), I, D, xs_in, n, u.data());
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
