// The decode (n <= 8) gate/up projection of IQ2_XXS routed experts on tensor cores. Included by
// moe_experts.cu only; it replaces the staged f32 kernel (moe_experts_decode.cuh) for this one
// projection, the rest of the decode path is unchanged.
//
// Why: the f32 decode spends about 11 instructions per weight on an IQ2_XXS expert (ncu on the
// H200, 8L q2: 34.4M instructions for 26 MB of gate/up weights, issue-bound at 72 % of cycles,
// DRAM at 8 %). Here the weights never become f32: a grid entry's 8 magnitudes (8, 25, 43) are
// exact bf16, each pair one byte permute from a 7-byte palette of signed bf16 bytes: its
// selectors are an 8-byte grid-table entry in shared memory plus the signs, computed (the sign
// moves an element's high-byte selector to the negative copy; a second table of the signs cost
// as many shared-memory bank conflicts as the grid's random lookups), and mma.sync
// m16n8k16 multiplies them by x split into three bf16 terms x = t0 + t1 + t2 (24 significant
// bits, the MXFP4 path's exactness: one term per B column). The unit scale db = d (0.5 + ls) / 4,
// computed as the CPU does, multiplies each unit's f32 sum; only that reassociation separates the
// result from the CPU's dequantise-then-dot order.
//
// Geometry: a block of 8 warps = TR row spans x KS K-splits. A warp owns 16 rows of w1 and the
// same 16 of w3 and walks its share of K one 256-element block at a time: a step copies the 32
// rows' block bytes (the 16-byte-aligned 80 bytes around each 66-byte block) into a ring slot by
// cp.async, kDepth - 1 steps ahead of the one it decodes. Lane (g, c) takes group c (elements
// 8c..8c+7) of every unit of rows g and g + 8; mma m of a unit takes the group's elements 4m,
// 4m+1 (k = 2c, 2c+1) and 4m+2, 4m+3 (k = 2c+8, 2c+9), and the B terms are staged in that order.
#pragma once

#include "kernels/cuda/moe_fast_decode.cuh"
#include "kernels/cuda/moe_iq2_s8.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kIq2Row = 80;              // staged bytes per row and step
constexpr int kIq2Slot = 32 * kIq2Row;   // one step of a warp's 32 rows
constexpr int kIq2Depth = 3;             // ring slots per warp
constexpr int kIq2Tables = 2048;  // permute selectors of the grid entries (256 x 8 B)


// Signs b0..b3 (v < 16) as bit 5 of bytes 0..3 (+2 on each selector's high nibble): the multiply
// puts copies of v at bits 5, 12, 19 and 26 (no two overlap, so nothing carries), bit j of copy j
// at 8j + 5.
__host__ __device__ constexpr uint32_t iq2_sign_add(uint32_t v) { return v * 0x04081020u & 0x20202020u; }
constexpr bool iq2_sign_add_spreads() {
  for (uint32_t v = 0; v < 16; ++v) {
    uint32_t want = 0;
    for (int j = 0; j < 4; ++j) want |= ((v >> j) & 1u) << (8 * j + 5);
    if (iq2_sign_add(v) != want) return false;
  }
  return true;
}
static_assert(iq2_sign_add_spreads(), "IQ2_XXS signs: the multiply must put sign j at bit 8j + 5 only");

// Dynamic shared memory: [tables][B columns: K/16 k-groups x NC x 32 B][ring][16 B pad]. The
// int8 body of BC = 1 or 4 rows (moe_iq2_s8.cuh) puts its tables and digits in the first part,
// and the grouped kernels their reduction buffer (red, kWarps x NC x 32 floats at kS8Tables,
// written after the last read of the columns).
__host__ __device__ constexpr size_t iq2_cols_bytes(int64_t K, int NC, int BC) {
  const size_t bf = kIq2Tables + static_cast<size_t>(K) * 2 * NC, s8 = BC == 1 || BC == 4 ? iq2_s8_bytes(K, BC) : 0,
               rd = kS8Tables + size_t{kWarps} * NC * 32 * 4;
  size_t m = bf > s8 ? bf : s8;
  if (rd > m) m = rd;
  return (m + 15) / 16 * 16;
}
size_t iq2_smem(int64_t K, int NC, int BC) {
  return iq2_cols_bytes(K, NC, BC) + size_t{kWarps} * kIq2Depth * kIq2Slot + 16;
}

// The IQ2_XXS grid's magnitudes 8, 25, 43 (codes 0..2) and their bf16 bits 0x4100, 0x41C8,
// 0x422C: three low bytes and two high bytes, so the palette holds the high bytes' negatives too.
// Palette bytes: 0..2 the low bytes by code, 3 = 0x41, 4 = 0x42, 5 = 0xC1, 6 = 0xC2; an element's
// selector byte is (low byte, high byte) = (code, 3 + (code == 2) + 2 * sign).
__host__ __device__ constexpr uint32_t iq2_mag(int m) { return m == 0 ? 8u : m == 1 ? 25u : 43u; }
__host__ __device__ constexpr uint32_t bf16_bits_small(uint32_t n) {  // 0 < n < 256: exact
  int e = 0;
  while ((n >> (e + 1)) != 0) ++e;
  return static_cast<uint32_t>(127 + e) << 7 | ((n << (7 - e)) & 0x7Fu);
}
__host__ __device__ constexpr uint32_t iq2_pal(int hi) {  // hi = 0: palette bytes 0..3, 1: 4..7
  return hi ? (bf16_bits_small(iq2_mag(2)) >> 8) | ((bf16_bits_small(iq2_mag(0)) >> 8) | 0x80u) << 8 |
                  ((bf16_bits_small(iq2_mag(2)) >> 8) | 0x80u) << 16
            : (bf16_bits_small(iq2_mag(0)) & 255u) | (bf16_bits_small(iq2_mag(1)) & 255u) << 8 |
                  (bf16_bits_small(iq2_mag(2)) & 255u) << 16 | (bf16_bits_small(iq2_mag(0)) >> 8) << 24;
}
static_assert(bf16_bits_small(8) == 0x4100 && bf16_bits_small(25) == 0x41C8 && bf16_bits_small(43) == 0x422C &&
                  bf16_bits_small(iq2_mag(0)) >> 8 == bf16_bits_small(iq2_mag(1)) >> 8 &&
                  bf16_bits_small(iq2_mag(2)) >> 8 == (bf16_bits_small(iq2_mag(0)) >> 8) + 1,
              "IQ2_XXS palette: two high bytes");
constexpr bool iq2_grid_in_palette() {
  for (uint64_t e : qtab::kIq2xxsGrid)
    for (int j = 0; j < 8; ++j) {
      const uint64_t b = (e >> (8 * j)) & 255u;
      if (b != iq2_mag(0) && b != iq2_mag(1) && b != iq2_mag(2)) return false;
    }
  return true;
}
static_assert(iq2_grid_in_palette(), "IQ2_XXS grid bytes outside the bf16 palette");

// The body's K order for stage_columns: k-group G = 2 U + m (unit U, mma m) takes elements
// 8c + 4m .. + 3 of unit U in lane c.
struct Iq2Order {
  __device__ int64_t operator()(int64_t G, int c) const { return 32 * (G >> 1) + 8 * c + 4 * (G & 1); }
};

// One block's slice of expert e against cnt input rows xs (cnt <= BC <= NC, the staged columns:
// NT = NC / 8 rounded up mma n-tiles): every warp's column sums of its rows into red
// (columns_to_red's layout), then epi(first row, rows) after a barrier, once when every x is a
// bf16 value (one term per column), else once per row (three terms each).
template <int BC, int NC, class Epi>
__device__ __forceinline__ void iq2_body(const FastArgs& a, const uint8_t* wa_end, const uint8_t* wb_end,
                                         uint8_t* smem, float* red, int e, const float* const* xs, int cnt,
                                         Epi&& epi) {
  static_assert(BC >= 1 && BC <= NC, "iq2_body: 1..NC columns");
  constexpr int NT = (NC + 7) / 8;
  uint64_t* gtab = reinterpret_cast<uint64_t*>(smem);  // grid entry -> element j's selector byte j
  uint2* bs = reinterpret_cast<uint2*>(smem + kIq2Tables);
  uint8_t* rings = smem + iq2_cols_bytes(a.K, NC, BC);
  constexpr uint32_t pal_lo = iq2_pal(0), pal_hi = iq2_pal(1);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int tr = warp % a.TR, ks = warp / a.TR;
  const int64_t K = a.K, nb = K / 256, rb = nb * 66;
  const int64_t span0 = static_cast<int64_t>(blockIdx.x) * a.TR * 16 + tr * 16;
  const int64_t gpw = (nb + a.KS - 1) / a.KS, J0 = min64(nb, ks * gpw), J1 = min64(nb, J0 + gpw);
  const int64_t e_row0 = static_cast<int64_t>(e) * a.rows;
  uint8_t* wring = rings + warp * kIq2Depth * kIq2Slot;
  // Staged row j = 16 f + i: row span0 + i of w1 (f = 0) or of w3 (f = 1); rows past the end
  // repeat the last one (computed, not stored).
  auto row_base = [&](int j) {
    const int64_t r = min64(span0 + (j & 15), a.rows - 1);
    return (j >> 4 ? a.wb[0] : a.wa[0]) + (e_row0 + r) * rb;
  };
  auto fill = [&](int64_t b, uint8_t* st) {
    HS_UNROLL for (int i = 0; i < 5; ++i) {
      const int qd = lane + 32 * i, j = qd / 5, part = qd - 5 * j;
      const uintptr_t p = (reinterpret_cast<uintptr_t>(row_base(j) + 66 * b) & ~uintptr_t{15}) + 16 * part;
      cp_async16(st + j * kIq2Row + 16 * part, reinterpret_cast<const uint8_t*>(p), j >> 4 ? wb_end : wa_end);
    }
  };
  const WarpRing<kIq2Depth> ring{wring, kIq2Slot, J0, J1};
  ring.prime(fill);
  const uint8_t* rbase[2][2];  // this lane's rows: [f][h] = row g + 8h of w1 / w3
  HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) rbase[f][h] = row_base(16 * f + g + 8 * h);
  // Step b's rows in the staged step st: each row's block offset and scale d.
  auto step_rows = [&](int64_t b, const uint32_t* st, int (&off)[2][2], float (&d)[2][2]) {
    HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
      off[f][h] = (16 * f + g + 8 * h) * kIq2Row + static_cast<int>(reinterpret_cast<uintptr_t>(rbase[f][h] + 66 * b) & 15);
      d[f][h] = BlockIn{st, off[f][h]}.f16(0);
    }
  };
  if constexpr (BC == 1 || BC == 4) {  // the int8 body where every x is an FP8 round trip (moe_iq2_s8.cuh)
    const S8Smem<BC> t(smem, K);
    if (a.s8 && iq2_s8_stage<BC>(t, xs, cnt, K)) {
      float acc[S8Cols<BC>::kTiles][2][2] = {};
      ring.run(fill, [&](int64_t b, const uint8_t* st8) {
        const uint32_t* st = reinterpret_cast<const uint32_t*>(st8);
        int off[2][2];
        float d[2][2];
        step_rows(b, st, off, d);
        iq2_s8_step<BC>(t, st, off, d, b, acc);
      });
      __syncthreads();  // (red may alias the digits)
      s8_to_red<BC>(acc, red + (ks * a.TR + tr) * BC * 32);
      __syncthreads();
      epi(0, cnt);
      __syncthreads();
      return;
    }
  }
  for (int i = threadIdx.x; i < 256; i += blockDim.x) {  // (the int8 staging's tables overlap it)
    const uint64_t ge = c_iq2xxs_grid.v[i];
    uint64_t sel = 0;
    HS_UNROLL for (int j = 0; j < 8; ++j) {
      const uint32_t b = static_cast<uint32_t>(ge >> (8 * j)) & 255u;
      const uint64_t code = b == iq2_mag(0) ? 0 : b == iq2_mag(1) ? 1 : 2;
      sel |= (code | (3 + (code == 2)) << 4) << (8 * j);
    }
    gtab[i] = sel;
  }
  // The columns go to shared memory while the first steps load (the barrier also publishes the
  // tables).
  const bool three = stage_inputs<BC, NC>(bs, nullptr, xs, cnt, K, Iq2Order{});
  for (int pass = 0; pass < (three ? cnt : 1); ++pass) {
    if (pass > 0) {
      ring.prime(fill);
      stage_columns<NC>(bs, nullptr, xs + pass, 1, true, K, Iq2Order{});
      __syncthreads();
    }
    float acc[NT][2][2][2] = {};  // [nt][f][h][p]: rows g + 8h of matrix f, column 8 nt + 2c + p
    ring.run(fill, [&](int64_t b, const uint8_t* st8) {
      const uint32_t* st = reinterpret_cast<const uint32_t*>(st8);
      int off[2][2];
      float d[2][2];
      step_rows(b, st, off, d);
      const uint2* bu = bs + b * 16 * NC * 4 + g * 4 + c;  // unit 8b + u, mma m, tile nt: + ((2u + m) NC + 8 nt) * 4
      HS_UNROLL for (int u = 0; u < 8; ++u) {
        uint2 bm[NT][2];
        HS_UNROLL for (int nt = 0; nt < NT; ++nt) HS_UNROLL for (int m = 0; m < 2; ++m)
          bm[nt][m] = g + 8 * nt < NC ? bu[((2 * u + m) * NC + 8 * nt) * 4] : make_uint2(0u, 0u);
        HS_UNROLL for (int f = 0; f < 2; ++f) {
          uint32_t A[2][4];
          float db[2];
          HS_UNROLL for (int h = 0; h < 2; ++h) {
            // The unit: 4 grid indices (this lane's is one byte load), then 4 x 7 sign bits and the
            // scale in one word.
            const BlockIn blk{st, off[f][h]};
            const uint32_t w1 = blk.u32(6 + 8 * u);
            // Selector nibbles stay below 8 after the sign's +2: the sums have no carries.
            const uint2 gs = reinterpret_cast<const uint2*>(gtab)[blk.u8(2 + 8 * u + c)];
            const uint32_t sb = iq2_sign_byte((w1 >> (7 * c)) & 127u);
            const uint32_t sel[2] = {gs.x + iq2_sign_add(sb & 15u), gs.y + iq2_sign_add(sb >> 4)};
            HS_UNROLL for (int p = 0; p < 4; ++p)
              A[h][p] = __byte_perm(pal_lo, pal_hi, sel[p >> 1] >> (16 * (p & 1)));  // elements 2p, 2p+1
            // d (0.5 + ls) / 4 rounded once, as the CPU's (d (0.5 + ls)) / 4.
            db[h] = d[f][h] * fmaf(uint_f(w1 >> 28), 0.25f, 0.125f);
          }
          HS_UNROLL for (int nt = 0; nt < NT; ++nt) {
            float cf[4] = {0.f, 0.f, 0.f, 0.f};
            HS_UNROLL for (int m = 0; m < 2; ++m)
              mma_bf16(cf, A[0][2 * m], A[1][2 * m], A[0][2 * m + 1], A[1][2 * m + 1], bm[nt][m].x, bm[nt][m].y);
            HS_UNROLL for (int h = 0; h < 2; ++h) HS_UNROLL for (int p = 0; p < 2; ++p)
              acc[nt][f][h][p] = fmaf(db[h], cf[2 * h + p], acc[nt][f][h][p]);
          }
        }
      }
    });
    __syncthreads();  // (red may alias the columns)
    HS_UNROLL for (int nt = 0; nt < NT; ++nt) columns_to_red<BC>(acc[nt], three, red + (ks * a.TR + tr) * BC * 32, nt);
    __syncthreads();
    epi(three ? pass : 0, three ? 1 : cnt);
    __syncthreads();  // red and the columns are rewritten by the next pass
  }
}

// grid (row blocks, slots): the first a.nsh slots are the shared expert's (token y, Q8_0 planes,
// moe_fast_decode.cuh's body), the rest routed slots y - a.nsh. h = weight * swiglu_clamp(g, u)
// into a.out[(t * k + rank) * rows + row] (the shared expert's row: a.nk + t), the token's
// experts in ascending order into a.idx_sorted.
__global__ void __launch_bounds__(kThreads, 2) iq2_gate_up_kernel(FastArgs a, const uint8_t* wa_end,
                                                                  const uint8_t* wb_end) {
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float red[kWarps * 32];
  __shared__ int s_rank, s_e;
  __shared__ float s_w;
  const FastSlot sl = fast_slot<true>(a);  // (from the launch arguments only)
  // PDL: before the wait only the shared expert's weights are read.
  prefetch_shared_rows(a, sl, 16, true);
  pdl_enter();
  if (threadIdx.x == 0) fast_slot_meta<true>(a, sl, &s_e, &s_rank, &s_w);
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * 16;
  if (sl.sh) {
    __syncthreads();
    fast_body<FMath<WType::Q8_0, false>, true>(a, a.wa[1], a.wb[1], a.sa[1], a.sb[1], 0,
                                                a.x + static_cast<int64_t>(sl.t) * a.K, row0, smem, red);
    __syncthreads();
    fast_epilogue<true>(a, red, row0, sl, s_rank, s_w);
  } else {
    __syncthreads();  // s_e
    const float* xrow = a.x + static_cast<int64_t>(sl.t) * a.K;
    iq2_body<1, kBCols>(a, wa_end, wb_end, smem, red, s_e, &xrow, 1,
                [&](int, int) { fast_epilogue<true>(a, red, row0, sl, s_rank, s_w); });
  }
}

// Whether the gate/up pair takes this kernel (IQ2_XXS blocks, whole 256-element rows, the
// staging fits in shared memory).
bool iq2_gate_up_ok(DeviceContext& ctx, const WeightView& w1, int64_t K) {
  return w1.type == WType::GGML_BLOCK && w1.ggml == GgmlType::IQ2_XXS && K % 256 == 0 &&
         iq2_smem(K, kBCols, kBCols) + 2048 <= ctx.props().sharedMemPerBlockOptin;
}

// nk routed slots and nsh shared-expert slots (their weights in a.wa[1], a.wb[1], a.sa[1],
// a.sb[1]: Q8_0 planes): kSlotKsplit K-splits (ksplit > 0: forced), the rest of the block's
// warps row spans.
void iq2_gate_up(DeviceContext& ctx, FastArgs a, int nk, int nsh, const uint8_t* wa_end, const uint8_t* wb_end,
                 int ksplit) {
  if (nk + nsh == 0) return;
  split_warps(a, a.K / 256, kSlotKsplit, ksplit);
  a.q0 = 0, a.nk = nk, a.nsh = nsh;
  const size_t smem = iq2_smem(a.K, kBCols, 1);
  const void* kern = reinterpret_cast<const void*>(iq2_gate_up_kernel);
  ctx.ensure_dynamic_smem(kern, smem);
  const int64_t span = 16 * a.TR;
  const dim3 grid(static_cast<unsigned>((a.rows + span - 1) / span), static_cast<unsigned>(nk + nsh));
  void* args[] = {&a, &wa_end, &wb_end};
  launch(ctx, kern, grid, dim3(kThreads), smem, args);
}

}  // namespace
}  // namespace hs::cuda
