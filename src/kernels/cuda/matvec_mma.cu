// Decode matvec (1..32 columns) on tensor cores for Q8_0, FP8_B128, F16 and BF16 weights: mma.sync
// m16n8k16 with bf16 operands and f32 accumulation, as exact as the f32 streaming kernel of
// matvec.cu.
//
// Why: at n = 8 the f32 kernel spends ~9 instructions per weight (a decode and 8 FMAs) and is
// issue-bound at 3-5x the weight streaming time (docs/performance.md, "Dense decode matvec on
// tensor cores"); on mma.sync the columns cost nothing extra.
//
// Exactness. The weights enter as exact bf16 terms: Q8_0 codes are bf16 values (8 significant
// bits), so are FP8 e4m3 values (4), BF16 is itself, an F16 value w is hi + lo with hi = bf16(w) and lo = w - hi (at most 3
// significant bits left: exact too). A Q8_0 32-element block's product is summed in f32 by the
// mma and then scaled by the block's f16 scale in f32, as the f32 kernel scales its per-chunk
// sums (FP8_B128: by its e8m0 block scale). x enters as bf16 terms x = t0 + t1 + t2 (24 significant bits, mma_bf16.cuh). Model
// numerics' inputs are bf16 values already (FP8-quantised or BF16-rounded): when every x of a
// block has zero low 16 bits, t1 = t2 = 0 and their mma steps are skipped (they would add exact
// zeros, so the result is the same either way).
//
// Layout. A warp owns a tile of 16 rows (the mma's M) over one of KS K-ranges; a block is
// 8 / KS tiles x KS ranges. Lane (g, c) = (lane / 4, lane % 4) holds elements 8c..8c+7 of each
// 32-element block of rows g and g + 8 (the quad covers the block, so every mma k-step stays
// inside one Q8_0 scale block), and the same 8 elements of column g's x (mma N = 8 columns; up
// to four such column tiles share each block's A fragments).
// mma k-step s of a block takes elements 8c + 4s + {0,1} as k = 2c, 2c+1 and 8c + 4s + {2,3}
// as k = 2c+8, 2c+9, for A and B alike (a permutation of K, which leaves the product as is).
// The KS partial sums are added through shared memory in a fixed order: results are
// reproducible run to run.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/weights.cuh"

namespace hs::cuda::detail {

namespace {

constexpr int kQmThreads = 256;
constexpr int kQmWarps = kQmThreads / 32;

struct QmArgs {
  const uint8_t* w;   // weights [rows, cols]
  const uint8_t* s;   // Q8_0: f16 scale bits [rows, cols / 32]; FP8_B128: e8m0 per 128 x 128
  const float* x;
  float* y;
  int64_t rows, cols, ldx, ldy, x_group;  // rows per group; x offset between groups (floats)
  int ncols, ks;                          // columns (1..kMatvecMmaMaxCols); K-ranges per tile
};

__device__ __forceinline__ uint32_t bits_of(const __nv_bfloat162& v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}

// The A fragments of one 32-element block, per bf16 term of the weights and mma k-step s:
// a[t][s] = {row lo (k 2c, 2c+1), row hi (same), row lo (k 2c+8, 2c+9), row hi (same)}.
template <int TA>
struct AFrags {
  uint32_t r[TA][2][4];
};

// Bytes (i, j) of q (signed codes) -> bf16x2, exactly: sel puts them into the low bytes of two
// bf16 words whose high byte is 0x43; the low 7 bits are then a mantissa at 2^7 (128 + m), and
// 128 is subtracted, or 256 where the byte's sign bit (the exponent's low bit) is set.
__device__ __forceinline__ uint32_t s8x2_bf16(uint32_t q, uint32_t sel) {
  const uint32_t t = __byte_perm(q, 0x43434343u, sel);
  const uint32_t v = t & 0xFF7FFF7Fu, b = (t & 0x00800080u) | 0x43004300u;
  __nv_bfloat162 hv, hb;
  memcpy(&hv, &v, 4);
  memcpy(&hb, &b, 4);
  return bits_of(__hsub2(hv, hb));
}

// f16x2 -> its bf16 terms hi = bf16(w), lo = w - hi (both exact).
__device__ __forceinline__ void f16x2_bf16(uint32_t w, uint32_t& hi, uint32_t& lo) {
  __half2 h;
  memcpy(&h, &w, 4);
  const float2 f = __half22float2(h);
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  const float2 bf = __bfloat1622float2(b);
  hi = bits_of(b);
  lo = bits_of(__floats2bfloat162_rn(f.x - bf.x, f.y - bf.y));
}

// FP8 e4m3 values are bf16 values (4 significant bits), converted through f16.
__device__ __forceinline__ uint32_t e4m3x2_bf16(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two & 0xffffu), __NV_E4M3);
  const float2 f = __half22float2(__half2(h));
  return bits_of(__floats2bfloat162_rn(f.x, f.y));
}

// Per weight type: a lane's bytes of one row per block (Raw: elements 8c..8c+7), the bf16 terms
// of its element pair p of k-step s (elements 8c + 4s + 2p, +1: pair(r, s, p, t)); the scaled
// types' block scales come from ScaleRef (weights.cuh).
template <WType T>
struct MmaW;

template <>
struct MmaW<WType::Q8_0> {
  using Raw = uint2;  // one byte per element
  static constexpr int kTerms = 1, kElemBytes = 1;
  static constexpr bool kScaled = true;
  __device__ static Raw load(const uint8_t* p) { return ld_stream8(p); }
  __device__ static void pair(const Raw& r, int s, int p, uint32_t (&t)[1]) {
    t[0] = s8x2_bf16(s ? r.y : r.x, p ? 0x4342u : 0x4140u);
  }
};

// FP8 e4m3 with one e8m0 scale per 128 x 128 block (the official checkpoints' form).
template <>
struct MmaW<WType::FP8_B128> {
  using Raw = uint2;
  static constexpr int kTerms = 1, kElemBytes = 1;
  static constexpr bool kScaled = true;
  __device__ static Raw load(const uint8_t* p) { return ld_stream8(p); }
  __device__ static void pair(const Raw& r, int s, int p, uint32_t (&t)[1]) {
    t[0] = e4m3x2_bf16((s ? r.y : r.x) >> (16 * p));
  }
};

template <>
struct MmaW<WType::BF16> {
  using Raw = uint4;  // word i = elements 2i, 2i+1
  static constexpr int kTerms = 1, kElemBytes = 2;
  static constexpr bool kScaled = false;
  __device__ static Raw load(const uint8_t* p) { return ld_stream16(p); }
  __device__ static void pair(const Raw& r, int s, int p, uint32_t (&t)[1]) { t[0] = word_of(r, 2 * s + p); }
};

template <>
struct MmaW<WType::F16> {
  using Raw = uint4;
  static constexpr int kTerms = 2, kElemBytes = 2;
  static constexpr bool kScaled = false;
  __device__ static Raw load(const uint8_t* p) { return ld_stream16(p); }
  __device__ static void pair(const Raw& r, int s, int p, uint32_t (&t)[2]) {
    f16x2_bf16(word_of(r, 2 * s + p), t[0], t[1]);
  }
};

// The A fragments of a block from rows lo and hi: a[t][s] = {lo pair 0, hi pair 0, lo pair 1,
// hi pair 1} (pair 0 at k = 2c, 2c+1; pair 1 at k = 2c+8, 2c+9).
template <WType T>
__device__ __forceinline__ void a_frags(const typename MmaW<T>::Raw& lo, const typename MmaW<T>::Raw& hi,
                                        AFrags<MmaW<T>::kTerms>& a) {
  using W = MmaW<T>;
#pragma unroll
  for (int s = 0; s < 2; ++s)
#pragma unroll
    for (int p = 0; p < 2; ++p) {
      uint32_t tl[W::kTerms], th[W::kTerms];
      W::pair(lo, s, p, tl);
      W::pair(hi, s, p, th);
#pragma unroll
      for (int t = 0; t < W::kTerms; ++t) {
        a.r[t][s][2 * p] = tl[t];
        a.r[t][s][2 * p + 1] = th[t];
      }
    }
}

// A lane's part of one 32-element block: the weights of rows lo and hi, their block scales.
template <WType T>
struct QmBlock {
  typename MmaW<T>::Raw ql, qh;
  float dl, dh;
};

// The products of one block with one column tile: x elements 8c..8c+7 of column g (of the
// tile) in xa (0..3) and xb (4..7); adds the (scaled) block sums into acc.
template <WType T>
__device__ __forceinline__ void mma_tile(const QmBlock<T>& k, const AFrags<MmaW<T>::kTerms>& a, float4 xa, float4 xb,
                                         float (&acc)[4]) {
  using W = MmaW<T>;
  const uint32_t u[8] = {__float_as_uint(xa.x), __float_as_uint(xa.y), __float_as_uint(xa.z), __float_as_uint(xa.w),
                         __float_as_uint(xb.x), __float_as_uint(xb.y), __float_as_uint(xb.z), __float_as_uint(xb.w)};
  const uint32_t low = (u[0] | u[1] | u[2] | u[3] | u[4] | u[5] | u[6] | u[7]) & 0xFFFFu;
  // Each block's sums start from zero and are added to acc in f32 (round to nearest): the mma's
  // own accumulation is not correctly rounded, which over a whole row cost F16 up to 9e-6.
  float f[4] = {0.f, 0.f, 0.f, 0.f};
  auto steps = [&](const uint2 (&b)[2]) {  // b[s]: the B fragment of k-step s
#pragma unroll
    for (int t = 0; t < W::kTerms; ++t)
#pragma unroll
      for (int s = 0; s < 2; ++s) mma_bf16(f, a.r[t][s][0], a.r[t][s][1], a.r[t][s][2], a.r[t][s][3], b[s].x, b[s].y);
  };
  if (__all_sync(kFullMask, low == 0u)) {  // x is bf16 already: one term (the high halves)
    const uint2 b[2] = {make_uint2(__byte_perm(u[0], u[1], 0x7632u), __byte_perm(u[2], u[3], 0x7632u)),
                        make_uint2(__byte_perm(u[4], u[5], 0x7632u), __byte_perm(u[6], u[7], 0x7632u))};
    steps(b);
  } else {
    float va[4] = {xa.x, xa.y, xa.z, xa.w}, vb[4] = {xb.x, xb.y, xb.z, xb.w};
    uint2 ta[3], tb[3];
    bf16_terms(va, ta);
    bf16_terms(vb, tb);
#pragma unroll
    for (int t = 0; t < 3; ++t) {
      const uint2 b[2] = {ta[t], tb[t]};
      steps(b);
    }
  }
  if constexpr (W::kScaled) {
    acc[0] = fmaf(f[0], k.dl, acc[0]);
    acc[1] = fmaf(f[1], k.dl, acc[1]);
    acc[2] = fmaf(f[2], k.dh, acc[2]);
    acc[3] = fmaf(f[3], k.dh, acc[3]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i] += f[i];
  }
}

// NT column tiles of 8 (columns g, g + 8, ... of lane (g, c)): up to 8 * NT columns per launch.
template <WType T, int NT>
__global__ void __launch_bounds__(kQmThreads) mma_matvec_kernel(QmArgs a) {
  using W = MmaW<T>;
  // Blocks per group of loads: 32 bytes of each row and lane, fewer when x takes more registers.
  constexpr int kPer = 32 / static_cast<int>(sizeof(typename W::Raw)) / NT;
  constexpr int kUnroll = kPer > 1 ? kPer : 1;
  __shared__ float red[kQmWarps][NT * 4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int KS = a.ks, TR = kQmWarps / KS, tr = warp / KS, ks = warp % KS;
  const int g = lane >> 2, c = lane & 3;
  const int64_t group = blockIdx.y, row_base = group * a.rows;
  const int64_t tile_row0 = (static_cast<int64_t>(blockIdx.x) * TR + tr) * 16;
  const int64_t nb = a.cols / 32, per = (nb + KS - 1) / KS;
  const int64_t b0 = min64(nb, ks * per), b1 = min64(nb, b0 + per);
  // Rows past the end are computed (clamped), not stored.
  const int64_t rlo = row_base + min64(tile_row0 + g, a.rows - 1), rhi = row_base + min64(tile_row0 + g + 8, a.rows - 1);
  constexpr int64_t eb = W::kElemBytes;
  const uint8_t* wlo = a.w + (rlo * a.cols + 8 * c) * eb;
  const uint8_t* whi = a.w + (rhi * a.cols + 8 * c) * eb;
  const float* xg = a.x + group * a.x_group + g * a.ldx + 8 * c;
  {  // PDL: before the wait only this block's rows of weights (never written by a step) are read.
    const int64_t first = static_cast<int64_t>(blockIdx.x) * TR * 16;
    const int64_t n = min64(a.rows - first, static_cast<int64_t>(TR) * 16);
    pdl_prefetch_l2(a.w + (row_base + first) * a.cols * eb, static_cast<size_t>(n * a.cols * eb));
  }
  pdl_enter();
  const ScaleRef sref{a.s, a.cols};  // 16-element chunk 2b holds block b's scale
  // Columns past n read nothing and multiply zeros.
  auto xload = [&](int nt, int64_t b, int h) {
    return g + 8 * nt < a.ncols ? __ldg(reinterpret_cast<const float4*>(xg + 8 * nt * a.ldx + b * 32 + 4 * h))
                                : make_float4(0.f, 0.f, 0.f, 0.f);
  };
  auto wload = [&](int64_t b) {
    QmBlock<T> k{};
    if (b < b1) {
      k.ql = W::load(wlo + b * 32 * eb);
      k.qh = W::load(whi + b * 32 * eb);
      if constexpr (W::kScaled) {
        k.dl = sref.get(T, rlo, 2 * b);
        k.dh = sref.get(T, rhi, 2 * b);
      }
    }
    return k;
  };
  float acc[NT][4] = {};
  // A group's weights, scales and x are all requested before its first multiply.
  auto group_of = [&](auto unroll, int64_t b) {
    constexpr int U = decltype(unroll)::value;
    QmBlock<T> k[U];
    float4 xa[U][NT], xb[U][NT];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      k[u] = wload(b + u);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        xa[u][nt] = xload(nt, b + u, 0);
        xb[u][nt] = xload(nt, b + u, 1);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      AFrags<W::kTerms> af;
      a_frags<T>(k[u].ql, k[u].qh, af);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) mma_tile<T>(k[u], af, xa[u][nt], xb[u][nt], acc[nt]);
    }
  };
  int64_t b = b0;
  for (; b + kUnroll <= b1; b += kUnroll) group_of(std::integral_constant<int, kUnroll>{}, b);
  for (; b < b1; ++b) group_of(std::integral_constant<int, 1>{}, b);

#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) red[warp][nt * 4 + r][lane] = acc[nt][r];
  __syncthreads();
  // Output (tile t, column j, row r): lane (r % 8) * 4 + (j % 8) / 2, register
  // (j / 8) * 4 + (r / 8) * 2 + j % 2.
  float* y = a.y + row_base;
  constexpr int kCols = 8 * NT;
  for (int i = threadIdx.x; i < TR * 16 * kCols; i += kQmThreads) {
    const int t = i / (16 * kCols), j = (i / 16) % kCols, r = i & 15;
    const int64_t row = (static_cast<int64_t>(blockIdx.x) * TR + t) * 16 + r;
    if (j >= a.ncols || row >= a.rows) continue;
    const int ln = (r & 7) * 4 + ((j & 7) >> 1), reg = (j >> 3) * 4 + (r >> 3) * 2 + (j & 1);
    float v = 0.f;
    for (int k = 0; k < KS; ++k) v += red[t * KS + k][reg][ln];
    y[j * a.ldy + row] = v;
  }
}

template <WType T>
void launch_mma(DeviceContext& ctx, dim3 grid, const QmArgs& a) {
  if (a.ncols <= 8) launch(ctx, mma_matvec_kernel<T, 1>, grid, kQmThreads, 0, a);
  else if (a.ncols <= 16) launch(ctx, mma_matvec_kernel<T, 2>, grid, kQmThreads, 0, a);
  else launch(ctx, mma_matvec_kernel<T, 4>, grid, kQmThreads, 0, a);
}

}  // namespace

bool mma_matvec_supported(const WeightView& W) {
  const bool type = W.type == WType::Q8_0 || W.type == WType::FP8_B128 || W.type == WType::F16 || W.type == WType::BF16;
  return type && W.cols % 32 == 0;
}

// Where it measured faster on an H200 (bench_matvec_cuda --cols; docs/performance-kernels.md,
// "Decode matvec on tensor cores"): from 3 columns (1-byte types) or 5 (2-byte types) against
// the f32 kernel, whose cost grows with the columns; past 8 against the tiled GEMM only on
// matrices big enough that reading the weights once dominates.
bool mma_matvec_default(const WeightView& W, int64_t n) {
  if (!mma_matvec_supported(W) || n < 2 || n > kMatvecMmaMaxCols) return false;
  const bool two_byte = W.type == WType::F16 || W.type == WType::BF16;
  const int64_t bytes = W.data_bytes(), mib = int64_t{1} << 20;
  if (n <= kMatvecMaxCols) return n >= (two_byte ? 5 : 3);
  if (n <= 16) return bytes >= (two_byte ? 16 : 4) * mib;
  return !two_byte && bytes >= 16 * mib;
}

void mma_matvec(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy,
                int groups, int64_t rows_per_group, int64_t x_group) {
  HS_CHECK(mma_matvec_supported(W), "internal: no tensor-core matvec for ", wtype_name(W.type), " weights of width ",
           W.cols, " (Q8_0, FP8_B128, F16 or BF16, whole 32-element blocks)");
  HS_CHECK(n >= 1 && n <= kMatvecMmaMaxCols, "internal: the tensor-core matvec takes 1..", kMatvecMmaMaxCols,
           " columns, got ", n);
  HS_CHECK(ldx % 4 == 0 && x_group % 4 == 0, "internal: the tensor-core matvec needs 16-byte aligned x rows (ldx ",
           ldx, ")");
  if (rows_per_group <= 0) return;
  // K-ranges per tile: as many as leave each warp >= 8 blocks, two groups of loads (more warps
  // in flight on wide rows, whole rows per warp on narrow ones).
  const int64_t nb = W.cols / 32;
  int ks = kQmWarps;
  while (ks > 1 && nb < 8LL * ks) ks /= 2;
  const QmArgs a{static_cast<const uint8_t*>(W.data), static_cast<const uint8_t*>(W.scales), x, y, rows_per_group,
                 W.cols, ldx, ldy, x_group, static_cast<int>(n), ks};
  const int64_t tiles = (rows_per_group + 15) / 16, per_block = kQmWarps / ks;
  const int64_t gx = (tiles + per_block - 1) / per_block;
  HS_CHECK(gx <= 0x7fffffff && groups <= 65535, "internal: tensor-core matvec grid too large");
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(groups));
  switch (W.type) {
    case WType::Q8_0: launch_mma<WType::Q8_0>(ctx, grid, a); break;
    case WType::FP8_B128: launch_mma<WType::FP8_B128>(ctx, grid, a); break;
    case WType::F16: launch_mma<WType::F16>(ctx, grid, a); break;
    default: launch_mma<WType::BF16>(ctx, grid, a); break;
  }
  HS_CUDA_CHECK_LAUNCH();
}

}  // namespace hs::cuda::detail
