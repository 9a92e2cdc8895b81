// The int8 form of the IQ2_XXS gate/up body (moe_iq2_decode.cuh) for one input row (per slot) or
// an item of up to 4 (grouped decode): the weights as signed int8 (src/kernels/iq2_s8.h: a grid
// word and its negation, one byte permute per 4 elements) and each input's FP8 round trip as
// three int8 digits, one B column each, multiplied by mma.sync m16n8k32 .s8 into exact int32
// sums. Included by moe_iq2_decode.cuh only.
//
// Why: the bf16 body builds its A fragments from a palette (grid selectors, the signs spread by a
// multiply, 4 permutes per 8 weights) and needs two m16n8k16 mmas per 32 elements and n-tile;
// here 8 weights are a grid load, two subtractions, a sign-selector load and two permutes, and
// one m16n8k32 covers the unit (per slot; 4 rows: two n-tiles, S8Cols). The unit scales
// d (0.5 + ls) / 4 = d (2 ls + 1) / 8 are applied as the integer 2 ls + 1 to the unit's int32
// sums, which are added over the 4 units of one input block (128 elements, one FP8 quantum 2^q
// per row); each such half step is converted to f32 once and multiplied by d 2^q / 8 (exact:
// powers of two). Bounds: a digit column's unit sum is at most 32 * 43 * 64 = 88064 in
// magnitude, times 31 over 4 units 10.9M, and digit 0 + 128 x digit 1 at most 1.41e9 < 2^31;
// digit 2 is added as 16384 x its f32 sum at the end. Only the rounding points differ from the
// bf16 body (one f32 rounding per half step instead of the mma's f32 accumulation): the results
// agree to f32 rounding, not bitwise.
//
// Inputs that are not FP8 round trips of 128-element blocks (reference numerics) fail the
// staging's check, and the block takes the bf16 body instead (iq2_body): never a wrong sum.
//
// Shared memory (the first part of iq2_smem's, sized for both bodies): [grid 2 KB][sign
// selectors 512 B][digits: K/32 units x 3 or 12 columns x 4 lanes x 8 B][quanta: K/128 x rows].
#pragma once

#include "kernels/cuda/moe_s8.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kS8Tables = 256 * 8 + 128 * 4;

__host__ __device__ constexpr size_t iq2_s8_bytes(int64_t K, int BC) {
  return kS8Tables + static_cast<size_t>(K) * iq2s8::stored_columns(BC) + static_cast<size_t>(K / 128) * BC * 4;
}

template <int BC>
struct S8Smem {
  uint2* grid;     // 256 grid entries (the magnitudes as int8 bytes)
  uint32_t* sel;   // 128 sign fields -> both permute selectors
  uint2* digits;   // unit U, stored column s, lane c: (U * kStored + s) * 4 + c
  float* quanta;   // per 128-element input block and row: 2^q (0 for an all-zero block)
  __device__ S8Smem(uint8_t* smem, int64_t K)
      : grid(reinterpret_cast<uint2*>(smem)),
        sel(reinterpret_cast<uint32_t*>(smem + 256 * 8)),
        digits(reinterpret_cast<uint2*>(smem + kS8Tables)),
        quanta(reinterpret_cast<float*>(smem + kS8Tables + K * S8Cols<BC>::kStored)) {}
};

// Fills the tables and stages the digits of the input rows xs[0..cnt) (rows cnt..BC-1: zeros)
// in units of 32 elements (stage_digits). Ends with a barrier; returns whether every block was an
// FP8 round trip (the same answer in every thread).
template <int BC>
__device__ __forceinline__ bool iq2_s8_stage(const S8Smem<BC>& t, const float* const* xs, int cnt, int64_t K) {
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {
    const uint64_t e = c_iq2xxs_grid.v[i];
    t.grid[i] = make_uint2(static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32));
  }
  for (int i = threadIdx.x; i < 128; i += blockDim.x) t.sel[i] = iq2s8::sign_selectors(static_cast<uint32_t>(i));
  const bool ok = stage_digits<BC, 8>(reinterpret_cast<uint32_t*>(t.digits), t.quanta, nullptr, 0, xs, cnt, K);
  return __syncthreads_and(ok) != 0;
}

// One ring step b (256 elements) of a warp's 16 + 16 rows on the int8 operands into acc[nt][f][h]
// (BC = 1: lane c = 0 digits 0 + 128 x 1, c = 1 digit 2; BC = 4: lane c row c's digits 0 + 128 x
// 1 in tile 0, its digit 2 in tile 1). st: the staged step, off[f][h] the byte offset of row
// (f, h)'s block in it, d[f][h] that block's scale.
template <int BC>
__device__ __forceinline__ void iq2_s8_step(const S8Smem<BC>& t, const uint32_t* st, const int (&off)[2][2],
                                            const float (&d)[2][2], int64_t b,
                                            float (&acc)[S8Cols<BC>::kTiles][2][2]) {
  using Cols = S8Cols<BC>;
  constexpr int NT = Cols::kTiles;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  int col[NT];
  HS_UNROLL for (int nt = 0; nt < NT; ++nt) col[nt] = Cols::lane_col(nt, g);
  HS_UNROLL for (int hf = 0; hf < 2; ++hf) {  // the two 128-element input blocks of the step
    const float qs = t.quanta[(2 * b + hf) * BC + (BC == 1 ? 0 : c)] * 0.125f;
    int I[NT][2][2][2] = {};  // [nt][f][h][p]: sum over the half's units of (2 ls + 1) x column sums
    HS_UNROLL for (int uu = 0; uu < 4; ++uu) {
      const int64_t U = 8 * b + 4 * hf + uu;
      const int u = 4 * hf + uu;
      uint2 bm[NT];
      HS_UNROLL for (int nt = 0; nt < NT; ++nt)
        bm[nt] = col[nt] >= 0 ? t.digits[(U * Cols::kStored + col[nt]) * 4 + c] : make_uint2(0u, 0u);
      HS_UNROLL for (int f = 0; f < 2; ++f) {
        uint32_t A[2][2];
        int m[2];
        HS_UNROLL for (int h = 0; h < 2; ++h) {
          const BlockIn blk{st, off[f][h]};
          const uint32_t w1 = blk.u32(6 + 8 * u);
          const uint2 pos = t.grid[blk.u8(2 + 8 * u + c)];
          uint32_t w[2];
          iq2s8::signed_group(pos.x, pos.y, t.sel[(w1 >> (7 * c)) & 127u], w);
          A[h][0] = w[0], A[h][1] = w[1];
          m[h] = static_cast<int>((w1 >> 27) | 1u);  // 2 ls + 1 (bit 27 is a sign bit, or'ed away)
        }
        HS_UNROLL for (int nt = 0; nt < NT; ++nt) {
          int cf[4];
          mma_s8(cf, A[0][0], A[1][0], A[0][1], A[1][1], bm[nt].x, bm[nt].y);
          HS_UNROLL for (int h = 0; h < 2; ++h) HS_UNROLL for (int p = 0; p < 2; ++p)
            if (nt == 0 || p == 0) I[nt][f][h][p] += m[h] * cf[2 * h + p];
        }
      }
    }
    HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
      const float dq = d[f][h] * qs;
      acc[0][f][h] = fmaf(dq, static_cast<float>(I[0][f][h][0] + 128 * I[0][f][h][1]), acc[0][f][h]);
      if constexpr (NT == 2) acc[1][f][h] = fmaf(dq, static_cast<float>(I[1][f][h][0]), acc[1][f][h]);
    }
  }
}

}  // namespace
}  // namespace hs::cuda
