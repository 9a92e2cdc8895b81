// CPU reference ops: plain loops in f32 (f64 where it helps), each output element computed
// in one place in a fixed order, so results do not depend on the thread count. These are
// the twins every CUDA op is tested against. Shapes are row-major, outermost first.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/state_rows.h"
#include "util/thread_pool.h"

namespace hs::cpu {

// y[t, o] = sum_i W[o, i] * x[t, i]   (W: [out, in], x: [n, in], y: [n, out])
void matmul(ThreadPool& pool, const float* W, int64_t out, int64_t in, const float* x, int64_t n, float* y);

// Weighted RMSNorm over rows of d: y = w * x * rsqrt(mean(x^2) + eps). y may alias x.
void rmsnorm(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y);
// Unweighted RMSNorm in place over rows of d (the per-head q norm, the HC input norm).
void rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps);

// ---- manifold-constrained hyper-connections (ds4-model-spec.md §4). X: [n, hc, D].
struct HcParams {
  const float* fn;     // [(2+hc)*hc, hc*D]
  const float* base;   // [(2+hc)*hc]
  const float* scale;  // [3]
  int hc;
  int64_t dim;
  int sinkhorn_iters;
  float hc_eps;
  float norm_eps;
};
// u: [n, D] collapsed input; post: [n, hc]; comb: [n, hc, hc] (row j = input stream, col k = output).
void hc_pre(ThreadPool& pool, const HcParams& p, const float* X, int64_t n, float* u, float* post, float* comb);
// The 4x4 Sinkhorn projection alone (row softmax + eps, column norm, then iters-1 row/column pairs).
void sinkhorn(float* A, int hc, int iters, float eps);
// X[t, k] = post[k] * y[t] + sum_j comb[j, k] * X[t, j]   (in place)
void hc_post(const float* y, const float* post, const float* comb, int64_t n, int hc, int64_t dim, float* X);
// h[t] = sum_j (sigmoid(m_j * scale + base_j) + eps) * X[t, j],  m = hc_fn . rmsnorm(vec X[t])
void hc_head(const float* fn, const float* base, const float* scale, int hc, int64_t dim, float hc_eps,
             float norm_eps, const float* X, int64_t n, float* h);
// out[t * stride + c] = mean_j X[t, j, c], summed in f64 (the DSpark drafter's taps)
void hc_stream_mean(const float* X, int64_t n, int hc, int64_t dim, float* out, int64_t stride);

// ---- RoPE (interleaved pairs on the trailing rope_dim channels of each head).
// inv_freq[i], i < rope_dim/2: plain theta^(-2i/rope_dim) or the YaRN-blended frequencies.
std::vector<float> rope_inv_freq(int rope_dim, float theta);
std::vector<float> rope_inv_freq_yarn(int rope_dim, float theta, float factor, double original_ctx, float beta_fast,
                                      float beta_slow);
// Rotates x[t, h, head_dim-rope_dim : head_dim] by the angle pos[t] * inv_freq (sign -1: inverse).
void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, const int64_t* pos,
          const float* inv_freq, int sign);

// ---- KV compressor pooling (§5.3). kv/gate: [slots, d] with gate already including ape;
// out[ch] = sum_s softmax_s(gate[s, ch]) * kv[s, ch]; slots with gate = -inf get weight 0.
void compress_pool(const float* kv, const float* gate, int slots, int64_t d, float* out);

// ---- lightning indexer (§5.4). q: [IH, ID] for one query, w: [IH] head weights (already
// scaled), keys: [n_entries, ID]. score[i] = sum_h w[h] * relu(q_h . k_i) * ID^-0.5.
void indexer_scores(const float* q, const float* w, int ih, int64_t id, const float* keys, int64_t n_entries,
                    float* score);
// Indices of the top-k scores among the first n_visible (descending score, ties to the lower index).
std::vector<int32_t> topk_indices(const float* score, int64_t n_visible, int64_t k);

// ---- attention with a sink (§5.6) for one query over a list of rows (K = V).
// q: [H, hd]; rows: pointers to [hd] vectors; out: [H, hd].
void attention_sink(const float* q, int64_t heads, int64_t hd, const float* const* rows, int64_t n_rows,
                    const float* sinks, float scale, float* out);

// ---- MoE (§6).
// Scores s_e = sqrt(softplus(logit_e)); chooses experts (top-k of s + bias, or the given hash
// row) and weights w_k = s_k / (sum s + 1e-20) * route_scale.
void moe_route(const float* logits, int n_experts, int k, const float* bias, const int32_t* hash_row,
               float route_scale, int32_t* idx, float* weight);
// SwiGLU with the clamps: silu(min(g, lim)) * clamp(u, -lim, lim).
void swiglu_clamp(const float* g, const float* u, int64_t n, float limit, float* h);

// ---- sampling: logit i becomes -inf unless bit i of bits ((vocab + 63) / 64 words) is set.
void mask_tokens(float* logits, int64_t vocab, const uint64_t* bits);

// ---- "model numerics" round trips (ds4-model-spec.md §3.4-3.5). All in place.
void round_bf16(float* x, int64_t n);
// The power-of-two scale of one block of n values: 2^ceil(log2(max(amax, amax_floor) / qmax)).
float block_scale(const float* v, int64_t n, float amax_floor, float qmax);
constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;
// Per row (stride apart), per block of `block` among the first `channels`:
// s = block_scale(block, amax_floor, 448), v <- e4m3(clamp(v / s)) * s.
void fp8_round_trip(float* x, int64_t rows, int64_t stride, int64_t channels, int block,
                    float amax_floor = kFp8AmaxFloor);
// Per block of 32: s = 2^ceil(log2(amax / 6)), v <- e2m1(clamp(v / s)) * s.
void fp4_round_trip(float* x, int64_t rows, int64_t d, int block = 32);
// y = H v / sqrt(d) (Sylvester order), d a power of two.
void hadamard(float* x, int64_t rows, int64_t d);

// ---- state pool rows (kernels/state_rows.h). encode_row stores x [f.d] in form f;
// decode_row(encode_row(x)) is exactly the form's model-numerics round trip of x: F32 none,
// Fp8Kv the KV FP8 simulation then BF16 (kv_fp8_sim), Fp4Index Hadamard, BF16, FP4, BF16
// (indexer_fp4_sim). x is not changed.
void encode_row(const RowFormat& f, const float* x, uint8_t* row);
void decode_row(const RowFormat& f, const uint8_t* row, float* x);

}  // namespace hs::cpu
