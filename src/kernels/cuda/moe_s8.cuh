// The int8 tensor-core operands shared by the q2 mix's int8 bodies (moe_iq2_s8.cuh for IQ2_XXS
// gate/up, moe_q2k_s8.cuh for Q2_K down): the mma, and the staging of FP8-round-tripped inputs as
// three int8 digits per element (src/kernels/iq2_s8.h: X = x / 2^q an integer below 2^18 per
// 128-element block, X = d0 + 128 d1 + 16384 d2), one B column per digit (iq2s8::Cols).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/iq2_s8.h"

namespace hs::cuda {

using namespace detail;

namespace {

template <int BC>
using S8Cols = iq2s8::Cols<BC>;

// d (int32 x4) = A (16x32 s8, a0..a3) . B (32x8 s8, b0, b1) + c, the PTX fragment layouts of
// m16n8k32 (tests/test_iq2_s8.cpp models them on the host).
__device__ __forceinline__ void mma_s8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
}
__device__ __forceinline__ void mma_s8_acc(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                           uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Stages the digits of the input rows xs[0..cnt) (rows cnt..BC-1: zeros): warp w takes the
// (row, 128-element block) pairs w, w + 8, ..., lane L the elements 4L..4L+3, i.e. the word
// e4 = 32 blk + L of 4 elements; a body's unit holds GW such words (IQ2_XXS: 32 elements, GW =
// 8; Q2_K: a 16-element sub-block, GW = 4), lane c of the mma the word e4 % GW (IQ2: half of
// lane c's 8 elements: c = (e4 % 8) / 2), so digit column s of word e4 goes to word
// (e4 / GW * kStored + s) * GW + e4 % GW of dig. quanta[blk * BC + j] = 2^q (0: a zero block).
// sx (non-null): per 16-element sub-block S and row j the sum of the 16 inputs at S * sx_stride
// + j (four words' in-order sums added pairwise). Returns whether this thread's blocks were all
// FP8 round trips (no barrier).
template <int BC, int GW>
__device__ __forceinline__ bool stage_digits(uint32_t* dig, float* quanta, float* sx, int sx_stride,
                                             const float* const* xs, int cnt, int64_t K) {
  using Cols = S8Cols<BC>;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int64_t nblk = K / 128;
  bool ok = true;
  for (int64_t i = threadIdx.x >> 5; i < BC * nblk; i += warps) {
    const int j = static_cast<int>(i / nblk);
    const int64_t blk = i - j * nblk;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (j < cnt) {
      const float4 v4 = *reinterpret_cast<const float4*>(xs[j] + blk * 128 + 4 * lane);
      v[0] = v4.x, v[1] = v4.y, v[2] = v4.z, v[3] = v4.w;
    }
    const float amax = warp_max(fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
    int q = 0;
    float quantum = 0.f;
    if (amax > 0.f) {  // (NaN: the conversions below fail)
      q = iq2s8::quantum_exp(amax);
      ok = ok && q >= -126;  // 2^q a normal float
      quantum = ldexpf(1.0f, q);
    }
    uint32_t w[3] = {0u, 0u, 0u};
    HS_UNROLL for (int e = 0; e < 4; ++e) {
      int32_t X = 0;
      if (amax > 0.f) ok = iq2s8::to_int(v[e], q, X) && ok;
      else ok = ok && v[e] == 0.f;
      int8_t d[3];
      iq2s8::digits(X, d);
      HS_UNROLL for (int dd = 0; dd < 3; ++dd) w[dd] |= static_cast<uint32_t>(static_cast<uint8_t>(d[dd])) << (8 * e);
    }
    const int64_t e4 = 32 * blk + lane, unit = e4 / GW;
    HS_UNROLL for (int dd = 0; dd < 3; ++dd) dig[(unit * Cols::kStored + Cols::stored(j, dd)) * GW + e4 % GW] = w[dd];
    if (lane == 0) quanta[blk * BC + j] = quantum;
    if (sx) {
      float s = ((v[0] + v[1]) + v[2]) + v[3];
      s += __shfl_xor_sync(kFullMask, s, 1);
      s += __shfl_xor_sync(kFullMask, s, 2);
      if ((lane & 3) == 0) sx[(e4 / 4) * sx_stride + j] = s;
    }
  }
  return ok;
}

// A warp's int8 sums into red (columns_to_red's layout: column j = row j, rows 16 f + g + 8 h):
// digits 0 + 128 x 1 plus 16384 x digit 2 (BC = 1: from lane c = 1; BC = 4: lane c's tile 1).
template <int BC>
__device__ __forceinline__ void s8_to_red(const float (&acc)[S8Cols<BC>::kTiles][2][2], float* wred) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
    const int r = 16 * f + g + 8 * h;
    if constexpr (BC == 1) {
      const float hi = __shfl_xor_sync(kFullMask, acc[0][f][h], 1);
      if (c == 0) wred[r] = fmaf(16384.0f, hi, acc[0][f][h]);
    } else {
      wred[c * 32 + r] = fmaf(16384.0f, acc[1][f][h], acc[0][f][h]);
    }
  }
}

}  // namespace
}  // namespace hs::cuda
