// bf16 tensor-core helpers shared by the decode kernels that keep f32 accuracy on mma.sync
// (the MoE decode bodies, the Q8_0 matvec of matvec_mma.cu): one m16n8k16 step with f32
// accumulation, bf16x2 packing, and the three-term split of f32 inputs.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

namespace hs::cuda::detail {

__device__ __forceinline__ uint32_t pack_bf16(float a, float b) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);  // a in the low half
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}

// d += A (16x16, a0..a3) . B (16x8, b0, b1), the PTX fragment layouts of m16n8k16 .bf16.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// x = t0 + t1 + t2 in bf16 (t0 = bf16(x), t1 = bf16(x - t0), t2 = bf16(x - t0 - t1): 24
// significant bits) for four values: o[t] = (bf16x2 of v0, v1 | of v2, v3) of term t.
__device__ __forceinline__ void bf16_terms(float (&v)[4], uint2 (&o)[3]) {
#pragma unroll
  for (int t = 0; t < 3; ++t) {
    uint32_t w[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __nv_bfloat16 lo = __float2bfloat16_rn(v[2 * h]), hi = __float2bfloat16_rn(v[2 * h + 1]);
      v[2 * h] -= __bfloat162float(lo);  // exact: the rounding error of lo
      v[2 * h + 1] -= __bfloat162float(hi);
      const __nv_bfloat162 pr = __halves2bfloat162(lo, hi);
      memcpy(&w[h], &pr, 4);
    }
    o[t] = make_uint2(w[0], w[1]);
  }
}

}  // namespace hs::cuda::detail
