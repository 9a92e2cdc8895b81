// The decode (n <= 8) down projection of Q2_K routed experts on tensor cores (the q2 mix's
// down experts), with a Q8_0 shared expert in the same launch. Included by moe_experts.cu only;
// it replaces the staged f32 kernel (moe_experts_decode.cuh) for this one projection. Its
// per-segment rows are added by fast_combine_kernel (moe_fast_decode.cuh), as the native types'.
//
// Why: the f32 decode is issue-bound on Q2_K (ncu on the H200, 8L q2: 34 us for 16.5 MB of
// down weights at n = 1). Here the 2-bit codes never become f32: four codes of a row (one byte
// each at one shift) become two bf16x2 words by one multiply-add and two byte permutes from a
// palette of bf16(0..3), and mma.sync m16n8k16 multiplies them by h split into three bf16 terms
// (f32-exact, the MXFP4 and IQ2_XXS paths' scheme). A k-step is one 16-element sub-block: its
// sum of q * h is scaled by dl = d * (sc & 15) and the sub-block's sum of h, times ml = dmin *
// (sc >> 4), is subtracted: dl * sum(q h) - ml * sum(h) = sum((dl q - ml) h), the CPU's
// dequantise-then-dot in another order.
//
// Geometry: a block of 8 warps = TR row spans x KS K-splits. A warp owns 32 rows of w2 (two
// 16-row fragments) and walks its share of K one 256-element block at a time; a step copies the
// 32 rows' block bytes (the 16-byte-aligned 96 bytes around each 84-byte block) into a ring slot
// by cp.async, kQ2Depth - 1 steps ahead. K inside a sub-block is permuted (A and B alike): mma
// k = 2c, 2c+1 take elements 4c, 4c+1 and k = 2c+8, 2c+9 elements 4c+2, 4c+3, so lane (g, c)
// reads one 32-bit word of codes per row and 128-element half, which serves four sub-blocks.
#pragma once

#include "kernels/cuda/moe_fast_decode.cuh"
#include "kernels/cuda/moe_q2k_s8.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kQ2Row = 96;             // staged bytes per row and step
constexpr int kQ2Slot = 32 * kQ2Row;   // one step of a warp's 32 rows
constexpr int kQ2Depth = 3;            // ring slots per warp

// Dynamic shared memory: [B columns: K/16 sub-blocks x NC x 32 B][their sums: K/16 x NC
// floats][ring][16 B over-read pad].
// The int8 body of BC = 1 or 4 rows (moe_q2k_s8.cuh) stages into the first part, sized for both.
__host__ __device__ constexpr size_t q2k_cols_bytes(int64_t K, int NC, int BC) {
  const size_t bf = static_cast<size_t>(K) * 2 * NC + static_cast<size_t>(K / 16) * NC * 4,
               s8 = BC == 1 || BC == 4 ? q2k_s8_bytes(K, BC) : 0;
  return ((bf > s8 ? bf : s8) + 15) / 16 * 16;
}
size_t q2k_smem(int64_t K, int NC, int BC) {
  return q2k_cols_bytes(K, NC, BC) + size_t{kWarps} * kQ2Depth * kQ2Slot + 16;
}

// bf16 bits of 0, 1, 2, 3: low bytes 00 80 00 40, high bytes 00 3F 40 40 (palette bytes 0..3, 4..7).
constexpr uint32_t kQ2PalLo = 0x40008000u, kQ2PalHi = 0x40403F00u;

// The body's K order for stage_columns: k-group = sub-block S, lane c its elements 4c..4c+3.
struct Q2kOrder {
  __device__ int64_t operator()(int64_t S, int c) const { return 16 * S + 4 * c; }
};

// One block's slice of expert e of w2 against cnt input rows xs (cnt <= BC <= NC, the staged
// columns: NT = NC / 8 rounded up mma n-tiles): every warp's column sums of its 32 rows into red
// (columns_to_red's layout), then epi(first row, rows) after a barrier, once when every h is a
// bf16 value (one term per column), else once per row.
template <int BC, int NC, class Epi>
__device__ __forceinline__ void q2k_body(const FastArgs& a, const uint8_t* w_end, uint8_t* smem, float* red, int e,
                                         const float* const* xs, int cnt, Epi&& epi) {
  static_assert(BC >= 1 && BC <= NC, "q2k_body: 1..NC columns");
  constexpr int NT = (NC + 7) / 8;
  constexpr bool kWide = NC > kBCols;  // prefill's items: each lane its own columns' min terms
  uint2* bs = reinterpret_cast<uint2*>(smem);
  float* sx = reinterpret_cast<float*>(smem + a.K * 2 * NC);
  uint8_t* rings = smem + q2k_cols_bytes(a.K, NC, BC);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int tr = warp % a.TR, ks = warp / a.TR;
  const int64_t K = a.K, nb = K / 256, rb = nb * 84;
  const int64_t span0 = static_cast<int64_t>(blockIdx.x) * a.TR * 32 + tr * 32;
  const int64_t gpw = (nb + a.KS - 1) / a.KS, J0 = min64(nb, ks * gpw), J1 = min64(nb, J0 + gpw);
  const int64_t e_row0 = static_cast<int64_t>(e) * a.rows;
  uint8_t* wring = rings + warp * kQ2Depth * kQ2Slot;
  // Staged row j: row span0 + j (rows past the end repeat the last one: computed, not stored).
  auto row_base = [&](int j) { return a.wa[0] + (e_row0 + min64(span0 + j, a.rows - 1)) * rb; };
  auto fill = [&](int64_t b, uint8_t* st) {
    HS_UNROLL for (int i = 0; i < 6; ++i) {
      const int qd = lane + 32 * i, j = qd / 6, part = qd - 6 * j;
      const uintptr_t p = (reinterpret_cast<uintptr_t>(row_base(j) + 84 * b) & ~uintptr_t{15}) + 16 * part;
      cp_async16(st + j * kQ2Row + 16 * part, reinterpret_cast<const uint8_t*>(p), w_end);
    }
  };
  const WarpRing<kQ2Depth> ring{wring, kQ2Slot, J0, J1};
  ring.prime(fill);
  const uint8_t* rbase[2][2];  // this lane's rows: [f][h] = row 16 f + g + 8 h of the span
  HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) rbase[f][h] = row_base(16 * f + g + 8 * h);
  // Step b's rows in the staged step: block offsets (multiples of 4), d, dmin.
  auto step_rows = [&](int64_t b, const uint32_t* st32, int (&off)[2][2], float (&d)[2][2], float (&dmin)[2][2]) {
    HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
      off[f][h] = (16 * f + g + 8 * h) * kQ2Row + static_cast<int>(reinterpret_cast<uintptr_t>(rbase[f][h] + 84 * b) & 15);
      const uint32_t dd = st32[(off[f][h] + 80) >> 2];  // d, dmin
      d[f][h] = f16_bits_to_f32(static_cast<uint16_t>(dd));
      dmin[f][h] = f16_bits_to_f32(static_cast<uint16_t>(dd >> 16));
    }
  };
  // The min terms of one row (BC = 1): lane c takes sub-blocks c + 4 i (scale byte c of word i)
  // and the quad adds them up; of several: lane c takes columns 2 (c & 1), +1 over sub-blocks
  // (c >> 1) + 2 i (byte 2 (i & 1) + (c >> 1) of word i / 2), lane c ^ 2 the other eight (fewer
  // registers than every column in every lane). Word indices stay compile-time constants. The
  // sums: sxp[sub-block * kBCols + column].
  constexpr int MC = BC == 1 ? 1 : 2, MS = BC == 1 ? 4 : 8;
  const int mc = BC == 1 ? 0 : 2 * (c & 1);
  auto min_terms = [&](int64_t b, const float* sxp, const uint32_t (&sw)[2][2][4], const float (&dmin)[2][2],
                       float (&accm)[2][2][MC]) {
    HS_UNROLL for (int i = 0; i < MS; ++i) {
      const int S = BC == 1 ? c + 4 * i : (c >> 1) + 2 * i;
      float hs[MC];  // the sub-block's sums of columns mc.. inputs
      if constexpr (MC == 2) {
        const float2 v = *reinterpret_cast<const float2*>(sxp + (b * 16 + S) * kBCols + mc);
        hs[0] = v.x, hs[MC - 1] = v.y;
      } else {
        hs[0] = sxp[(b * 16 + S) * kBCols];
      }
      HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
        const uint32_t scw = BC == 1 ? sw[f][h][i] >> (8 * c) : sw[f][h][i >> 1] >> (8 * (2 * (i & 1) + (c >> 1)));
        const float ml = dmin[f][h] * uint_f((scw >> 4) & 15u);
        HS_UNROLL for (int j = 0; j < MC; ++j) accm[f][h][j] = fmaf(-ml, hs[j], accm[f][h][j]);
      }
    }
  };
  if constexpr (BC == 1 || BC == 4) {  // the int8 body where every h is an FP8 round trip (moe_q2k_s8.cuh)
    const Q2kS8Smem<BC> t(smem, K);
    if (a.s8 && q2k_s8_stage<BC>(t, xs, cnt, K)) {
      float acc8[S8Cols<BC>::kTiles][2][2] = {}, accm[2][2][MC] = {};
      ring.run(fill, [&](int64_t b, const uint8_t* st) {
        const uint32_t* st32 = reinterpret_cast<const uint32_t*>(st);
        int off[2][2];
        float d[2][2], dmin[2][2];
        step_rows(b, st32, off, d, dmin);
        {  // (the scale words die here: the int8 step reads its own, fewer live registers)
          uint32_t sw[2][2][4];
          HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) HS_UNROLL for (int i = 0; i < 4; ++i)
            sw[f][h][i] = st32[(off[f][h] >> 2) + i];
          min_terms(b, t.sx, sw, dmin, accm);
        }
        q2k_s8_step<BC>(t, st32, off, d, b, acc8);
      });
      float* wred = red + (ks * a.TR + tr) * BC * 32;
      s8_to_red<BC>(acc8, wred);
      __syncwarp();
      HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {  // + the min terms
        const int r = 16 * f + g + 8 * h;
        if constexpr (BC == 1) {
          float m = accm[f][h][0];
          m += __shfl_xor_sync(kFullMask, m, 1);
          m += __shfl_xor_sync(kFullMask, m, 2);
          if (c == 0) wred[r] += m;
        } else {
          HS_UNROLL for (int p = 0; p < 2; ++p) {
            const float other = __shfl_xor_sync(kFullMask, accm[f][h][p], 2);
            if (c < 2) wred[(2 * c + p) * 32 + r] += accm[f][h][p] + other;
          }
        }
      }
      __syncthreads();
      epi(0, cnt);
      __syncthreads();
      return;
    }
  }
  const bool three = stage_inputs<BC, NC>(bs, sx, xs, cnt, K, Q2kOrder{});
  for (int pass = 0; pass < (three ? cnt : 1); ++pass) {
    if (pass > 0) {
      ring.prime(fill);
      stage_columns<NC>(bs, sx, xs + pass, 1, true, K, Q2kOrder{});
      __syncthreads();
    }
    // [nt][f][h][p]: rows 16 f + g + 8 h, column 8 nt + 2c + p; accm: the min terms of columns
    // mc + p (narrow) or of the lane's own columns (wide).
    float acc[NT][2][2][2] = {}, accm[2][2][MC] = {}, accw[kWide ? NT : 1][2][2][2] = {};
    ring.run(fill, [&](int64_t b, const uint8_t* st) {
      const uint32_t* st32 = reinterpret_cast<const uint32_t*>(st);
      int off[2][2];
      float d[2][2], dmin[2][2];
      step_rows(b, st32, off, d, dmin);
      uint32_t sw[2][2][4];  // the 16 scale bytes
      HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) HS_UNROLL for (int i = 0; i < 4; ++i)
        sw[f][h][i] = st32[(off[f][h] >> 2) + i];
      if constexpr (kWide) {
        HS_UNROLL for (int S = 0; S < 16; ++S) {
          float2 hs[NT];  // the sub-block's sums of this lane's columns
          HS_UNROLL for (int nt = 0; nt < NT; ++nt)
            hs[nt] = *reinterpret_cast<const float2*>(sx + (b * 16 + S) * NC + 8 * nt + 2 * c);
          HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
            const float ml = dmin[f][h] * uint_f((sw[f][h][S >> 2] >> (8 * (S & 3) + 4)) & 15u);
            HS_UNROLL for (int nt = 0; nt < NT; ++nt) {
              accw[nt][f][h][0] = fmaf(-ml, hs[nt].x, accw[nt][f][h][0]);
              accw[nt][f][h][1] = fmaf(-ml, hs[nt].y, accw[nt][f][h][1]);
            }
          }
        }
      } else {
        min_terms(b, sx, sw, dmin, accm);
      }
      const uint2* bb = bs + b * 16 * NC * 4 + g * 4 + c;  // sub-block S, tile nt: + (S * NC + 8 nt) * 4
      HS_UNROLL for (int nh = 0; nh < 4; ++nh) {  // 128-element half n = nh / 2, 16-byte half nh % 2
        uint32_t wq[2][2];
        HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h)
          wq[f][h] = st32[((off[f][h] + 16 + 16 * nh) >> 2) + c];
        HS_UNROLL for (int j = 0; j < 4; ++j) {
          const int S = 8 * (nh >> 1) + 2 * j + (nh & 1);
          uint2 bm[NT];
          HS_UNROLL for (int nt = 0; nt < NT; ++nt)
            bm[nt] = g + 8 * nt < NC ? bb[(S * NC + 8 * nt) * 4] : make_uint2(0u, 0u);
          HS_UNROLL for (int f = 0; f < 2; ++f) {
            uint32_t lo[2], hi[2];
            float dl[2];
            HS_UNROLL for (int h = 0; h < 2; ++h) {
              // Selector byte i = code | (code + 4) << 4: bytes (low, high) of bf16(code).
              const uint32_t sel = ((wq[f][h] >> (2 * j)) & 0x03030303u) * 0x11u + 0x40404040u;
              lo[h] = __byte_perm(kQ2PalLo, kQ2PalHi, sel);        // elements 4c, 4c+1
              hi[h] = __byte_perm(kQ2PalLo, kQ2PalHi, sel >> 16);  // elements 4c+2, 4c+3
              dl[h] = d[f][h] * uint_f((sw[f][h][S >> 2] >> (8 * (S & 3))) & 15u);
            }
            HS_UNROLL for (int nt = 0; nt < NT; ++nt) {
              float cf[4] = {0.f, 0.f, 0.f, 0.f};
              mma_bf16(cf, lo[0], lo[1], hi[0], hi[1], bm[nt].x, bm[nt].y);
              HS_UNROLL for (int h = 0; h < 2; ++h) HS_UNROLL for (int p = 0; p < 2; ++p)
                acc[nt][f][h][p] = fmaf(dl[h], cf[2 * h + p], acc[nt][f][h][p]);
            }
          }
        }
      }
    });
    // The min terms into the products: one row's column 0 (the quad's four partial sums by a
    // butterfly, in lane c = 0, before the terms are added up: a bf16 row gives the one-term
    // bits); several rows' column 2c + p (lanes c & 1 and (c & 1) + 2 in that order, for c < 2;
    // lanes c >= 2 hold only the zero columns 4..7).
    // Wide: each lane adds its own columns' min terms.
    HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
      if constexpr (kWide) {
        HS_UNROLL for (int nt = 0; nt < NT; ++nt) HS_UNROLL for (int p = 0; p < 2; ++p)
          acc[nt][f][h][p] += accw[nt][f][h][p];
      } else if constexpr (BC == 1) {
        float m = accm[f][h][0];
        m += __shfl_xor_sync(kFullMask, m, 1);
        m += __shfl_xor_sync(kFullMask, m, 2);
        if (c == 0) acc[0][f][h][0] += m;
      } else {
        HS_UNROLL for (int p = 0; p < 2; ++p) {
          const float other = __shfl_xor_sync(kFullMask, accm[f][h][p], 2);
          acc[0][f][h][p] += c < 2 ? accm[f][h][p] + other : 0.f;
        }
      }
    }
    HS_UNROLL for (int nt = 0; nt < NT; ++nt) columns_to_red<BC>(acc[nt], three, red + (ks * a.TR + tr) * BC * 32, nt);
    __syncthreads();
    epi(three ? pass : 0, three ? 1 : cnt);
    __syncthreads();  // red and the columns are rewritten by the next pass
  }
}

// grid (row blocks, segments): the first a.nsh segments are the shared expert's (token y, Q8_0
// planes in a.wa[1], a.sa[1]; moe_fast_decode.cuh's body), the rest routed segments y - a.nsh
// (expert a.idx[q] of w2 against h row q). Each segment's rows into a.out[q * rows + row].
__global__ void __launch_bounds__(kThreads, 2) q2k_down_kernel(FastArgs a, const uint8_t* w_end) {
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float red[kWarps * 32];
  __shared__ int s_rank, s_e;
  __shared__ float s_w;
  const FastSlot sl = fast_slot<false>(a);  // (from the launch arguments only)
  // PDL: before the wait only the shared expert's weights are read.
  prefetch_shared_rows(a, sl, 32, false);
  pdl_enter();
  if (threadIdx.x == 0) fast_slot_meta<false>(a, sl, &s_e, &s_rank, &s_w);
  __syncthreads();
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * 32;
  if (sl.sh) {
    fast_body<FMath<WType::Q8_0, false>, false>(a, a.wa[1], a.wa[1], a.sa[1], a.sa[1], 0,
                                                 a.x + static_cast<int64_t>(sl.q) * a.K, row0, smem, red);
    __syncthreads();
    fast_epilogue<false>(a, red, row0, sl, s_rank, s_w);
    return;
  }
  const float* xrow = a.x + static_cast<int64_t>(sl.q) * a.K;
  q2k_body<1, kBCols>(a, w_end, smem, red, s_e, &xrow, 1, [&](int, int) { fast_epilogue<false>(a, red, row0, sl, s_rank, s_w); });
}

// Whether the down projection takes this kernel: Q2_K blocks, whole 256-element rows, no shared
// expert or a Q8_0 one, the staging fits in shared memory.
bool q2k_down_ok(DeviceContext& ctx, const WeightView& w2, const MoeShared* shared, int64_t K) {
  return w2.type == WType::GGML_BLOCK && w2.ggml == GgmlType::Q2_K && K % 256 == 0 &&
         (!shared || shared->w2.type == WType::Q8_0) &&
         q2k_smem(K, kBCols, kBCols) + 2048 <= ctx.props().sharedMemPerBlockOptin;
}

// nk routed segments and nsh shared ones: kSlotKsplit K-splits (ksplit > 0: forced), the rest of
// the block's warps row spans.
void q2k_down(DeviceContext& ctx, FastArgs a, int nk, int nsh, const uint8_t* w_end, int ksplit) {
  if (nk + nsh == 0) return;
  split_warps(a, a.K / 256, kSlotKsplit, ksplit);
  a.q0 = 0, a.nk = nk, a.nsh = nsh;
  const size_t smem = q2k_smem(a.K, kBCols, 1);
  const void* kern = reinterpret_cast<const void*>(q2k_down_kernel);
  ctx.ensure_dynamic_smem(kern, smem);
  const int64_t span = 32 * a.TR;
  const dim3 grid(static_cast<unsigned>((a.rows + span - 1) / span), static_cast<unsigned>(nk + nsh));
  void* args[] = {&a, &w_end};
  launch(ctx, kern, grid, dim3(kThreads), smem, args);
}

}  // namespace
}  // namespace hs::cuda
