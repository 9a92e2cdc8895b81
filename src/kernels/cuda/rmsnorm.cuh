// The parts of RMSNorm that other kernels repeat bit for bit (norm_rope.cu's norms; hc.cu's
// fused hand-over between sub-layers, which ends in the next sub-layer's input norm).
#pragma once
#include <cstdint>

#include "kernels/cuda/quant_sim.cuh"

namespace hs::cuda::detail {

// The threads of one rmsnorm row of d (rmsnorm_kernel and rmsnorm_rope_kernel: the same split,
// so the same sum of squares: thread t adds elements t, t + threads, ... in order, then the
// block's warps are summed as block_sum does).
__host__ __device__ constexpr int rmsnorm_threads(int64_t d) { return d >= 2048 ? 512 : d >= 512 ? 256 : 128; }

// Element i of the normed row (input value xi, weight wi: 1 without weights, and 1 * v == v),
// rounded to bf16 when round_out.
__device__ __forceinline__ float norm_val(float xi, float wi, float inv, bool round_in, bool round_out) {
  const float o = wi * ((round_in ? bf16_round(xi) : xi) * inv);  // (rounding is idempotent)
  return round_out ? bf16_round(o) : o;
}

}  // namespace hs::cuda::detail
