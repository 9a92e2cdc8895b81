// The decode (n <= 8) MoE kernels for native weight types (F32, F16, BF16, Q8_0, FP8_B128,
// MXFP4): included by moe_experts.cu only (the scheme is described at the top of that file).
//
// One launch streams every gate/up matrix (routed slots and the shared expert, grid.y = slot),
// one every down matrix (grid.y = segment: a routed slot or the shared expert), and a small
// kernel combines each token's segments. A block of 8 warps covers TR row spans x KS K-splits
// (TR * KS = 8); a warp owns 4 streams (gate/up: 16 rows of w1 and the same 16 of w3; down: 32
// rows of w2) and walks its K-range in groups of 4 chunks (16 bytes of a row each), lane
// (g, c) = (lane / 4, lane % 4) reading chunk 4J + c of rows g and g + 8 of each stream: one
// 16-byte load per stream and group, two groups in flight. The K-split partials are added in a
// fixed order through shared memory, so results are bit-reproducible (no atomics).
//
// F32 math (every native type): x (or h) is staged in shared memory as f32 and each lane adds
// its chunks' dot products (matvec.cu's decoders), scaled per chunk; the quad's four lanes are
// summed by a butterfly (the same sum in each lane).
// MMA math (MXFP4): the chunk's 32 FP4 codes are decoded to bf16 (two byte-permute lookups and
// a sign merge per 4 codes, exact), multiplied by the block scale 2^(e-128) in bf16 (exact: the
// products keep f32's exponent range and at most 2 significant bits), and fed to mma.sync
// m16n8k16 with f32 accumulation as the A operand (16 rows). The B operand carries the input
// split into three bf16 terms x = t0 + t1 + t2 (t0 = bf16(x), t1 = bf16(x - t0), t2 = bf16(x -
// t0 - t1): 24 significant bits, x to within 2^-25 relative), one term per column, so the three
// columns' sum is the f32 dot product of the exactly dequantised weights. The K order inside a
// group is permuted (A and B alike, which leaves the product unchanged): mma m of chunk ch
// takes elements (2m, 2m+16) and (2m+1, 2m+17) of the chunk, the pairs a lane's FP4 word yields.
// Each group accumulates into fresh registers that are then added to the running sums in f32.
#pragma once

#include <type_traits>

#include "kernels/cuda/moe_experts_common.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

// A weight type and its math: MMA for MXFP4 (tensor cores, exact), else f32.
template <WType T, bool MMA>
struct FMath {
  static constexpr WType kType = T;
  static constexpr bool kMma = MMA;
  static_assert(!MMA || T == WType::MXFP4, "tensor-core decode is for MXFP4 only");
  static constexpr int E = WTraits<T>::E;  // elements per 16-byte chunk
  // Dynamic shared memory for an input row of K elements: f32 x (swizzled) or the B terms
  // (768 bytes per group of 4 chunks).
  static constexpr size_t smem(int64_t K) {
    return MMA ? static_cast<size_t>((K / E + 3) / 4) * 768 : static_cast<size_t>(K) * 4;
  }
};

struct FastArgs {
  const uint8_t *wa[2], *wb[2], *sa[2], *sb[2];  // [0] routed, [1] shared; wb: gate/up's w3
  const float* x;        // gate/up: x [n, K]; down: h [n*k + n, K]
  const int32_t* idx;    // gate/up: the routing [n, k]; down: the experts by rank [n, k]
  const float* weight;   // gate/up: routing weights [n, k]
  float* out;            // gate/up: h [n*k + n, rows] (routed rows by rank); down: d [n*k + n, rows]
  int32_t* idx_sorted;   // gate/up: writes each token's experts in ascending order [n, k]
  int64_t rows, K;       // output rows per expert, input width
  int k, E, nk, q0, nsh;  // slots per token, experts, n*k (slots >= nk: the shared expert), first routed
                         // slot and shared slots of the launch
  int TR, KS;            // row spans x K-splits per block (TR * KS = 8)
  float limit;
  bool s8;  // IQ2_XXS gate/up per slot: try the int8 body (moe_iq2_s8.cuh)
};

// ---- MXFP4 -> bf16 (exact doubled E2M1 values; see the header comment)

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) { return __byte_perm(a, b, s); }

// Word q of a chunk (bytes 4w..4w+3: elements 4w+b in low nibbles, 4w+b+16 in high nibbles) ->
// o[p] = bf16x2 (element 4w+p low, element 4w+p+16 high), each multiplied by sc (bf16x2).
__device__ __forceinline__ void fp4_word_bf16(uint32_t q, __nv_bfloat162 sc, uint32_t (&o)[4]) {
  constexpr uint32_t kHi0 = 0x40403F00u, kHi1 = 0x41414040u;  // bf16 high bytes of 0,1,2,3,4,6,8,12
  constexpr uint32_t kLo0 = 0x40008000u, kLo1 = 0x4000C080u;  // and low bytes
  const uint32_t qh = q >> 16, q4 = q << 4;
  // Byte j of s*: bit 7 = the sign of nibble j (the selector's bit 3 is ignored by the lookups).
  const uint32_t sa = prmt(q4, q, 0x5140u), sb = prmt(q4, q, 0x7362u);
  const uint32_t ha = prmt(kHi0, kHi1, q) | (sa & 0x80808080u), hb = prmt(kHi0, kHi1, qh) | (sb & 0x80808080u);
  const uint32_t la = prmt(kLo0, kLo1, q), lb = prmt(kLo0, kLo1, qh);
  const uint32_t raw[4] = {prmt(la, ha, 0x5140u), prmt(la, ha, 0x7362u), prmt(lb, hb, 0x5140u), prmt(lb, hb, 0x7362u)};
  HS_UNROLL for (int p = 0; p < 4; ++p) {
    __nv_bfloat162 v;
    memcpy(&v, &raw[p], 4);
    v = __hmul2(v, sc);
    memcpy(&o[p], &v, 4);
  }
}

// The MXFP4 block scale 2^(e-128) as bf16x2 (e < 2: bf16 subnormals, as ggml's f32 values).
__device__ __forceinline__ __nv_bfloat162 e8m0_half_bf16x2(uint32_t e) {
  const uint32_t b = e >= 2u ? (e - 1u) << 7 : 0x20u << e;
  const uint32_t w = b * 0x00010001u;
  __nv_bfloat162 v;
  memcpy(&v, &w, 4);
  return v;
}

// A warp's ring of Depth staging slots in shared memory, filled by cp.async Depth - 1 steps ahead
// of the step it decodes (the GGUF tensor-core kernels: moe_iq2_decode.cuh, moe_q2k_decode.cuh).
// fill(b, dst) queues step b's bytes into dst; body(b, src) decodes step b from src.
template <int Depth>
struct WarpRing {
  uint8_t* base;
  int slot_bytes;
  int64_t b0, b1;  // the warp's steps
  template <class Fill>
  __device__ __forceinline__ void issue(int64_t b, int slot, Fill& fill) const {  // one group per step
    if (b < b1) fill(b, base + slot * slot_bytes);
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  template <class Fill>
  __device__ __forceinline__ void prime(Fill& fill) const {
    HS_UNROLL for (int d = 0; d + 1 < Depth; ++d) issue(b0 + d, d, fill);
  }
  template <class Fill, class Body>
  __device__ __forceinline__ void run(Fill& fill, Body&& body) const {
    int slot = 0;
    for (int64_t b = b0; b < b1; ++b) {
      issue(b + Depth - 1, (slot + Depth - 1) % Depth, fill);  // that slot was released last step
      asm volatile("cp.async.wait_group %0;" ::"n"(Depth - 1) : "memory");
      __syncwarp();  // every lane's bytes of step b are in
      body(b, static_cast<const uint8_t*>(base + slot * slot_bytes));
      __syncwarp();  // this slot is refilled next step
      slot = slot + 1 == Depth ? 0 : slot + 1;
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
};

// B terms of one input row in shared memory: group J, mma m, term t, lane c -> uint2 (b0, b1)
// at ((J * 8 + m) * 3 + t) * 4 + c. Chunks past K are zeros.
__device__ __forceinline__ void stage_terms(uint2* bs, const float* x, int64_t K) {
  const int64_t C = K / 32, n = (C + 3) / 4 * 32;
  for (int64_t i0 = threadIdx.x; i0 < n; i0 += 4 * static_cast<int64_t>(blockDim.x)) {
    float v[4][4];
    HS_UNROLL for (int u = 0; u < 4; ++u) {  // 4 tasks' loads in flight
      const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x), ch = 4 * (i >> 5) + (i & 3);
      const int m = static_cast<int>((i >> 2) & 7);
      float2 lo = make_float2(0.f, 0.f), hi = lo;
      if (i < n && ch < C) {
        lo = *reinterpret_cast<const float2*>(x + ch * 32 + 2 * m);
        hi = *reinterpret_cast<const float2*>(x + ch * 32 + 2 * m + 16);
      }
      v[u][0] = lo.x, v[u][1] = hi.x, v[u][2] = lo.y, v[u][3] = hi.y;
    }
    HS_UNROLL for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * static_cast<int64_t>(blockDim.x), J = i >> 5;
      if (i >= n) break;
      const int m = static_cast<int>((i >> 2) & 7), c = static_cast<int>(i & 3);
      uint2 o[3];
      bf16_terms(v[u], o);
      HS_UNROLL for (int t = 0; t < 3; ++t) bs[((J * 8 + m) * 3 + t) * 4 + c] = o[t];
    }
  }
}

// K-splits of the q2 mix's tensor-core kernels (moe_iq2_decode.cuh, moe_q2k_decode.cuh, and
// moe_grouped_decode.cuh's): a warp walks a longer share of K than the deeper splits of session
// 13 gave it (4 or 8: two to four 256-element steps at Flash shapes), so its ring reaches steady
// state and a block's set-up (tables, staged inputs, ring fill) serves more steps. Measured on an
// H100 at Flash shapes (test MoeExpertsQ2MixSplits, the whole MoE in model numerics): per slot at
// n = 1, 2 splits 97.9 / 96.7 us (gate/up / down forced, the other by the rule) against 102.4
// for the old rule and 122.1 / 109.3 for 1; grouped at n = 32, 1 split 1332.6 / 1334.2 us
// against 1481.5 (old rule) and 1388.1 / 1343.9 for 2.
constexpr int kSlotKsplit = 2, kGroupedKsplit = 1;

// The GGUF tensor-core kernels' block of kWarps warps as a.TR row spans x a.KS K-splits over nb
// 256-element steps: `forced` K-splits (MoeTuning, checked by moe_experts: 1..kWarps, a power of
// two) or `ks` by the caller's rule, halved until every warp has two or more steps.
inline void split_warps(FastArgs& a, int64_t nb, int ks, int forced) {
  a.KS = forced > 0 ? forced : ks;
  while (a.KS > 1 && nb < 2 * a.KS) a.KS /= 2;
  a.TR = kWarps / a.KS;
}

// B columns of the GGUF tensor-core decode bodies (moe_iq2_decode.cuh, moe_q2k_decode.cuh): the
// mma's N holds NC staged columns (the rest are zeros; NC = kBCols in decode, more in prefill's
// items: every 8 columns one more mma n-tile). One term: column j is bf16(x_j) of input row j <
// cnt (grouped: up to NC tokens of one expert) and zeros past cnt; three terms: columns 0..2
// hold the terms t0, t1, t2 of row 0 (the others zeros), whose sum the body adds at the end.
// Either way each column's sums are scaled per unit on their own, so a row gives the same bits
// in both forms when its x are bf16 values (t1 = t2 = 0) and whatever the other columns hold: a
// token's result depends on its own input only.
constexpr int kBCols = 4;

// Stages the columns: k-group G (16 elements: lane c's elements 4c..4c+3 in the body's K order,
// at float offset src(G, c) of an input row) as uint2 at (G * NC + col) * 4 + c. sx (when
// non-null): per (G, col) the group's 16 values added in element order (three terms: column 0,
// the others 0). Returns nonzero when a one-term staging met an x that is not a bf16 value.
template <int NC, class Src>
__device__ __forceinline__ uint32_t stage_columns(uint2* bs, float* sx, const float* const* xs, int cnt, bool three,
                                                  int64_t K, Src src) {
  static_assert(NC >= 3, "three terms need three columns");
  uint32_t inexact = 0;
  const int rows = three ? 1 : cnt;
  for (int64_t G = threadIdx.x; G < K / 16; G += blockDim.x) {
    uint2* dst = bs + G * NC * 4;
    HS_UNROLL for (int j = 0; j < NC; ++j) {
      if (j >= rows) break;
      float4 v4[4];
      HS_UNROLL for (int c = 0; c < 4; ++c) v4[c] = *reinterpret_cast<const float4*>(xs[j] + src(G, c));
      float s = 0.f;
      HS_UNROLL for (int c = 0; c < 4; ++c) {
        float v[4] = {v4[c].x, v4[c].y, v4[c].z, v4[c].w};
        s += v[0], s += v[1], s += v[2], s += v[3];
        uint2 o[3];
        bf16_terms(v, o);
        if (three) {
          HS_UNROLL for (int t = 0; t < 3; ++t) dst[t * 4 + c] = o[t];
        } else {
          dst[j * 4 + c] = o[0];
          inexact |= o[1].x | o[1].y | o[2].x | o[2].y;
        }
      }
      if (sx) sx[G * NC + j] = s;
    }
    for (int j = three ? 1 : rows; j < NC; ++j) {
      if (!three || j >= 3) HS_UNROLL for (int c = 0; c < 4; ++c) dst[j * 4 + c] = make_uint2(0u, 0u);
      if (sx) sx[G * NC + j] = 0.f;
    }
  }
  return inexact;
}

// The bodies' first staging of cnt input rows, ending with a barrier: one term per column when
// every x is a bf16 value, else the first row's three terms (then the rows run one at a time).
// One row (BC = 1) takes its three terms at once: the same bits as one term when x is bf16,
// without a second staging pass. Returns whether the columns hold three terms.
template <int BC, int NC, class Src>
__device__ __forceinline__ bool stage_inputs(uint2* bs, float* sx, const float* const* xs, int cnt, int64_t K,
                                             Src src) {
  if constexpr (BC == 1) {
    stage_columns<NC>(bs, sx, xs, 1, true, K, src);
    __syncthreads();
    return true;
  } else {
    if (!__syncthreads_or(stage_columns<NC>(bs, sx, xs, cnt, false, K, src) != 0)) return false;
    stage_columns<NC>(bs, sx, xs, 1, true, K, src);
    __syncthreads();
    return true;
  }
}

// A body's column sums of n-tile nt (lane (g, c) holds columns 8 nt + 2c, + 1 of rows g, g+8 of
// each fragment f) into red[(warp_slot * BC + col) * 32 + 16 f + g + 8 h]; three terms (nt = 0):
// the token's sum (t0 + t1) + t2 into column 0.
template <int BC>
__device__ __forceinline__ void columns_to_red(const float (&acc)[2][2][2], bool three, float* wred, int nt = 0) {
  const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
    const int r = 16 * f + g + 8 * h;
    const float t2 = __shfl_xor_sync(kFullMask, acc[f][h][0], 1);  // lane c = 1's column 2
    if (three) {
      if (c == 0 && nt == 0) wred[r] = (acc[f][h][0] + acc[f][h][1]) + t2;
    } else {
      HS_UNROLL for (int p = 0; p < 2; ++p) {
        const int col = 8 * nt + 2 * c + p;
        if (col < BC) wred[col * 32 + r] = acc[f][h][p];
      }
    }
  }
}

// After a barrier: columns 0..ncols-1 of red (columns_to_red's layout, KS partials in split
// order) as output rows orow[j]: gate/up's h = w[j] * swiglu_clamp(g, u), down's segment row.
template <bool GU, int BC>
__device__ __forceinline__ void columns_epilogue(const FastArgs& a, const float* red, int64_t row0, int ncols,
                                                 const int* orow, const float* w) {
  constexpr int span = GU ? 16 : 32;
  const int per = a.TR * span;
  for (int i = threadIdx.x; i < per * ncols; i += blockDim.x) {
    const int j = i / per, ii = i - j * per, tr = ii / span, r = ii % span;
    const int64_t row = row0 + ii;
    if (row >= a.rows) continue;
    float va = 0.f, vb = 0.f;
    for (int ks = 0; ks < a.KS; ++ks) {
      const float* p = red + ((ks * a.TR + tr) * BC + j) * 32;
      va += p[r];
      if constexpr (GU) vb += p[16 + r];
    }
    a.out[static_cast<int64_t>(orow[j]) * a.rows + row] = GU ? w[j] * swiglu(va, vb, a.limit) : va;
  }
}

// One block's slice of an expert (rows from row0, all of K) for one math type: each warp's
// partial sums of its rows go to red[(ks * TR + tr) * 32 + i] (gate/up: i < 16 w1, 16 + i w3;
// down: the span's 32 rows). wa/wb: the two matrices (down: wa twice), already at expert e.
template <class M, bool GU>
__device__ __forceinline__ void fast_body(const FastArgs& a, const uint8_t* wa, const uint8_t* wb, const uint8_t* sa,
                                          const uint8_t* sb, int64_t e_row0, const float* xrow, int64_t row0,
                                          uint8_t* smem, float* red) {
  constexpr WType T = M::kType;
  using Tr = WTraits<T>;
  constexpr int E = Tr::E, NS = 4;
  const int64_t K = a.K, C = K / E, G = (C + 3) / 4, rb = row_bytes<T>(K);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int tr = warp % a.TR, ks = warp / a.TR;
  const int64_t span0 = row0 + static_cast<int64_t>(tr) * (GU ? 16 : 32);
  const int64_t gpw = (G + a.KS - 1) / a.KS, J0 = ks * gpw, J1 = min64(G, J0 + gpw);
  // Stream s = 2 * f + h: matrix f (gate/up: w1, w3; down: the span's second 16 rows), row g + 8h.
  const uint8_t* base[NS];
  int64_t grow[NS];
  HS_UNROLL for (int s = 0; s < NS; ++s) {
    const int f = s >> 1, h = s & 1;
    const int64_t r = min64(span0 + (GU ? 0 : 16 * f) + g + 8 * h, a.rows - 1);
    grow[s] = e_row0 + r;
    base[s] = (GU && f ? wb : wa) + grow[s] * rb + c * 16;
  }
  const ScaleRef sref[2] = {{sa, K}, {GU ? sb : sa, K}};
  auto load = [&](int64_t J, uint4(&raw)[NS], uint32_t(&sc)[NS]) {
    const int64_t ch = 4 * J + c;
    const bool ok = ch < C;
    HS_UNROLL for (int s = 0; s < NS; ++s) {
      raw[s] = ok ? ld_stream16(base[s] + J * 64) : make_uint4(0, 0, 0, 0);
      if constexpr (M::kMma) sc[s] = ok ? __ldg((GU && (s >> 1) ? sb : sa) + grow[s] * (K / 32) + ch) : 0u;
      else sc[s] = __float_as_uint(!ok ? 0.f : Tr::kScaled ? sref[GU ? s >> 1 : 0].get(T, grow[s], ch) : 1.0f);
    }
  };
  // f32: acc[s] per stream; MMA: acc[4 f + i] = C fragment i of matrix f.
  float acc[8] = {};
  auto compute = [&](int64_t J, const uint4(&raw)[NS], const uint32_t(&sc)[NS]) {
    if constexpr (M::kMma) {
      float cf[2][4] = {};
      const uint2* bs = reinterpret_cast<const uint2*>(smem) + J * 96 + g * 4 + c;
      __nv_bfloat162 s2[NS];
      HS_UNROLL for (int s = 0; s < NS; ++s) s2[s] = e8m0_half_bf16x2(sc[s]);
      HS_UNROLL for (int w = 0; w < 4; ++w) {
        uint32_t o[NS][4];
        HS_UNROLL for (int s = 0; s < NS; ++s) fp4_word_bf16(word_of(raw[s], w), s2[s], o[s]);
        HS_UNROLL for (int mm = 0; mm < 2; ++mm) {
          const uint2 b = g < 3 ? bs[(2 * w + mm) * 12] : make_uint2(0, 0);
          HS_UNROLL for (int f = 0; f < 2; ++f)
            mma_bf16(cf[f], o[2 * f][2 * mm], o[2 * f + 1][2 * mm], o[2 * f][2 * mm + 1], o[2 * f + 1][2 * mm + 1],
                     b.x, b.y);
        }
      }
      HS_UNROLL for (int i = 0; i < 8; ++i) acc[i] += cf[i >> 2][i & 3];
    } else if (4 * J + c < C) {
      float part[NS];
      dot_chunk<T, NS>(raw, reinterpret_cast<const float4*>(smem), 4 * J + c, part);
      HS_UNROLL for (int s = 0; s < NS; ++s)
        acc[s] = Tr::kScaled ? fmaf(part[s], __uint_as_float(sc[s]), acc[s]) : acc[s] + part[s];
    }
  };
  // Two groups in flight: A holds J, B holds J + 1; each is refilled right after its use.
  uint4 ra[NS], rbuf[NS];
  uint32_t sca[NS], scb[NS];
  if (J0 < J1) load(J0, ra, sca);
  if (J0 + 1 < J1) load(J0 + 1, rbuf, scb);
  // The input row goes to shared memory while the first groups are in flight.
  if constexpr (M::kMma) stage_terms(reinterpret_cast<uint2*>(smem), xrow, K);
  else stage_x<E / 4>(reinterpret_cast<float4*>(smem), xrow, K / 4);
  __syncthreads();
  for (int64_t J = J0; J < J1; J += 2) {
    compute(J, ra, sca);
    if (J + 2 < J1) load(J + 2, ra, sca);
    if (J + 1 < J1) {
      compute(J + 1, rbuf, scb);
      if (J + 3 < J1) load(J + 3, rbuf, scb);
    }
  }
  // Rows of the quad: f32 sums the four lanes' chunks; MMA adds the term columns (t0 + t1 in
  // lane c = 0, t2 in lane c = 1; column 3 is zero).
  float* wred = red + (ks * a.TR + tr) * 32;
  HS_UNROLL for (int s = 0; s < NS; ++s) {
    const int f = s >> 1, h = s & 1;
    float v;
    if constexpr (M::kMma) {
      v = acc[4 * f + 2 * h] + acc[4 * f + 2 * h + 1];
      v += __shfl_xor_sync(kFullMask, v, 1);
    } else {
      v = acc[s];
      v += __shfl_xor_sync(kFullMask, v, 1);
      v += __shfl_xor_sync(kFullMask, v, 2);
    }
    if (c == 0) wred[16 * f + g + 8 * h] = v;
  }
}

// Slot y of a launch: the first a.nsh are the shared expert's (token y), the rest routed slots
// a.q0 + y - a.nsh (gate/up: token q / k, rank among its slots; down: segment q).
struct FastSlot {
  bool sh;
  int q, t;
};
template <bool GU>
__device__ __forceinline__ FastSlot fast_slot(const FastArgs& a) {
  const int y = static_cast<int>(blockIdx.y);
  const bool sh = y < a.nsh;
  const int q = sh ? a.nk + y : a.q0 + y - a.nsh;
  return {sh, q, sh ? y : GU ? q / a.k : q};
}

// The shared expert's rows of this block (Q8_0 planes, K bytes a row: weights, never written
// during a step) towards L2; for the time before pdl_wait (the routed slots' experts are only
// known after it).
__device__ __forceinline__ void prefetch_shared_rows(const FastArgs& a, const FastSlot& s, int span, bool gate_up) {
  if (!s.sh) return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * span, n = min64(a.rows - row0, int64_t{a.TR} * span);
  pdl_prefetch_l2(a.wa[1] + row0 * a.K, static_cast<size_t>(n * a.K));
  if (gate_up) pdl_prefetch_l2(a.wb[1] + row0 * a.K, static_cast<size_t>(n * a.K));
}

// Thread 0: the slot's expert, rank and routing weight (the shared expert: 0, 0, 1); gate/up
// also lists the token's experts in ascending order.
template <bool GU>
__device__ __forceinline__ void fast_slot_meta(const FastArgs& a, const FastSlot& s, int* s_e, int* s_rank,
                                               float* s_w) {
  int e = 0, rank = 0;
  float w = 1.0f;
  if (!s.sh) {
    e = clamp_e(a.idx[s.q], a.E);
    if (GU) {
      rank = slot_rank(a.idx + static_cast<int64_t>(s.t) * a.k, a.k, s.q % a.k, a.E);
      w = a.weight[s.q];
      if (blockIdx.x == 0 && a.idx_sorted) a.idx_sorted[s.t * a.k + rank] = e;
    }
  }
  *s_e = e, *s_rank = rank, *s_w = w;
}

// After a barrier: the K-split partials of each row (red, fast_body's layout) in split order,
// then gate/up's h = w * swiglu_clamp(g, u) by rank (the shared expert's at a.nk + t) or down's
// segment row.
template <bool GU>
__device__ __forceinline__ void fast_epilogue(const FastArgs& a, const float* red, int64_t row0, const FastSlot& s,
                                              int rank, float w) {
  constexpr int span = GU ? 16 : 32;
  for (int i = threadIdx.x; i < a.TR * span; i += blockDim.x) {
    const int64_t row = row0 + i;
    if (row >= a.rows) break;
    const int tr = i / span, r = i % span;
    float va = 0.f, vb = 0.f;
    for (int ks = 0; ks < a.KS; ++ks) {
      const float* p = red + (ks * a.TR + tr) * 32;
      va += p[r];
      if constexpr (GU) vb += p[16 + r];
    }
    if constexpr (GU) {
      const int64_t orow = s.sh ? s.q : static_cast<int64_t>(s.t) * a.k + rank;
      a.out[orow * a.rows + row] = w * swiglu(va, vb, a.limit);
    } else {
      a.out[static_cast<int64_t>(s.q) * a.rows + row] = va;
    }
  }
}

// grid (row blocks, slots: fast_slot). MA: the routed math, MB: the shared expert's.
template <class MA, class MB, bool GU>
__global__ void __launch_bounds__(kThreads, 2) fast_kernel(FastArgs a) {
  pdl_enter();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float red[kWarps * 32];
  __shared__ int s_rank, s_e;
  __shared__ float s_w;
  const FastSlot sl = fast_slot<GU>(a);
  if (threadIdx.x == 0) fast_slot_meta<GU>(a, sl, &s_e, &s_rank, &s_w);
  __syncthreads();
  constexpr int span = GU ? 16 : 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * span;
  const float* xrow = a.x + static_cast<int64_t>(GU ? sl.t : sl.q) * a.K;
  const int64_t e_row0 = static_cast<int64_t>(s_e) * a.rows;
  if constexpr (std::is_same_v<MA, MB>) {
    const int i = sl.sh ? 1 : 0;
    fast_body<MA, GU>(a, a.wa[i], a.wb[i], a.sa[i], a.sb[i], e_row0, xrow, row0, smem, red);
  } else if (sl.sh) {
    fast_body<MB, GU>(a, a.wa[1], a.wb[1], a.sa[1], a.sb[1], e_row0, xrow, row0, smem, red);
  } else {
    fast_body<MA, GU>(a, a.wa[0], a.wb[0], a.sa[0], a.sb[0], e_row0, xrow, row0, smem, red);
  }
  __syncthreads();
  fast_epilogue<GU>(a, red, row0, sl, s_rank, s_w);
}

// y[t, :] = the token's k routed segments d[t*k + r] in rank order (ascending expert id), then
// its shared segment d[nk + t]. model: each segment rounded to bf16 before it is added, and the
// sum after the shared segment.
__global__ void __launch_bounds__(kThreads) fast_combine_kernel(const float* d, int k, int64_t nk, int64_t D,
                                                                bool shared, bool model, float* y) {
  pdl_enter();
  const int64_t t = blockIdx.y;
  auto rnd = [&](float4 v) {
    return model ? make_float4(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w)) : v;
  };
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < D / 4;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < k; ++r) {
      const float4 v = rnd(reinterpret_cast<const float4*>(d + (t * k + r) * D)[c]);
      s = make_float4(s.x + v.x, s.y + v.y, s.z + v.z, s.w + v.w);
    }
    if (shared) {
      const float4 v = rnd(reinterpret_cast<const float4*>(d + (nk + t) * D)[c]);
      s = rnd(make_float4(s.x + v.x, s.y + v.y, s.z + v.z, s.w + v.w));
    }
    reinterpret_cast<float4*>(y + t * D)[c] = s;
  }
}

// ---- Host side

template <class S> struct FTag { using type = S; };

bool fast_native(WType t) { return t != WType::GGML_BLOCK; }

// f(FTag<FMath<t, MMA>>{}): MXFP4 on tensor cores, every other native type in f32.
template <class F>
void with_fmath(WType t, F&& f) {
  switch (t) {
    case WType::F32: return f(FTag<FMath<WType::F32, false>>{});
    case WType::F16: return f(FTag<FMath<WType::F16, false>>{});
    case WType::BF16: return f(FTag<FMath<WType::BF16, false>>{});
    case WType::Q8_0: return f(FTag<FMath<WType::Q8_0, false>>{});
    case WType::FP8_B128: return f(FTag<FMath<WType::FP8_B128, false>>{});
    case WType::MXFP4: return f(FTag<FMath<WType::MXFP4, true>>{});
    default: break;
  }
  fail("moe_experts: no fast decode for ", wtype_name(t));
}

size_t fast_smem(WType t, int64_t K) {
  size_t s = 0;
  with_fmath(t, [&](auto tag) { s = decltype(tag)::type::smem(K); });
  return s;
}

// One launch over nsh shared slots (first) and nr routed slots from q0.
template <class MA, class MB, bool GU>
void fast_launch(DeviceContext& ctx, FastArgs a, int nr, int nsh) {
  if (nr + nsh == 0) return;
  const int64_t G = (a.K / MA::E + 3) / 4, want = GU ? 8 : 4;  // K groups per warp to aim for
  a.KS = 1;
  while (a.KS < kWarps && G / (2 * a.KS) >= want) a.KS *= 2;
  a.TR = kWarps / a.KS;
  a.nsh = nsh;
  const int64_t span = (GU ? 16 : 32) * a.TR;
  const size_t smem = std::max(MA::smem(a.K), nsh ? MB::smem(a.K) : size_t{0});
  const void* kern = reinterpret_cast<const void*>(fast_kernel<MA, MB, GU>);
  ctx.ensure_dynamic_smem(kern, smem);
  const dim3 grid(static_cast<unsigned>((a.rows + span - 1) / span), static_cast<unsigned>(nr + nsh));
  void* args[] = {&a};
  launch(ctx, kern, grid, dim3(kThreads), smem, args);
}

// The routed slots (type ta) and nsh shared ones (type tb): one launch when the types are the
// same or the Flash mix (MXFP4 routed, Q8_0 shared), else one launch each.
template <bool GU>
void fast_pair(DeviceContext& ctx, const FastArgs& a, WType ta, WType tb, int nr, int nsh) {
  const bool mixed = nsh && ta == WType::MXFP4 && tb == WType::Q8_0;
  if (nsh == 0 || ta == tb || mixed) {
    with_fmath(ta, [&](auto tag) {
      using MA = typename decltype(tag)::type;
      if constexpr (MA::kType == WType::MXFP4) {
        if (mixed) return fast_launch<MA, FMath<WType::Q8_0, false>, GU>(ctx, a, nr, nsh);
      }
      fast_launch<MA, MA, GU>(ctx, a, nr, nsh);
    });
    return;
  }
  with_fmath(ta, [&](auto tag) {
    using MA = typename decltype(tag)::type;
    fast_launch<MA, MA, GU>(ctx, a, nr, 0);
  });
  with_fmath(tb, [&](auto tag) {
    using MB = typename decltype(tag)::type;
    fast_launch<MB, MB, GU>(ctx, a, 0, nsh);
  });
}

}  // namespace
}  // namespace hs::cuda
