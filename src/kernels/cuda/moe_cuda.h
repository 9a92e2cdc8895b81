// The MoE experts on the device (ds4-model-spec.md §6 steps 5 and 7: the routed experts and
// the shared one): every data-dependent decision (which experts, how many tokens each) is taken
// on the GPU, so the call never waits for the host and can be captured in a CUDA graph.
// Conventions as in ops_cuda.h: pointers are device memory on ctx's device, work is queued on
// ctx.stream().
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/ops_cuda.h"

namespace hs::cuda {

constexpr int kMoeMaxK = 32;           // slots per token
constexpr int kMoeMaxExperts = 1024;

// Device workspace moe_experts needs for these shapes, with or without a shared expert (a
// multiple of 256 bytes).
size_t moe_experts_workspace_bytes(int64_t n, int k, int64_t D, int64_t I, int n_experts);

// The shared expert of a MoE layer (ds4-model-spec.md §6 step 7): w1, w3 [I, D], w2 [D, I], the
// routed experts' I; w1 and w3 share one type.
struct MoeShared {
  WeightView w1, w3, w2;
};

// Routed experts over stacked weights: expert e of w1/w3 is rows [e*I, (e+1)*I) ([I, D] each),
// of w2 rows [e*D, (e+1)*D) ([D, I]); w1 and w3 share one type, w2 may have another.
// For token t < n:
//   y[t, :] = sum over its k slots j, in ascending expert id, of w2_e . (weight[t, j] * h),
//   h = silu(min(g, limit)) * clamp(u, -limit, limit), g = w1_e . x_t, u = w3_e . x_t
// (cpu::swiglu_clamp; the routing weight scales h before the down projection, spec §6.5), then
// with `shared`: y[t, :] += s_w2 . swiglu_clamp(s_w1 . x_t, s_w3 . x_t) (no routing weight).
// model: the rounding points of CpuOps::moe under model numerics: each h (after the routing
// weight) through the FP8 act-quant round trip (1x128 blocks), each expert's output row rounded
// to bf16 before the ascending sum, the shared expert's output rounded to bf16 before it is
// added and y rounded to bf16 after. The FP8 quantisation of the input x is the caller's (it is
// per row, so it is done once for the routed and the shared experts).
// idx, weight: [n, k] (as cuda::moe_route writes them; ids outside [0, n_experts) are clamped
// into it so that no access leaves the weights). x: [n, D] f32, 16-byte aligned. y: [n, D]
// f32, overwritten. workspace: moe_experts_workspace_bytes(n, k, D, I, n_experts) bytes,
// 256-byte aligned; the call allocates nothing, never waits for the GPU, and its launches
// depend only on the shapes and types, never on idx.
//
// n <= kMatvecMaxCols (decode): f32 weight streaming per (token, slot), `mode` ignored; the
// shared expert runs through the same kernels as one more slot. n <= kMoeDecodeMaxTokens: the
// decode kernels in chunks of kMatvecMaxCols tokens (a verify step of a few sequences, a short
// prompt chunk: each chunk reads its experts once, where the grouped path below costs about a
// full pass over every expert its tokens touch through tensor-core tiles). Larger n (prefill): tokens are
// grouped by expert on the device and each group is multiplied with the expert's weights read
// once per 16 tokens, in FP32 (mode F32, or Auto with F32 weights) or on bf16 tensor cores with
// f32 accumulation (Bf16, or Auto with other weight types: x, h and W rounded to bf16); the
// shared expert then runs through cuda::matmul with `mode`. Results are bit-reproducible run to
// run (no float atomics).
//
// The q2 mix's experts (IQ2_XXS gate/up, Q2_K down) from grouped_from (>= 2) to
// kMoeDecodeMaxTokens tokens take the grouped decode instead: the pairs sorted by expert into
// items of up to 4 tokens, each item reading its expert once with its tokens as tensor-core
// columns, and the shared expert through cuda::matmul once for all tokens (f32-exact, as the
// per-slot kernels). `tune` holds the tuning and test hooks (MoeTuning).
constexpr int64_t kMoeDecodeMaxTokens = 32;
constexpr int64_t kMoeGroupedFrom = 8;  // measured: 2..4 tokens were faster per slot (session 13)

// Tuning and test hooks of the decode MoE; the defaults are the measured rules.
struct MoeTuning {
  int64_t grouped_from = kMoeGroupedFrom;  // fewest tokens on the grouped decode (kMoeDecodeMaxTokens + 1: never)
  // K-splits per block of 8 warps in the q2 mix's tensor-core kernels (1, 2, 4 or 8; 0: the
  // rule), per slot and grouped; the rest of the warps are row spans. Halved where a
  // warp would get fewer than two 256-element steps.
  int gate_up_ksplit = 0, down_ksplit = 0;
  // Prefill (n > kMoeDecodeMaxTokens) IQ2_XXS gate/up and Q2_K down in model numerics on the
  // grouped tensor-core bodies, items of 16 tokens (false: the generic sorted-path kernel;
  // timing comparisons).
  bool grouped_prefill = true;
  // Decode (per slot and grouped) IQ2_XXS gate/up and Q2_K down on int8 tensor cores
  // (moe_iq2_s8.cuh, moe_q2k_s8.cuh) where the inputs are FP8 round trips, as in model numerics
  // (false: the bf16 bodies; tests and timings).
  bool int8_gate_up = true, int8_down = true;
};

void moe_experts(DeviceContext& ctx, const WeightView& w1, const WeightView& w3, const WeightView& w2, int n_experts,
                 const float* x, int64_t n, const int32_t* idx, const float* weight, int k, float limit,
                 GemmMode mode, void* workspace, float* y, const MoeShared* shared = nullptr, bool model = false,
                 const MoeTuning& tune = {});

}  // namespace hs::cuda
