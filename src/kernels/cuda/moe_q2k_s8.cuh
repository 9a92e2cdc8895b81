// The int8 form of the Q2_K down body (moe_q2k_decode.cuh) for one input row (per slot) or an
// item of up to 4 (grouped decode): each 2-bit code times its sub-block's 4-bit scale is an int8
// (at most 3 * 15 = 45; one multiply per 4 codes, no carries between bytes), the input's FP8
// round trip three int8 digits (moe_s8.cuh), and one mma.sync m16n8k32 .s8 covers two
// sub-blocks (k 0..15: sub-block S, 16..31: S + 2, the two shifts of one code word), accumulating
// in int32 over a 128-element input block (one quantum 2^q per row): no per-sub-block scale
// multiplies, and one f32 conversion per block and row. The min terms (dmin * m * sum of the
// sub-block's inputs) stay the bf16 body's, on the staged sums. Included by moe_q2k_decode.cuh.
//
// Bounds: per 128 elements and digit column at most 128 * 45 * 64 = 368640 in magnitude, so
// digit 0 + 128 x digit 1 stays below 4.8e7 < 2^31. The results agree with the bf16 body to f32
// rounding, not bitwise; inputs that are not FP8 round trips take the bf16 body.
//
// Shared memory (inside q2k_smem's first part, sized for both): [digits: K/16 sub-blocks x 3 or
// 12 columns x 4 lanes x 4 B][quanta: K/128 x rows][sub-block sums: K/16 x kBCols floats].
#pragma once

#include "kernels/cuda/moe_s8.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

__host__ __device__ constexpr size_t q2k_s8_bytes(int64_t K, int BC) {
  return static_cast<size_t>(K) * iq2s8::stored_columns(BC) + static_cast<size_t>(K / 128) * BC * 4 +
         static_cast<size_t>(K / 16) * kBCols * 4;
}

template <int BC>
struct Q2kS8Smem {
  uint32_t* digits;  // sub-block S, stored column s, lane c: (S * kStored + s) * 4 + c
  float* quanta;     // [K/128][BC]
  float* sx;         // [K/16][kBCols]: the min terms' sums (the bf16 body's layout)
  __device__ Q2kS8Smem(uint8_t* smem, int64_t K)
      : digits(reinterpret_cast<uint32_t*>(smem)),
        quanta(reinterpret_cast<float*>(smem + K * S8Cols<BC>::kStored)),
        sx(reinterpret_cast<float*>(smem + K * S8Cols<BC>::kStored + K / 128 * BC * 4)) {}
};

// Stages the digits, quanta and sub-block sums (rows past cnt: zeros; the min terms read columns
// < BC only). Ends with a barrier; returns whether every block was an FP8 round trip.
template <int BC>
__device__ __forceinline__ bool q2k_s8_stage(const Q2kS8Smem<BC>& t, const float* const* xs, int cnt, int64_t K) {
  return __syncthreads_and(stage_digits<BC, 4>(t.digits, t.quanta, t.sx, kBCols, xs, cnt, K)) != 0;
}

// One ring step b (256 elements) of a warp's 32 rows (f: rows 16 f + g + 8 h) into acc[nt][f][h]
// (S8Cols' lanes: BC = 1: lane c = 0 digits 0 + 128 x 1, c = 1 digit 2; BC = 4: lane c row c's
// digits 0 + 128 x 1 in tile 0, its digit 2 in tile 1). st32: the staged step, off[f][h] the
// block's byte offset in it (its 16 scale bytes first), d[f][h] its scale.
template <int BC>
__device__ __forceinline__ void q2k_s8_step(const Q2kS8Smem<BC>& t, const uint32_t* st32, const int (&off)[2][2],
                                            const float (&d)[2][2], int64_t b, float (&acc)[S8Cols<BC>::kTiles][2][2]) {
  using Cols = S8Cols<BC>;
  constexpr int NT = Cols::kTiles;
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  int col[NT];
  HS_UNROLL for (int nt = 0; nt < NT; ++nt) col[nt] = Cols::lane_col(nt, g);
  HS_UNROLL for (int n = 0; n < 2; ++n) {  // the 128-element input blocks
    int I[NT][2][4] = {};                  // [nt][f][h * 2 + p]
    HS_UNROLL for (int hb = 0; hb < 2; ++hb) {  // 16-byte half of the block's 32 code bytes
      uint32_t wq[2][2];
      HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h)
        wq[f][h] = st32[((off[f][h] + 16 + 16 * (2 * n + hb)) >> 2) + c];
      HS_UNROLL for (int jp = 0; jp < 2; ++jp) {  // shifts 2 jp (sub-block S0) and 2 jp + 1 (S0 + 2)
        const int S0 = 8 * n + 4 * jp + hb, S1 = S0 + 2;
        const int64_t G0 = 16 * b + S0, G1 = 16 * b + S1;
        uint2 bm[NT];
        HS_UNROLL for (int nt = 0; nt < NT; ++nt)
          bm[nt] = col[nt] >= 0 ? make_uint2(t.digits[(G0 * Cols::kStored + col[nt]) * 4 + c],
                                             t.digits[(G1 * Cols::kStored + col[nt]) * 4 + c])
                                : make_uint2(0u, 0u);
        HS_UNROLL for (int f = 0; f < 2; ++f) {
          uint32_t lo[2], hi[2];
          HS_UNROLL for (int h = 0; h < 2; ++h) {
            const uint32_t sw = st32[(off[f][h] >> 2) + (S0 >> 2)];  // (S1 = S0 + 2: the same word)
            const uint32_t sc0 = (sw >> (8 * (S0 & 3))) & 15u, sc1 = (sw >> (8 * (S1 & 3))) & 15u;
            lo[h] = ((wq[f][h] >> (4 * jp)) & 0x03030303u) * sc0;      // elements 4c..4c+3 of S0
            hi[h] = ((wq[f][h] >> (4 * jp + 2)) & 0x03030303u) * sc1;  // and of S1
          }
          HS_UNROLL for (int nt = 0; nt < NT; ++nt) mma_s8_acc(I[nt][f], lo[0], lo[1], hi[0], hi[1], bm[nt].x, bm[nt].y);
        }
      }
    }
    const float qs = t.quanta[(2 * b + n) * BC + (BC == 1 ? 0 : c)];
    HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
      const float dq = d[f][h] * qs;
      acc[0][f][h] = fmaf(dq, static_cast<float>(I[0][f][2 * h] + 128 * I[0][f][2 * h + 1]), acc[0][f][h]);
      if constexpr (NT == 2) acc[1][f][h] = fmaf(dq, static_cast<float>(I[1][f][2 * h]), acc[1][f][h]);
    }
  }
}

}  // namespace
}  // namespace hs::cuda
