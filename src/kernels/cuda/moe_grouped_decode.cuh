// Grouped decode of the q2 mix's routed experts (IQ2_XXS gate/up, Q2_K down) for 2..32 tokens:
// the (token, slot) pairs are sorted by expert (moe_sort_kernel) into items of at most kBCols
// tokens, and each item reads its expert's weights once, its tokens as the mma's B columns
// (moe_iq2_decode.cuh's and moe_q2k_decode.cuh's bodies with BC = kBCols). The shared expert,
// which every token uses, runs through cuda::matmul (its weights read once for all n tokens on
// the tensor-core matvec); fast_combine_kernel adds each token's segments as in the per-slot path.
// Included by moe_experts.cu only.
//
// Why: the per-slot kernels read an expert once per (token, slot), and the shared expert (26.7 MB
// of Q8_0 for Flash, ~4 routed experts' bytes) once per token: at 32 tokens that is 192 routed
// and 32 shared reads where 32 tokens touch ~135 distinct experts (device run of session 13: the
// MoE was 76 % of an 8-layer x32 decode step).
#pragma once

#include "kernels/cuda/moe_iq2_decode.cuh"
#include "kernels/cuda/moe_q2k_decode.cuh"
#include "kernels/cuda/ops_cuda.h"

namespace hs::cuda {

using namespace detail;

namespace {

// The sorted pairs: perm (sorted position -> pair t * k + j) and the items {expert, first
// position, pairs (<= kBCols), 0}, n_items of them.
struct GroupedItems {
  const int* perm;
  const int4* items;
  const int* n_items;
};

// Thread j < the item's pair count: its output row (SORTED: the pair's sorted position, the
// prefill path's layout; else t * k + rank, rank: the slot's place in the token's ascending
// expert order), routing weight and input row (gate/up: x of token t; down: h at the output
// row). Returns false (the whole block) past the last item.
template <bool GU, bool SORTED = false>
__device__ __forceinline__ bool grouped_item(const FastArgs& a, const GroupedItems& gi, int4* s_it, int* s_orow,
                                             float* s_w, const float** s_x) {
  if (static_cast<int>(blockIdx.y) >= *gi.n_items) return false;
  const int4 it = gi.items[blockIdx.y];
  const int j = threadIdx.x;
  if (j == 0) *s_it = it;
  if (j < it.z) {
    const int q = gi.perm[it.y + j], t = q / a.k;
    const int orow = SORTED ? it.y + j : t * a.k + slot_rank(a.idx + static_cast<int64_t>(t) * a.k, a.k, q % a.k, a.E);
    s_orow[j] = orow;
    s_w[j] = GU ? a.weight[q] : 1.0f;
    s_x[j] = a.x + static_cast<int64_t>(GU ? t : orow) * a.K;
  }
  __syncthreads();
  return true;
}

// grid (row blocks, item bound): h[output row] = weight * swiglu_clamp(g, u) of each item token
// (NC: the item's most tokens; SORTED: grouped_item's output rows). Items of more than kBCols
// tokens (prefill) need more registers: one block per SM.
template <int NC, bool SORTED>
__global__ void __launch_bounds__(kThreads, NC > kBCols ? 1 : 2) iq2_gate_up_grouped_kernel(FastArgs a, GroupedItems gi,
                                                                                           const uint8_t* wa_end,
                                                                                           const uint8_t* wb_end) {
  pdl_enter();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  float* red = reinterpret_cast<float*>(smem + kS8Tables);  // (in the columns: two blocks per SM fit)
  __shared__ int4 s_it;
  __shared__ int s_orow[NC];
  __shared__ float s_w[NC];
  __shared__ const float* s_x[NC];
  if (!grouped_item<true, SORTED>(a, gi, &s_it, s_orow, s_w, s_x)) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * 16;
  iq2_body<NC, NC>(a, wa_end, wb_end, smem, red, s_it.x, s_x, s_it.z,
                   [&](int j0, int nc) { columns_epilogue<true, NC>(a, red, row0, nc, s_orow + j0, s_w + j0); });
}

// grid (row blocks, item bound): d[output row] = the expert's w2 . h[output row] (NC, SORTED: as
// the gate/up kernel's).
template <int NC, bool SORTED>
__global__ void __launch_bounds__(kThreads, NC > kBCols ? 1 : 2) q2k_down_grouped_kernel(FastArgs a, GroupedItems gi,
                                                                                        const uint8_t* w_end) {
  pdl_enter();
  extern __shared__ uint4 smem4[];
  __shared__ float red[kWarps * NC * 32];
  __shared__ int4 s_it;
  __shared__ int s_orow[NC];
  __shared__ float s_w[NC];
  __shared__ const float* s_x[NC];
  if (!grouped_item<false, SORTED>(a, gi, &s_it, s_orow, s_w, s_x)) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * 32;
  q2k_body<NC, NC>(a, w_end, reinterpret_cast<uint8_t*>(smem4), red, s_it.x, s_x, s_it.z,
                   [&](int j0, int nc) { columns_epilogue<false, NC>(a, red, row0, nc, s_orow + j0, s_w + j0); });
}

// The grouped launches, decode's (items of kBCols tokens) and prefill's (kPfCols, SORTED): a holds
// the weights at wa[0] (gate/up: w3 at wb[0]), x, out, rows and K (gate/up: weight, limit; decode:
// idx, E, k); kGroupedKsplit K-splits (ksplit > 0: forced), the rest of the block's warps row
// spans of 32 rows (gate/up: 16 of w1 and the same 16 of w3).
template <int NC, bool SORTED>
void iq2_grouped_launch(DeviceContext& ctx, FastArgs a, const GroupedItems& gi, int64_t item_bound,
                        const WeightView& w1, const WeightView& w3, int ksplit) {
  split_warps(a, a.K / 256, kGroupedKsplit, ksplit);
  const size_t smem = iq2_smem(a.K, NC, NC);
  const void* kern = reinterpret_cast<const void*>(iq2_gate_up_grouped_kernel<NC, SORTED>);
  ctx.ensure_dynamic_smem(kern, smem);
  const uint8_t *wa_end = a.wa[0] + w1.data_bytes(), *wb_end = a.wb[0] + w3.data_bytes();
  const dim3 grid(static_cast<unsigned>((a.rows + 16 * a.TR - 1) / (16 * a.TR)), static_cast<unsigned>(item_bound));
  void* args[] = {&a, const_cast<GroupedItems*>(&gi), &wa_end, &wb_end};
  launch(ctx, kern, grid, dim3(kThreads), smem, args);
}
template <int NC, bool SORTED>
void q2k_grouped_launch(DeviceContext& ctx, FastArgs a, const GroupedItems& gi, int64_t item_bound,
                        const WeightView& w2, int ksplit) {
  split_warps(a, a.K / 256, kGroupedKsplit, ksplit);
  const size_t smem = q2k_smem(a.K, NC, NC);
  const void* kern = reinterpret_cast<const void*>(q2k_down_grouped_kernel<NC, SORTED>);
  ctx.ensure_dynamic_smem(kern, smem);
  const uint8_t* w_end = a.wa[0] + w2.data_bytes();
  const dim3 grid(static_cast<unsigned>((a.rows + 32 * a.TR - 1) / (32 * a.TR)), static_cast<unsigned>(item_bound));
  void* args[] = {&a, const_cast<GroupedItems*>(&gi), &w_end};
  launch(ctx, kern, grid, dim3(kThreads), smem, args);
}

// Whether the grouped decode takes these experts: IQ2_XXS gate/up, Q2_K down, whole 256-element
// rows, the staging fits in shared memory (the shared expert may have any type).
bool grouped_decode_ok(DeviceContext& ctx, const WeightView& w1, const WeightView& w2, int64_t D, int64_t I) {
  return iq2_gate_up_ok(ctx, w1, D) && q2k_down_ok(ctx, w2, nullptr, I);
}

// Buffers of one call (moe_experts' workspace): h [n*k + n, I] (the shared expert's rows last),
// d [n*k + n, D], gs / us [n, I], the sort's perm / pos [n*k], items, n_items.
struct GroupedWs {
  float *h, *d, *gs, *us;
  int *perm, *pos, *n_items;
  int4* items;
};

// The shared expert's matmuls, f32-exact as every decode path: matmul's choice (GemmMode::F32),
// except 9..32 columns always on the tensor-core matvec where it takes the type (at Flash's
// shapes it measured faster than the tiled GEMM: docs/performance-kernels.md).
void shared_matmul(DeviceContext& ctx, const WeightView& w, const float* x, int64_t n, float* y) {
  if (n > kMatvecMaxCols && n <= kMatvecMmaMaxCols && mma_matvec_supported(w))
    matvec_variant(ctx, w, x, n, y, kMatvecTensorCores);
  else
    matmul(ctx, w, x, n, y, GemmMode::F32);
}

void grouped_decode(DeviceContext& ctx, const WeightView& w1, const WeightView& w3, const WeightView& w2, int E,
                    const float* x, int64_t n, const int32_t* idx, const float* weight, int k, float limit,
                    const GroupedWs& ws, float* y, const MoeShared* shared, bool model, const MoeTuning& tune) {
  const int64_t I = w1.rows / E, D = w1.cols, nk = n * k;
  launch(ctx, moe_sort_kernel, 1, 1024, 0, idx, static_cast<int>(nk), E, ws.perm, ws.pos, ws.items, ws.n_items,
                                                kBCols);
  const GroupedItems gi{ws.perm, ws.items, ws.n_items};
  const int64_t item_bound = nk;  // every item holds a pair
  auto u8 = [](const void* p) { return static_cast<const uint8_t*>(p); };
  FastArgs a{};
  a.idx = idx, a.weight = weight, a.k = k, a.E = E, a.nk = static_cast<int>(nk), a.limit = limit;
  a.wa[0] = u8(w1.data), a.wb[0] = u8(w3.data), a.x = x, a.out = ws.h, a.rows = I, a.K = D;
  a.s8 = tune.int8_gate_up;  // (taken where the item's x are FP8 round trips: model numerics)
  iq2_grouped_launch<kBCols, false>(ctx, a, gi, item_bound, w1, w3, tune.gate_up_ksplit);
  float* hs = ws.h + nk * I;
  if (shared) {
    shared_matmul(ctx, shared->w1, x, n, ws.gs);
    shared_matmul(ctx, shared->w3, x, n, ws.us);
    swiglu_clamp(ctx, ws.gs, ws.us, n * I, limit, hs);
  }
  if (model) act_quant_fp8(ctx, ws.h, nk + (shared ? n : 0), I);  // the FP8 round trip of the down inputs
  a.wa[0] = a.wb[0] = u8(w2.data), a.x = ws.h, a.out = ws.d, a.rows = D, a.K = I, a.weight = nullptr, a.s8 = tune.int8_down;
  q2k_grouped_launch<kBCols, false>(ctx, a, gi, item_bound, w2, tune.down_ksplit);
  if (shared) shared_matmul(ctx, shared->w2, hs, n, ws.d + nk * D);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((D / 4 + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(n));
  launch(ctx, fast_combine_kernel, grid, kThreads, 0, ws.d, k, nk, D, shared != nullptr, model, y);
}

// Prefill (more than kMoeDecodeMaxTokens tokens) gate/up of IQ2_XXS experts on the grouped
// body instead of pf_kernel's: the sorted path's items (up to kTok tokens, 16 mma columns: two
// n-tiles per decoded A fragment) and its h layout (rows at the pairs' sorted positions), so its
// down projection and sums run unchanged. Why: pf_kernel decodes each IQ2_XXS weight to f32
// (~11 instructions a weight), which bound the prefill MoE (5.1 ms a layer at pp512 on the H100,
// against ~0.6 ms of expert weights); the grouped body builds bf16 A fragments by byte permutes
// (~3). Only for inputs of bf16 values (model numerics: the FP8 act-quant round trip); others
// would take three passes per token (stage_inputs), where pf_kernel is faster.
constexpr int kPfCols = kTok;
constexpr size_t kPfStaticSmem = sizeof(float) * kWarps * kPfCols * 32 + 1024;  // red, the item's rows
bool iq2_gate_up_prefill_ok(DeviceContext& ctx, const WeightView& w1, int64_t K) {
  return iq2_gate_up_ok(ctx, w1, K) && iq2_smem(K, kPfCols, kPfCols) + kPfStaticSmem <= ctx.props().sharedMemPerBlockOptin;
}
bool q2k_down_prefill_ok(DeviceContext& ctx, const WeightView& w2, int64_t K) {
  return q2k_down_ok(ctx, w2, nullptr, K) && q2k_smem(K, kPfCols, kPfCols) + kPfStaticSmem <= ctx.props().sharedMemPerBlockOptin;
}
void iq2_gate_up_prefill(DeviceContext& ctx, const WeightView& w1, const WeightView& w3, int E, const float* x,
                         int k, const float* weight, float limit, const GroupedItems& gi, int64_t item_bound,
                         int ksplit, float* h) {
  FastArgs a{};
  a.wa[0] = static_cast<const uint8_t*>(w1.data), a.wb[0] = static_cast<const uint8_t*>(w3.data);
  a.x = x, a.weight = weight, a.out = h, a.rows = w1.rows / E, a.K = w1.cols, a.k = k, a.E = E, a.limit = limit;
  iq2_grouped_launch<kPfCols, true>(ctx, a, gi, item_bound, w1, w3, ksplit);
}

// Prefill down projection of Q2_K experts on the grouped body: h and d rows at the pairs' sorted
// positions (pf_kernel's layout; moe_reduce_kernel adds them). As iq2_gate_up_prefill: the
// generic kernel's f32 decode of each weight bound it; inputs of bf16 values (model numerics).
void q2k_down_prefill(DeviceContext& ctx, const WeightView& w2, int E, int k, const float* h, const GroupedItems& gi,
                      int64_t item_bound, int ksplit, float* d) {
  FastArgs a{};
  a.wa[0] = a.wb[0] = static_cast<const uint8_t*>(w2.data);
  a.x = h, a.out = d, a.rows = w2.rows / E, a.K = w2.cols, a.k = k, a.E = E;
  q2k_grouped_launch<kPfCols, true>(ctx, a, gi, item_bound, w2, ksplit);
}

}  // namespace
}  // namespace hs::cuda
