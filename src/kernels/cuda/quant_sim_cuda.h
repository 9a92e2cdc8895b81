// The "model numerics" round trips on the GPU (ds4-model-spec.md §3.4, §3.5, §9): the twins of
// CpuOps::round_bf16 / act_quant_fp8 / kv_fp8_sim / indexer_fp4_sim, bit-exact with them for
// every finite input (zeros of either sign, denormals, huge values, blocks whose amax is below the
// floor). Non-finite inputs give NaN exactly where the CPU gives NaN, but the NaN bit patterns may
// differ. All in place on device f32 rows, queued on ctx.stream(); nothing waits.
// quant_sim.cuh has the per-element device functions for kernels that fuse these steps.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_context.h"

namespace hs::cuda {

// x[i] <- bf16(x[i]) (round to nearest even), n elements.
void round_bf16(DeviceContext& ctx, float* x, int64_t n);

// FP8 activation quantisation round trip (act_quant, block 128, ue8m0 scales) on [rows, cols]:
// per row and 128-block, s = 2^ceil(log2(max(amax, 1e-4) / 448)), v <- e4m3(clamp(v / s)) * s.
// = cpu::fp8_round_trip(x, rows, cols, cols, 128).
void act_quant_fp8(DeviceContext& ctx, float* x, int64_t rows, int64_t cols);
// The same from src into dst (dst may be src; one launch where a copy and the in-place form
// would be two); round_in: src rounded to BF16 first, as round_bf16 would (model numerics' r).
void act_quant_fp8(DeviceContext& ctx, float* dst, const float* src, int64_t rows, int64_t cols,
                   bool round_in = false);

// KV FP8 simulation on [rows, head_dim]: the FP8 round trip in 64-blocks over the first
// `channels` of each row, then bf16 of the whole row (the RoPE tail is only bf16-rounded).
void kv_fp8_sim(DeviceContext& ctx, float* x, int64_t rows, int64_t head_dim, int64_t channels);

// Indexer FP4 simulation on [rows, d] (d a power of two): Hadamard rotation (Sylvester order,
// scale 1/sqrt(d), the CPU's butterfly order), bf16, the FP4 e2m1 round trip in 32-blocks
// (s = 2^ceil(log2(max(amax, 6 * 2^-126) / 6))), bf16.
void indexer_fp4_sim(DeviceContext& ctx, float* x, int64_t rows, int64_t d);

}  // namespace hs::cuda
