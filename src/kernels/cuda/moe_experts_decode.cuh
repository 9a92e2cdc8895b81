// The decode (n <= 8) weight-streaming kernels of the routed MoE; the scheme is described at
// the top of moe_experts.cu. Included by moe_experts.cu only.
#pragma once

#include "kernels/cuda/moe_experts_common.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

// ---------------------------------------------------------------------------------------
// Decode

// GGUF blocks in decode: a step is 32 units (32 elements) of one segment row, one per lane.
template <GgmlType T>
struct Geo {
  using Tr = QTraits<T>;
  static constexpr int kUnits = Tr::kBlk / 32;  // units per block
  static constexpr int kBlocks = 32 / kUnits;   // blocks per step
  static constexpr int kPerLane = ((kBlocks * Tr::kBytes + 30) / 16 + 31) / 32;  // 16-byte chunks
  static constexpr int kStage = kPerLane * 512 + 16;                             // + over-read pad
};

struct DecArgs {
  const uint8_t *wa, *wb, *sa, *sb;  // w1 and w3 (gate/up) or w2 (down), and their scales
  const uint8_t *wa_end, *wb_end;    // ends of the views (edge loads of GGUF blocks)
  const float* x;                    // gate/up: x [n, D]; down: h [n, k, I]
  const int32_t* idx;                // [n, k]; nullptr: the shared expert (expert 0, weight 1)
  const float* weight;
  float* out;  // gate/up: h [n, k, I]; down: y [n, D]
  int32_t* idx_sorted;  // gate/up, optional: [n, k] the token's experts in ascending order
  int64_t rows, L;  // output rows per expert, input width of one segment
  int k, E, splits, seg_per_piece;
  float limit;
  bool round_seg;   // down with k == 1: the row rounded to bf16 (model numerics)
  bool accumulate;  // down: out += the row (the shared expert)
  bool round_out;   // down: out rounded to bf16 at the end
};

// x . (16-byte chunk c of each of NS rows), unscaled (matvec.cu's mv_chunk for one column).
template <WType T, int NS>
__device__ __forceinline__ void dot_chunk(const uint4 (&raw)[NS], const float4* xs4, int64_t c, float (&part)[NS]) {
  using Tr = WTraits<T>;
  constexpr int Q = Tr::E / 4;
  HS_UNROLL for (int r = 0; r < NS; ++r) part[r] = 0.f;
  if constexpr (T == WType::MXFP4) {
    HS_UNROLL for (int wd = 0; wd < 4; ++wd) {
      const int64_t ga = c * Q + wd, gb = ga + 4;
      const float4 xa = xs4[ga ^ ((ga >> 3) & (Q - 1))], xb = xs4[gb ^ ((gb >> 3) & (Q - 1))];
      HS_UNROLL for (int r = 0; r < NS; ++r) {
        float lo[4], hi[4];
        Tr::word(word_of(raw[r], wd), lo, hi);
        part[r] = fma4(hi, xb, fma4(lo, xa, part[r]));
      }
    }
  } else {
    HS_UNROLL for (int p = 0; p < Q; ++p) {
      const int64_t gi = c * Q + p;
      const float4 xv = xs4[gi ^ ((gi >> 3) & (Q - 1))];
      HS_UNROLL for (int r = 0; r < NS; ++r) {
        float w[4];
        Tr::part(raw[r], p, w);
        part[r] = fma4(w, xv, part[r]);
      }
    }
  }
}

// Gate/up blocks serve the slot blockIdx.y = t*k + j, down blocks the token blockIdx.y = t.
// Dynamic shared memory: [GGUF tables][x piece: seg_per_piece * L floats][GGUF staging].
template <class Src, int R, bool GU>
__global__ void __launch_bounds__(kThreads) dec_kernel(DecArgs a) {
  pdl_enter();
  constexpr int NS = GU ? 2 * R : R;
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float red[kWarps][NS];
  __shared__ int seg_e[kMoeMaxK], s_rank;
  __shared__ float s_w;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, S = a.splits, G = kWarps / S;
  [[maybe_unused]] QTabs tabs{};
  if constexpr (Src::kGgml) tabs = stage_tables<Src::kType>(smem);
  const int64_t q = blockIdx.y, t = GU ? q / a.k : q;
  if (static_cast<int>(threadIdx.x) < a.k) {  // the token's experts in ascending order
    const int j = threadIdx.x, r = a.idx ? slot_rank(a.idx + t * a.k, a.k, j, a.E) : j;
    seg_e[r] = a.idx ? clamp_e(a.idx[t * a.k + j], a.E) : 0;
    if (GU && t * a.k + j == q) {
      s_rank = r, s_w = a.idx ? a.weight[q] : 1.0f;
      if (a.idx_sorted && blockIdx.x == 0) a.idx_sorted[t * a.k + r] = seg_e[r];
    }
  }
  __syncthreads();  // also publishes the tables
  const int nseg = GU ? 1 : a.k;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (G * R) + (warp / S) * R;
  int64_t rr[R];
  HS_UNROLL for (int r = 0; r < R; ++r) rr[r] = min64(row0 + r, a.rows - 1);  // past the end: not stored
  float acc[NS] = {};
  float4* xs4 = reinterpret_cast<float4*>(smem + Src::kTables);
  for (int p0 = 0; p0 < nseg; p0 += a.seg_per_piece) {
    const int p1 = min(nseg, p0 + a.seg_per_piece);
    const float* xsrc = a.x + (GU ? t : t * a.k + p0) * a.L;
    const int64_t n4 = (p1 - p0) * a.L / 4;
    if (p0 > 0) __syncthreads();
    if constexpr (!Src::kGgml) {
      constexpr WType T = Src::kType;
      using Tr = WTraits<T>;
      const int64_t Cs = a.L / Tr::E, rb = row_bytes<T>(a.L), Ct = (p1 - p0) * Cs, step = 32 * S;
      const ScaleRef sref[2] = {{a.sa, a.L}, {a.sb, a.L}};
      auto load = [&](int seg, int64_t cc, uint4(&raw)[NS], float(&sc)[NS]) {
        const int64_t e = GU ? seg_e[s_rank] : seg_e[seg];
        HS_UNROLL for (int r = 0; r < NS; ++r) {
          const int64_t grow = e * a.rows + rr[r % R];
          raw[r] = ld_stream16((r < R ? a.wa : a.wb) + grow * rb + cc * 16);
          sc[r] = Tr::kScaled ? sref[r < R ? 0 : 1].get(T, grow, cc) : 1.0f;
        }
      };
      int64_t c = (warp % S) * 32 + lane, cc = c % Cs;
      int seg = p0 + static_cast<int>(c / Cs);
      uint4 raw[NS];
      float sc[NS];
      if (c < Ct) load(seg, cc, raw, sc);  // in flight while x is staged
      stage_x<Tr::E / 4>(xs4, xsrc, n4);
      __syncthreads();
      while (c < Ct) {
        const int64_t cn = c + step;
        for (cc += step; cc >= Cs; cc -= Cs) ++seg;
        uint4 nraw[NS] = {};
        float nsc[NS] = {};
        if (cn < Ct) load(seg, cc, nraw, nsc);
        float part[NS];
        dot_chunk<T, NS>(raw, xs4, c, part);
        HS_UNROLL for (int r = 0; r < NS; ++r) {
          acc[r] = Tr::kScaled ? fmaf(part[r], sc[r], acc[r]) : acc[r] + part[r];
          raw[r] = nraw[r];
          sc[r] = nsc[r];
        }
        c = cn;
      }
    } else {
      constexpr GgmlType T = Src::kType;
      using Tr = QTraits<T>;
      using Gm = Geo<T>;
      uint8_t* stage = smem + Src::kTables + static_cast<int64_t>(a.seg_per_piece) * a.L * 4 + warp * NS * Gm::kStage;
      const int64_t Us = a.L / 32, SPS = (Us + 31) / 32, bpr = a.L / Tr::kBlk, rb = bpr * Tr::kBytes;
      const int64_t tot = (p1 - p0) * SPS;
      uint4 buf[NS][Gm::kPerLane];
      int n16[NS], head[NS];
      auto issue = [&](int64_t sg) {  // step sg of the piece -> registers
        const int64_t e = GU ? seg_e[s_rank] : seg_e[p0 + sg / SPS];
        const int64_t b0 = (sg % SPS) * Gm::kBlocks, b1 = min64(bpr, b0 + Gm::kBlocks);
        HS_UNROLL for (int r = 0; r < NS; ++r) {
          const uint8_t* base = (r < R ? a.wa : a.wb) + (e * a.rows + rr[r % R]) * rb;
          const uintptr_t lo = reinterpret_cast<uintptr_t>(base + b0 * Tr::kBytes), a0 = lo & ~uintptr_t{15};
          const uintptr_t hi = reinterpret_cast<uintptr_t>(base + b1 * Tr::kBytes);
          n16[r] = static_cast<int>((((hi + 15) & ~uintptr_t{15}) - a0) >> 4);
          head[r] = static_cast<int>(lo - a0);
          HS_UNROLL for (int i = 0; i < Gm::kPerLane; ++i)
            if (lane + 32 * i < n16[r])
              buf[r][i] = load_chunk(reinterpret_cast<const uint8_t*>(a0 + 16 * (lane + 32 * i)),
                                     r < R ? a.wa_end : a.wb_end);
        }
      };
      if (warp % S < tot) issue(warp % S);
      stage_x<8>(xs4, xsrc, n4);
      __syncthreads();
      for (int64_t sg = warp % S; sg < tot; sg += S) {
        int hd[NS];
        HS_UNROLL for (int r = 0; r < NS; ++r) {
          uint4* st = reinterpret_cast<uint4*>(stage + r * Gm::kStage);
          HS_UNROLL for (int i = 0; i < Gm::kPerLane; ++i) if (lane + 32 * i < n16[r]) st[lane + 32 * i] = buf[r][i];
          hd[r] = head[r];
        }
        __syncwarp();
        if (sg + S < tot) issue(sg + S);  // in flight while this step decodes
        const int64_t ui = (sg % SPS) * 32 + lane, xu = (sg / SPS) * Us + ui;
        if (ui < Us) {
          // The unit's 32 inputs stay in registers and the streams are decoded one at a time:
          // decoding all NS units at once held 32 * NS floats (174 registers for IQ2_XXS gate/up,
          // one block per SM). Each stream's sum runs over p in the same order as before.
          float4 xv[8];
          HS_UNROLL for (int p = 0; p < 8; ++p) xv[p] = xs4[xu * 8 + (p ^ static_cast<int>(xu & 7))];
          HS_UNROLL for (int r = 0; r < NS; ++r) {
            float v[32];
            QDecode<T>::unit(BlockIn{reinterpret_cast<const uint32_t*>(stage + r * Gm::kStage),
                                     hd[r] + (lane / Gm::kUnits) * Tr::kBytes},
                             lane % Gm::kUnits, tabs, v);
            HS_UNROLL for (int p = 0; p < 8; ++p)
              acc[r] = fma4(make_float4(v[4 * p], v[4 * p + 1], v[4 * p + 2], v[4 * p + 3]), xv[p], acc[r]);
          }
        }
        __syncwarp();  // the staging buffer is rewritten next
      }
    }
  }
  // Warp sums, the S split partials of each row in a fixed order, the epilogue.
  HS_UNROLL for (int r = 0; r < NS; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) red[warp][r] = v;
  }
  __syncthreads();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (G * R) + threadIdx.x;
  if (static_cast<int>(threadIdx.x) >= G * R || row >= a.rows) return;
  const int gg = threadIdx.x / R, r = threadIdx.x % R;
  float va = 0.f, vb = 0.f;
  for (int s = 0; s < S; ++s) {
    va += red[gg * S + s][r];
    if constexpr (GU) vb += red[gg * S + s][R + r];
  }
  if constexpr (GU) {
    a.out[(t * a.k + s_rank) * a.rows + row] = s_w * swiglu(va, vb, a.limit);
  } else {
    float* o = a.out + t * a.rows + row;
    if (a.round_seg) va = bf16_round(va);
    if (a.accumulate) va = *o + va;
    *o = a.round_out ? bf16_round(va) : va;
  }
}


}  // namespace
}  // namespace hs::cuda
