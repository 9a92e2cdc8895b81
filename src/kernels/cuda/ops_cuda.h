// CUDA ops: the GPU twins of kernels/cpu/ops.h (tests/test_backend_ops.cpp checks each one
// against its CPU twin). Host API: every pointer argument is device memory on ctx's device
// unless its comment says "host"; work is queued on ctx.stream() and nothing waits for it
// (call ctx.synchronize() before reading results on the host). Activations are f32, row-major,
// outermost dimension first, exactly as in the CPU twins.
#pragma once
#include <cstdint>
#include <vector>

#include "format/ggml_types.h"
#include "kernels/cuda/device_context.h"
#include "kernels/state_rows.h"

namespace hs::cuda {

// ---------------------------------------------------------------------------------------
// Weights. Device layouts (all rows contiguous, `cols` = the input dimension):
//   F32, F16, BF16  [rows, cols] of that type.
//   Q8_0            data: int8 qs [rows, cols]; scales: f16 d [rows, cols/32]. (GGUF's 34-byte
//                   blocks split into two 16-byte-aligned planes; upload_gguf_weight repacks.)
//   FP8_B128        data: e4m3 [rows, cols]; scales: e8m0 [ceil(rows/128), ceil(cols/128)]
//                   (DeepSeek's official block-scaled layout, used as is).
//   MXFP4           data: [rows, cols/2] bytes, 16 per 32-element block in GGUF's split-half
//                   nibble order (byte j = element j | element j+16 << 4); scales: e8m0
//                   [rows, cols/32] (ggml's half scale: value = K_FP4[code] * 2^(e-128)).
//   GGML_BLOCK      data: the GGUF bytes as they are, rows of cols/block_elems blocks of type
//                   `ggml` (every block type of shared/docs/quant-formats.md: Q4_0..Q8_0,
//                   K-quants, i-quants, MXFP4, the Lucebox ROCm types); no scales plane.
//                   Decoded by the generic kernels of matvec_ggml.cu (quant_decode.cuh),
//                   bit-exactly as format/quants.h dequantize_row.
enum class WType : uint8_t { F32, F16, BF16, Q8_0, FP8_B128, MXFP4, GGML_BLOCK };
const char* wtype_name(WType t);

struct WeightView {
  WType type = WType::F32;
  GgmlType ggml = GgmlType::F32;  // the block type when type == GGML_BLOCK
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;
  const void* scales = nullptr;
  // Rows [r0, r0 + n) of this matrix (for FP8_B128, r0 must be a multiple of 128).
  WeightView slice_rows(int64_t r0, int64_t n) const;
  int64_t data_bytes() const;
  int64_t scale_bytes() const;
};

// A weight matrix owned on one device.
struct DeviceWeight {
  DeviceBuffer data, scales;
  WeightView view;
};

// Upload a GGUF tensor [rows, cols] (host bytes in GGUF layout). F32, F16, BF16 are stored as
// is; Q8_0 and MXFP4 blocks are split into the planes above on the device (their fast kernels);
// every other block type with a device decoder is stored as GGML_BLOCK. keep_blocks: store Q8_0
// and MXFP4 as GGML_BLOCK too (the generic path; tests and benchmarks). Throws for types
// without a CUDA decoder and for Lucebox blocks with an invalid scale byte (> 0x7E).
DeviceWeight upload_gguf_weight(DeviceContext& ctx, GgmlType type, const void* host, int64_t rows, int64_t cols,
                                bool keep_blocks = false);
// Whether upload_gguf_weight accepts `type`.
bool cuda_supports_gguf_type(GgmlType type);
// Upload an official FP8 weight: e4m3 bytes [rows, cols] and e8m0 scales [ceil(rows/128), ceil(cols/128)] (host).
DeviceWeight upload_fp8_weight(DeviceContext& ctx, const uint8_t* host_w, const uint8_t* host_scales, int64_t rows,
                               int64_t cols);

// out[r, :] = dequantized row rows[r] of W (or row r0 + r when rows == nullptr), f32.
void dequantize_rows(DeviceContext& ctx, const WeightView& W, const int32_t* rows, int64_t r0, int64_t n,
                     float* out);

// ---------------------------------------------------------------------------------------
// y[t, o] = sum_i W[o, i] * x[t, i]  for t < n; x rows ldx floats apart, y rows ldy apart
// (ldx = W.cols, ldy = W.rows when 0). n <= 8: weight-streaming kernels in f32 on exactly
// dequantized weights. n > 8: tiled GEMM through cuBLAS; `mode` picks its precision.
enum class GemmMode {
  Auto,  // F32 weights: FP32 SGEMM; other types: BF16 tensor cores (x and W rounded to bf16)
  F32,   // always FP32 (dequantized W tiles, SGEMM)
  Bf16,  // always BF16 tensor cores with FP32 accumulation
};
void matmul(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, GemmMode mode = GemmMode::Auto,
            int64_t ldx = 0, int64_t ldy = 0);
// Grouped low-rank output (wo_a): y[t, g*R + j] = W[g*R + j] . x[t, g*in : (g+1)*in], W rows = groups*R.
void grouped_matmul(DeviceContext& ctx, const WeightView& W, int groups, const float* x, int64_t n, float* y,
                    GemmMode mode = GemmMode::Auto);
// Largest n served by the weight-streaming kernels (above it, matmul takes the tiled path).
constexpr int64_t kMatvecMaxCols = 8;
// Largest n of the tensor-core matvec (Q8_0, FP8_B128, F16, BF16; matvec_mma.cu): matmul also
// takes it for some kMatvecMaxCols < n <= 32 (where it measured faster; not under
// GemmMode::Bf16, which asks for the tiled path).
constexpr int64_t kMatvecMmaMaxCols = 32;
// Which kernels matmul runs for n columns: the f32 weight streaming (n <= 8), the tensor-core
// matvec, or the tiled GEMM. (Profile rows name it.)
enum class MatmulPath { Matvec, TensorCores, Tiled };
MatmulPath matmul_path(const WeightView& W, int64_t n, GemmMode mode);
const char* matmul_path_name(MatmulPath p);
// Tuning and validation hook: the weight-streaming path (contiguous x/y). R = 0: automatic, as
// matmul chooses for n <= 8 (n == 1 with a native type: the kernel with the input in
// registers; Q8_0, FP8_B128, F16 and BF16 from 3 or 5 columns: the tensor-core kernel); R = 1, 2 or 4: the f32
// shared-memory kernel (with R rows per warp for n == 1); R = kMatvecTensorCores: the
// tensor-core kernel (Q8_0, FP8_B128, F16, BF16) at any n <= kMatvecMmaMaxCols. GGML_BLOCK weights have
// one kernel shape (one row per warp) and ignore R.
constexpr int kMatvecTensorCores = -1;
void matvec_variant(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int rows_per_warp);
// y[i] = W[i] x for `count` (2..8) matrices on one input row, in one launch of the n == 1
// register-input kernel: where matvec_same_input_ok (one type and width that kernel takes; the
// projections' sizes, <= 32 MB together). Each row's sums are that kernel's, as matmul gives them
// where it takes the kernel alone.
bool matvec_same_input_ok(const WeightView* W, int count);
void matvec_same_input(DeviceContext& ctx, const WeightView* W, float* const* y, int count, const float* x);

// ---------------------------------------------------------------------------------------
// RMSNorm over rows of d: y = w * x * rsqrt(mean(x^2) + eps); w == nullptr: unweighted.
// y may alias x (the unweighted per-head q norm runs in place with y == x).
void rmsnorm(DeviceContext& ctx, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y);

// Model numerics' BF16 rounding points folded into the op beside them (one launch instead of
// three): in = round_bf16 on the op's input, in place, before the op (exactly as a separate
// cuda::round_bf16 would leave it); out = round_bf16 on what the op writes.
struct Bf16Round {
  bool in = false, out = false;
};
// fp8_out (non-null): also act_quant_fp8's round trip of y (1x128 blocks) into fp8_out, which may
// be y, in the same launch (the same bits as act_quant_fp8(fp8_out, y) after it).
void rmsnorm_bf16(DeviceContext& ctx, float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                  Bf16Round r, float* fp8_out = nullptr);

// Interleaved RoPE on the trailing rope_dim channels of each head, angle pos[t] * inv_freq[i]
// (pos: int64 [n]; inv_freq: f32 [rope_dim/2]); sign -1 rotates backwards. In place.
void rope(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, const int64_t* pos,
          const float* inv_freq, int sign);
// The same with the positions p0 + t * stride (no position array to upload), or, in the
// overload with pos, pos[t] + p0 (device positions shifted by a constant; stride unused).
void rope_affine(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, int64_t p0,
                 int64_t stride, const float* inv_freq, int sign);
void rope_affine(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim,
                 const int64_t* pos, int64_t p0, int64_t stride, const float* inv_freq, int sign);
// RoPE (positions as rope_affine) with rounding of every channel of the heads, not only the
// rotated ones.
void rope_bf16(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim,
               const int64_t* pos, int64_t p0, int64_t stride, const float* inv_freq, int sign, Bf16Round r);
// rmsnorm_bf16 of each head of x [n, heads, head_dim] (weights w [head_dim] or none; norm_r),
// then rope_bf16 forward (rope_r), in place and in one launch: the same bits as the two ops.
void rmsnorm_rope(DeviceContext& ctx, float* x, const float* w, int64_t n, int64_t heads, int64_t head_dim, float eps,
                  Bf16Round norm_r, int rope_dim, const int64_t* pos, int64_t p0, int64_t stride,
                  const float* inv_freq, Bf16Round rope_r);

// ---------------------------------------------------------------------------------------
// Hyper-connections (ds4-model-spec.md §4), X: [n, hc, D]. hc <= 8.
struct HcParams {
  const float* fn = nullptr;     // [(2+hc)*hc, hc*D]   (hc_head: [hc, hc*D])
  const float* base = nullptr;   // [(2+hc)*hc]         (hc_head: [hc])
  const float* scale = nullptr;  // [3]                 (hc_head: [1])
  int hc = 4;
  int64_t dim = 0;
  int sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
};
// u: [n, D]; post: [n, hc]; comb: [n, hc, hc] (row j = input stream, column k = output stream).
void hc_pre(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* u, float* post, float* comb);
// X[t, k] = post[t, k] * y[t] + sum_j comb[t, j, k] * X[t, j]   (in place)
void hc_post(DeviceContext& ctx, const float* y, const float* post, const float* comb, int64_t n, int hc,
             int64_t dim, float* X, bool round_out = false);  // round_out: X rounded to BF16
// The hand-over between two sub-layers in one launch: hc_post of the finished one's y [n, D]
// (post_in, comb_in; X rounded to BF16 when post_round), hc_pre of the next (p: u, post, comb; these
// may be post_in / comb_in), then rmsnorm_bf16 of u (norm_w, eps, r) into xn and, when xq,
// act_quant_fp8's round trip of xn into xq (xq != xn): the same bits as those ops one by one.
// Only where hc_post_pre_norm_fits (the cluster form of hc_pre: hc 4, n <= 16, a block's share of
// D <= 512).
bool hc_post_pre_norm_fits(DeviceContext& ctx, int hc, int64_t dim, int64_t n);
void hc_post_pre_norm(DeviceContext& ctx, const HcParams& p, const float* y, const float* post_in, const float* comb_in,
                      bool post_round, float* X, int64_t n, float* u, float* post, float* comb, const float* norm_w,
                      float eps, Bf16Round r, float* xn, float* xq);
// h[t] = sum_j (sigmoid(m_j * scale + base_j) + eps) * X[t, j]   (p.sinkhorn_iters unused)
void hc_head(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* h);
// out[t * stride + c] = the mean of X[t, 0..hc-1, c] (f64 sums, as the CPU twin).
void hc_stream_mean(DeviceContext& ctx, const float* X, int64_t n, int hc, int64_t dim, float* out, int64_t stride);

// ---------------------------------------------------------------------------------------
// Compressor pooling for n_entries entries: kv/gate [n_entries, slots, d] (gate includes ape;
// -inf = absent slot), out [n_entries, d]: channel-wise softmax over slots.
void compress_pool(DeviceContext& ctx, const float* kv, const float* gate, int slots, int64_t d, int64_t n_entries,
                   float* out);

// Where the indexer keys are: contiguous F32 rows [n_entries, id] (table null), or a pool's
// paged rows, query t reading the pages of its own sequence (table + slot[t] * table_ld;
// slot[t] < 0: a padding query, nothing visible).
struct KeySource {
  const void* base = nullptr;
  RowFormat fmt;                    // fmt.d == id
  int32_t rows_per_block = 0;
  const int32_t* table = nullptr;
  int64_t table_ld = 0;
  const int32_t* slot = nullptr;
};
// Lightning-indexer scores for nq queries: q [nq, ih, id], w [nq, ih], keys [n_entries, id];
// score [nq, n_entries] = sum_h w[h] * relu(q_h . k_i) * id^-0.5 for i < n_visible(t),
// -inf beyond, where n_visible(t) = (pos[t] + 1) / ratio (pos: int64 [nq]; pos == nullptr:
// every entry visible), at most n_entries.
void indexer_scores(DeviceContext& ctx, const float* q, const float* w, int64_t nq, int ih, int64_t id,
                    const KeySource& keys, int64_t n_entries, const int64_t* pos, int ratio, float* score);
// Per row t of score [nq, ld]: indices of the top-min(k, n_visible(t)) among the first
// n_visible(t) entries, descending score, ties to the lower index (cpu::topk_indices);
// out [nq, k] int32, padded with -1. n_visible as in indexer_scores (pos == nullptr: ld).
// k <= 2048.
void topk(DeviceContext& ctx, const float* score, int64_t nq, int64_t ld, const int64_t* pos, int ratio, int k,
          int32_t* out);
constexpr int kTopkMax = 2048;

// ---------------------------------------------------------------------------------------
// Attention with a sink for decode (flash-decoding split over rows). For query t:
// q [nq, heads, hd]; the rows it attends are kv[rows[t, j]] for j < n_rows[t] (kv: a row pool
// [*, hd], K = V; rows: int32 [nq, rows_ld]; n_rows: int32 [nq], or nullptr when every query
// uses rows_ld rows); sinks [heads]; out [nq, heads, hd]. hd % 4 == 0, hd <= 512.
struct AttnRows {
  const float* kv = nullptr;
  const int32_t* rows = nullptr;
  const int32_t* n_rows = nullptr;
  int64_t rows_ld = 0;
  // Rows may come from up to three pools (this step's kv rows, a pool's SWA pages, its
  // compressed entries) without copying them together: row index r names row r & kAttnRowMask
  // of pool r >> kAttnPoolShift (0: kv, F32; 1: kv1, 2: kv2, in their row forms).
  const void* kv1 = nullptr;
  RowFormat fmt1;
  const void* kv2 = nullptr;
  RowFormat fmt2;
};
constexpr int kAttnPoolShift = 28;
constexpr int32_t kAttnRowMask = (1 << kAttnPoolShift) - 1;
void attention_sink(DeviceContext& ctx, const float* q, int64_t nq, int64_t heads, int64_t hd, const AttnRows& rows,
                    const float* sinks, float scale, float* out);

// ---------------------------------------------------------------------------------------
// MoE routing for n tokens: logits [n, n_experts] -> idx [n, k], weight [n, k]. Score layers:
// top-k of sqrt(softplus(l)) + bias (bias may be nullptr); hash layers (tid2eid != nullptr):
// idx = tid2eid[tokens[t], :] (tid2eid int32 [V, k], tokens int32 [n]).
// weight = s / (sum s + 1e-20) * route_scale. n_experts <= 1024, k <= 32.
void moe_route(DeviceContext& ctx, const float* logits, int64_t n, int n_experts, int k, const float* bias,
               const int32_t* tid2eid, const int32_t* tokens, float route_scale, int32_t* idx, float* weight);
// h = silu(min(g, limit)) * clamp(u, -limit, limit), n elements.
void swiglu_clamp(DeviceContext& ctx, const float* g, const float* u, int64_t n, float limit, float* h);

// ---------------------------------------------------------------------------------------
// Sampling one token per row of logits [rows, vocab].
// temperature <= 0 (or top_k == 1): greedy (argmax, ties to the lower id). Otherwise, on
// z = logits / temperature ordered by (z desc, id asc): keep the first top_k (0: all), then
// those with p >= min_p * p_max, then the shortest prefix whose probability mass reaches top_p
// (each step on the renormalized survivors), and return the first kept id whose cumulative
// probability exceeds u * total, u = uniform[t] in [0, 1) (host values, one per row).
struct SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
};
// out: int32 [rows] (device).
void sample(DeviceContext& ctx, const float* logits, int64_t rows, int64_t vocab, const SamplingParams& sp,
            const std::vector<float>& uniform, int32_t* out);
// A constrained request's token mask: logit i of row r becomes -inf unless bit i of bits[r] is
// set (bits: device uint64 [rows, (vocab + 63) / 64]). CPU twin: cpu::mask_tokens.
void mask_tokens(DeviceContext& ctx, float* logits, int64_t rows, int64_t vocab, const uint64_t* bits);

// ---------------------------------------------------------------------------------------
// Device-to-device copy bandwidth in GB/s, bytes read + written (the roofline the benchmarks
// quote "% of copy" against): `bytes` copied reps times after 3 warm-ups, events, median.
double measure_copy_gbs(DeviceContext& ctx, size_t bytes = size_t{1} << 30, int reps = 20);

// ---------------------------------------------------------------------------------------
// Small elementwise helpers the forward pass needs.
void add(DeviceContext& ctx, float* y, const float* x, int64_t n);     // y += x
void scale(DeviceContext& ctx, float* x, int64_t n, float s);          // x *= s
void scale_bf16(DeviceContext& ctx, float* x, int64_t n, float s, Bf16Round r);
void fill(DeviceContext& ctx, float* x, int64_t n, float v);           // x = v

}  // namespace hs::cuda
