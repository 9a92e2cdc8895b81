// Matrix-vector and matrix-matrix products against weights of every supported storage type.
//
// n == 1 on small matrices and the FP8 LM head (mv1_ok): rowstream.cuh. A warp owns one
// 1024-element K-slice of the input in registers and walks RB rows of its block; a block is G
// row groups x (slices) warps, and the slices of a row are summed in shared memory in order. RB
// is picked so that the grid has enough warps to keep ~16 per SM busy (small matrices: one step
// of rows per warp).
//
// n <= 8 (decode): weight streaming. A block of 8 warps keeps x (all n columns, f32) in shared
// memory and walks row groups (persistent grid). Each warp owns R rows and one of S K-splits:
// every lane loads one 16-byte chunk of each of its R rows per step (coalesced, L1 bypassed),
// decodes it in registers and multiplies it with the matching x values from shared memory
// (swizzled so the float4 reads are conflict-free). Per-lane sums are reduced across the warp
// with shuffles and across the S splits in shared memory, in a fixed order: results are
// reproducible run to run.
//
// Q8_0, FP8_B128, F16 and BF16 at 3 or 5 <= n <= 32: the same product on tensor cores
// (matvec_mma.cu; where it measured faster, mma_matvec_default), x read in place.
//
// n > 8 (prefill): tiles of W are dequantized to bf16 (or f32) in the scratch arena and
// multiplied with cuBLAS.
//
// GGML_BLOCK weights (GGUF blocks as stored) take the generic kernels of matvec_ggml.cu for
// both the streaming matvec and the tile dequantisation.
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/rowstream.cuh"
#include "kernels/cuda/weights.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kMvThreads = 256;
constexpr int kMvWarps = kMvThreads / 32;

struct MvArgs {
  const uint8_t* w;
  const uint8_t* s;
  const float* x;
  float* y;
  int64_t rows;        // rows per group
  int64_t cols;
  int64_t ldx, ldy;
  int64_t x_group;     // x offset between groups (floats)
  int64_t n_row_groups;
  int ncols;           // valid columns (<= NC)
  int splits;          // S: warps per row group sharing one row set
};

// x . (one 16-byte chunk c of each of R rows) accumulated into part[R][NC] (unscaled).
template <WType T, int R, int NC>
__device__ __forceinline__ void mv_chunk(const uint4 (&raw)[R], const float4* xs4, int64_t g4, int64_t c,
                                         float (&part)[R][NC]) {
  using Tr = WTraits<T>;
  constexpr int Q = Tr::E / 4;  // float4 groups of x per chunk
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int j = 0; j < NC; ++j) part[r][j] = 0.f;
  if constexpr (T == WType::MXFP4) {
    // One word = 8 elements: x groups wd (low nibbles) and wd + 4 (high nibbles).
#pragma unroll
    for (int wd = 0; wd < 4; ++wd) {
      const int64_t ga = c * Q + wd, gb = ga + 4;
      const int64_t pa = ga ^ ((ga >> 3) & (Q - 1)), pb = gb ^ ((gb >> 3) & (Q - 1));
      float4 xa[NC], xb[NC];
#pragma unroll
      for (int j = 0; j < NC; ++j) {
        xa[j] = xs4[j * g4 + pa];
        xb[j] = xs4[j * g4 + pb];
      }
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float lo[4], hi[4];
        Tr::word(word_of(raw[r], wd), lo, hi);
#pragma unroll
        for (int j = 0; j < NC; ++j) part[r][j] = fma4(hi, xb[j], fma4(lo, xa[j], part[r][j]));
      }
    }
  } else {
#pragma unroll
    for (int p = 0; p < Q; ++p) {
      const int64_t gi = c * Q + p;
      const int64_t phys = gi ^ ((gi >> 3) & (Q - 1));
      float4 xv[NC];
#pragma unroll
      for (int j = 0; j < NC; ++j) xv[j] = xs4[j * g4 + phys];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float w[4];
        Tr::part(raw[r], p, w);
#pragma unroll
        for (int j = 0; j < NC; ++j) part[r][j] = fma4(w, xv[j], part[r][j]);
      }
    }
  }
}

template <WType T, int R, int NC>
__global__ void __launch_bounds__(kMvThreads) matvec_kernel(MvArgs a) {
  using Tr = WTraits<T>;
  constexpr int E = Tr::E;
  constexpr int Q = E / 4;
  extern __shared__ float4 xs4[];
  __shared__ float red[2][kMvWarps][R * NC];

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int S = a.splits, G = kMvWarps / S;
  const int g = warp / S, s = warp % S;
  const int64_t group = blockIdx.y;
  const int64_t row_base = group * a.rows;  // global row of this group's row 0
  const float* x = a.x + group * a.x_group;
  float* y = a.y + group * a.rows;
  const int64_t C = a.cols / E;
  const int64_t rb = row_bytes<T>(a.cols);
  const int64_t c0 = static_cast<int64_t>(s) * 32 + lane, cstep = 32 * S;
  const ScaleRef sref{a.s, a.cols};

  // PDL: before the wait only this block's first weights (never written by a step) are read: they
  // start towards L2 while the previous kernel finishes and x is staged.
  if (blockIdx.x < a.n_row_groups) {
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * (G * R) + g * R;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const uint8_t* p = a.w + (row_base + min64(row0 + r, a.rows - 1)) * rb;
      for (int64_t c = c0, k = 0; c < C && k < 2; c += cstep, ++k) prefetch_l2(p + c * 16);
    }
  }

  pdl_enter();
  // x -> shared memory, float4 group G4 of column j stored at G4 ^ ((G4 >> 3) & (Q - 1)).
  const int64_t g4 = a.cols / 4;
  for (int64_t i = threadIdx.x; i < NC * g4; i += kMvThreads) {
    const int j = static_cast<int>(i / g4);
    const int64_t k = i - j * g4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (j < a.ncols) v = *reinterpret_cast<const float4*>(x + j * a.ldx + 4 * k);
    xs4[j * g4 + (k ^ ((k >> 3) & (Q - 1)))] = v;
  }
  __syncthreads();

  int buf = 0;
  for (int64_t rg = blockIdx.x; rg < a.n_row_groups; rg += gridDim.x) {
    const int64_t row0 = rg * (G * R) + g * R;
    float acc[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < NC; ++j) acc[r][j] = 0.f;
    const uint8_t* wrow[R];
    int64_t srow[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      srow[r] = row_base + min64(row0 + r, a.rows - 1);  // clamp: rows past the end are computed, not stored
      wrow[r] = a.w + srow[r] * rb;
    }

    // Unrolled twice: both iterations' loads are issued before the first multiply.
#pragma unroll 2
    for (int64_t c = c0; c < C; c += cstep) {
      uint4 raw[R];
      float sc[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        raw[r] = ld_stream16(wrow[r] + c * 16);
        sc[r] = Tr::kScaled ? sref.get(T, srow[r], c) : 1.0f;
      }
      float part[R][NC];
      mv_chunk<T, R, NC>(raw, xs4, g4, c, part);
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int j = 0; j < NC; ++j)
          acc[r][j] = Tr::kScaled ? fmaf(part[r][j], sc[r], acc[r][j]) : acc[r][j] + part[r][j];
    }

#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int j = 0; j < NC; ++j) {
        const float v = warp_sum(acc[r][j]);
        if (lane == 0) red[buf][warp][r * NC + j] = v;
      }
    __syncthreads();
    for (int i = threadIdx.x; i < G * R * NC; i += kMvThreads) {
      const int gg = i / (R * NC), rj = i % (R * NC);
      const int r = rj / NC, j = rj % NC;
      float v = 0.f;
      for (int k = 0; k < S; ++k) v += red[buf][gg * S + k][rj];
      const int64_t row = rg * (G * R) + gg * R + r;
      if (row < a.rows && j < a.ncols) y[j * a.ldy + row] = v;
    }
    buf ^= 1;  // the next group writes the other buffer; one barrier per group suffices
  }
}

template <WType T, int R, int NC>
void launch_matvec_r(DeviceContext& ctx, MvArgs a, int groups) {
  auto kern = matvec_kernel<T, R, NC>;
  const size_t smem = static_cast<size_t>(NC) * a.cols * sizeof(float);
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(kern), smem);
  const int64_t C = a.cols / WTraits<T>::E;
  int S = 1;
  while (S < kMvWarps && C >= 32LL * S * 4) S *= 2;  // >= 2 chunks per lane after the split
  a.splits = S;
  const int G = kMvWarps / S;
  a.n_row_groups = (a.rows + G * R - 1) / (G * R);
  const int bps = ctx.blocks_per_sm(reinterpret_cast<const void*>(kern), kMvThreads, smem);
  const int64_t per_group_blocks = std::max<int64_t>(1, static_cast<int64_t>(bps) * ctx.sm_count() / groups);
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>(a.n_row_groups, per_group_blocks));
  launch(ctx, kern, dim3(gx, static_cast<unsigned>(groups)), kMvThreads, smem, a);
}

// ---- n == 1: the input in registers (rowstream.cuh)

constexpr int kMv1MaxRows = 64;  // RB: rows per warp
constexpr int kMv1MaxWarps = 16;
constexpr int kMv1MaxMats = 8;

// One matrix of a launch: its blocks start at block `first` of the grid's x.
struct Mv1Mat {
  const uint8_t* w;
  const uint8_t* s;
  float* y;
  int64_t rows;  // rows per group
  unsigned first;
};

// One launch: `count` matrices of one type and width on the same input (count > 1: one group),
// or one matrix in groups (grid y; x offset x_group floats between groups).
struct Mv1Args {
  Mv1Mat m[kMv1MaxMats];
  int count;
  const float* x;
  int64_t cols, x_group;
  int nsl, G, rb;  // K-slices, row groups per block, rows per warp
};

template <WType T>
__global__ void __launch_bounds__(kMv1MaxWarps * 32) mv1_kernel(Mv1Args a) {
  using R = Rs<T>;
  constexpr int KR = R::kRows;
  __shared__ float red[kMv1MaxWarps][kMv1MaxRows];
  // This block's matrix (constant indices: the arguments stay in the parameter bank).
  Mv1Mat M = a.m[0];
#pragma unroll
  for (int i = 1; i < kMv1MaxMats; ++i)
    if (i < a.count && blockIdx.x >= a.m[i].first) M = a.m[i];
  const int64_t bx = blockIdx.x - M.first;
  const int warp = threadIdx.x >> 5, sl = warp % a.nsl, g = warp / a.nsl;
  const int64_t group = blockIdx.y, row_base = group * M.rows;
  const int64_t r0 = bx * a.G * a.rb + g * a.rb;
  const int64_t rb = row_bytes<T>(a.cols), C = a.cols / R::E;
  {  // PDL: before the wait only this block's rows of weights (never written by a step) are read.
    const int64_t first = bx * a.G * a.rb;
    const int64_t n = min64(M.rows - first, static_cast<int64_t>(a.G) * a.rb);
    pdl_prefetch_l2(M.w + (row_base + first) * rb, static_cast<size_t>(n * rb));
  }
  pdl_enter();
  float xr[32];
  rs_load_x<T>(a.x + group * a.x_group, a.cols, sl, xr);
  const ScaleRef sref{M.s, a.cols};
#pragma unroll 1
  for (int v0 = 0; v0 < a.rb; v0 += KR) {
    const uint8_t* rp[KR];
    int64_t gr[KR];
#pragma unroll
    for (int i = 0; i < KR; ++i) {
      gr[i] = row_base + min64(r0 + v0 + i, M.rows - 1);  // past the end: computed, not stored
      rp[i] = M.w + gr[i] * rb;
    }
    float acc[KR];
    rs_step<T>(rp, gr, sref, C, sl, xr, acc);
    int ri;
    const float v = rs_reduce<KR>(acc, ri);
    if (rs_writer<KR>()) red[warp][v0 + ri] = v;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < a.G * a.rb; i += blockDim.x) {
    const int gg = i / a.rb, r = i - gg * a.rb;
    const int64_t row = bx * a.G * a.rb + i;
    if (row >= M.rows) continue;
    float v = 0.f;
    for (int k = 0; k < a.nsl; ++k) v += red[gg * a.nsl + k][r];
    M.y[row_base + row] = v;
  }
}

// Whether matmul's n == 1 takes the register-input kernel. Measured on an H200 against the
// shared-memory kernel (docs/performance.md "Decode kernels", bench_matvec_cuda --variants): it wins on small
// matrices with wide rows (one step of rows per warp covers them: wq_a, wkv, the router, the
// expert-sized Q8_0/FP8 ones) and on the FP8 LM head, and loses on MXFP4 (bound by the nibble
// decode either way), on narrow rows (wq_b's 1024) and on the mid-size 2-byte and F32 matrices.
bool mv1_ok(const WeightView& W) {
  if (W.type == WType::GGML_BLOCK || W.type == WType::MXFP4 || W.cols < 4096 ||
      rs_slices(W.cols) > kMv1MaxWarps)
    return false;
  const int64_t bytes = W.data_bytes() + W.scale_bytes();
  const bool small = bytes <= (int64_t{10} << 20);
  if (W.type == WType::F16 || W.type == WType::BF16) return small && W.rows >= 1024;
  return small || (W.type == WType::FP8_B128 && W.rows >= 65536);
}

// W[0..count) share type and width (count > 1: groups == 1); y[i] = W[i] x.
template <WType T>
void launch_mv1_t(DeviceContext& ctx, const WeightView* W, float* const* y, int count, const float* x, int groups,
                  int64_t x_group) {
  constexpr int KR = Rs<T>::kRows;
  Mv1Args a{};
  a.count = count;
  a.x = x;
  a.cols = W[0].cols;
  a.x_group = x_group;
  a.nsl = static_cast<int>(rs_slices(a.cols));
  a.G = std::max(1, 8 / a.nsl);
  // Rows per warp: as many as keep >= 16 warps per SM in the grid, between one step and 64.
  int64_t total = 0;
  for (int i = 0; i < count; ++i) total += W[i].rows / groups;
  const int64_t want = total * groups * a.nsl / (16LL * ctx.sm_count());
  a.rb = static_cast<int>(std::clamp<int64_t>(want / KR * KR, KR, kMv1MaxRows));
  const int64_t brows = static_cast<int64_t>(a.G) * a.rb;
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    a.m[i] = {static_cast<const uint8_t*>(W[i].data), static_cast<const uint8_t*>(W[i].scales), y[i],
              W[i].rows / groups, static_cast<unsigned>(blocks)};
    blocks += (a.m[i].rows + brows - 1) / brows;
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(groups));
  launch(ctx, mv1_kernel<T>, grid, 32 * a.nsl * a.G, 0, a);
}

void launch_mv1(DeviceContext& ctx, const WeightView* W, float* const* y, int count, const float* x, int groups,
                int64_t x_group) {
  switch (W[0].type) {
    case WType::F32: return launch_mv1_t<WType::F32>(ctx, W, y, count, x, groups, x_group);
    case WType::F16: return launch_mv1_t<WType::F16>(ctx, W, y, count, x, groups, x_group);
    case WType::BF16: return launch_mv1_t<WType::BF16>(ctx, W, y, count, x, groups, x_group);
    case WType::Q8_0: return launch_mv1_t<WType::Q8_0>(ctx, W, y, count, x, groups, x_group);
    case WType::FP8_B128: return launch_mv1_t<WType::FP8_B128>(ctx, W, y, count, x, groups, x_group);
    case WType::MXFP4: return launch_mv1_t<WType::MXFP4>(ctx, W, y, count, x, groups, x_group);
    case WType::GGML_BLOCK: break;
  }
  fail("matvec: no n == 1 register-input kernel for ", wtype_name(W[0].type));
}

// Rows per warp by default: enough reuse of each x value loaded from shared memory, few
// enough registers for the occupancy that hides the load latency.
template <WType T>
constexpr int rows_per_warp() {
  return (T == WType::F32 || T == WType::F16 || T == WType::BF16) ? 2 : 4;
}

// rpw: rows per warp for the single-column kernels (1, 2 or 4; 0 = automatic). Measured on
// an H200 (docs/performance-kernels.md): one row per warp wins where rows are few (more warps in
// flight), the type's default elsewhere.
template <WType T, int NC>
void launch_matvec_nc(DeviceContext& ctx, MvArgs a, int groups, int rpw) {
  if constexpr (NC == 1) {
    const int64_t total_rows = a.rows * groups;
    if (rpw == 0 && (total_rows <= 512 || (T == WType::MXFP4 && total_rows <= 1024))) rpw = 1;
    if (rpw == 1) return launch_matvec_r<T, 1, 1>(ctx, a, groups);
    if (rpw == 2) return launch_matvec_r<T, 2, 1>(ctx, a, groups);
    if (rpw == 4) return launch_matvec_r<T, 4, 1>(ctx, a, groups);
  }
  launch_matvec_r<T, rows_per_warp<T>(), NC>(ctx, a, groups);
}

template <WType T>
void launch_matvec(DeviceContext& ctx, MvArgs a, int groups, int rpw) {
  switch (a.ncols) {
    case 1: return launch_matvec_nc<T, 1>(ctx, a, groups, rpw);
    case 2: return launch_matvec_nc<T, 2>(ctx, a, groups, rpw);
    case 3:
    case 4: return launch_matvec_nc<T, 4>(ctx, a, groups, rpw);
    default: return launch_matvec_nc<T, 8>(ctx, a, groups, rpw);
  }
}

void matvec_dispatch(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int64_t ldx,
                     int64_t ldy, int groups, int64_t rows_per_group, int64_t x_group, int rpw = 0) {
  // The tensor-core kernel reads x in place (no staging).
  if (rpw == kMatvecTensorCores) return mma_matvec(ctx, W, x, n, y, ldx, ldy, groups, rows_per_group, x_group);
  // Columns go in batches small enough for x to fit in shared memory (x: batch * cols floats).
  const size_t optin = ctx.props().sharedMemPerBlockOptin;
  const size_t reserve = W.type == WType::GGML_BLOCK ? ggml_matvec_smem_reserve(W.ggml) : 4096;
  const int64_t fit =
      optin > reserve ? static_cast<int64_t>((optin - reserve) / (static_cast<size_t>(W.cols) * sizeof(float))) : 0;
  HS_CHECK(fit >= 1, "matvec: input width ", W.cols, " does not fit in shared memory");
  const int64_t cap = fit >= 8 ? 8 : fit >= 4 ? 4 : fit >= 2 ? 2 : 1;  // the kernels take 1, 2, 4 or 8 columns
  if (n == 1 && rpw == 0 && mv1_ok(W)) return launch_mv1(ctx, &W, &y, 1, x, groups, x_group);
  for (int64_t t0 = 0; t0 < n;) {
    const int64_t nb = std::min<int64_t>(n - t0, cap);
    MvArgs a{};
    a.w = static_cast<const uint8_t*>(W.data);
    a.s = static_cast<const uint8_t*>(W.scales);
    a.x = x + t0 * ldx;
    a.y = y + t0 * ldy;
    a.rows = rows_per_group;
    a.cols = W.cols;
    a.ldx = ldx;
    a.ldy = ldy;
    a.x_group = x_group;
    a.ncols = static_cast<int>(nb);
    switch (W.type) {
      case WType::F32: launch_matvec<WType::F32>(ctx, a, groups, rpw); break;
      case WType::F16: launch_matvec<WType::F16>(ctx, a, groups, rpw); break;
      case WType::BF16: launch_matvec<WType::BF16>(ctx, a, groups, rpw); break;
      case WType::Q8_0: launch_matvec<WType::Q8_0>(ctx, a, groups, rpw); break;
      case WType::FP8_B128: launch_matvec<WType::FP8_B128>(ctx, a, groups, rpw); break;
      case WType::MXFP4: launch_matvec<WType::MXFP4>(ctx, a, groups, rpw); break;
      case WType::GGML_BLOCK: ggml_matvec(ctx, W, a.x, nb, a.y, ldx, ldy, groups, rows_per_group, x_group); break;
    }
    t0 += nb;
  }
}

// ---- dequantization (whole chunks: one thread decodes one 16-byte chunk)

template <typename OutT>
__device__ __forceinline__ void store4(OutT* o, const float (&w)[4], float sc) {
  if constexpr (sizeof(OutT) == 4) {
    *reinterpret_cast<float4*>(o) = make_float4(w[0] * sc, w[1] * sc, w[2] * sc, w[3] * sc);
  } else {
    __nv_bfloat162 a = __floats2bfloat162_rn(w[0] * sc, w[1] * sc);
    __nv_bfloat162 b = __floats2bfloat162_rn(w[2] * sc, w[3] * sc);
    uint2 u;
    memcpy(&u.x, &a, 4);
    memcpy(&u.y, &b, 4);
    *reinterpret_cast<uint2*>(o) = u;
  }
}

template <WType T, typename OutT>
__global__ void dequant_kernel(const uint8_t* w, const uint8_t* s, int64_t cols, const int32_t* rows, int64_t r0,
                               int64_t n, OutT* out) {
  pdl_enter();
  using Tr = WTraits<T>;
  constexpr int E = Tr::E;
  const int64_t C = cols / E;
  const int64_t total = n * C;
  const int64_t rb = row_bytes<T>(cols);
  const ScaleRef sref{s, cols};
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / C, c = i - r * C;
    const int64_t row = rows ? static_cast<int64_t>(rows[r]) : r0 + r;
    const uint4 raw = *reinterpret_cast<const uint4*>(w + row * rb + c * 16);
    const float sc = Tr::kScaled ? sref.get(T, row, c) : 1.0f;
    OutT* o = out + r * cols + c * E;
#pragma unroll
    for (int p = 0; p < E / 4; ++p) {
      float v[4];
      Tr::part(raw, p, v);
      store4(o + 4 * p, v, sc);
    }
  }
}

template <typename OutT>
void dequant_launch(DeviceContext& ctx, const WeightView& W, const int32_t* rows, int64_t r0, int64_t n, OutT* out) {
  if (W.type == WType::GGML_BLOCK) return ggml_dequant(ctx, W, rows, r0, n, out, sizeof(OutT) == 2);
  const auto* w = static_cast<const uint8_t*>(W.data);
  const auto* s = static_cast<const uint8_t*>(W.scales);
  const int threads = 256;
  int64_t e = 4;
  switch (W.type) {
    case WType::F32: e = WTraits<WType::F32>::E; break;
    case WType::F16: e = WTraits<WType::F16>::E; break;
    case WType::BF16: e = WTraits<WType::BF16>::E; break;
    case WType::Q8_0: e = WTraits<WType::Q8_0>::E; break;
    case WType::FP8_B128: e = WTraits<WType::FP8_B128>::E; break;
    case WType::MXFP4: e = WTraits<WType::MXFP4>::E; break;
    case WType::GGML_BLOCK: break;  // handled above
  }
  const unsigned grid = grid_for(n * (W.cols / e), threads);
  switch (W.type) {
    case WType::F32: launch(ctx, dequant_kernel<WType::F32, OutT>, grid, threads, 0, w, s, W.cols, rows, r0, n, out); break;
    case WType::F16: launch(ctx, dequant_kernel<WType::F16, OutT>, grid, threads, 0, w, s, W.cols, rows, r0, n, out); break;
    case WType::BF16: launch(ctx, dequant_kernel<WType::BF16, OutT>, grid, threads, 0, w, s, W.cols, rows, r0, n, out); break;
    case WType::Q8_0: launch(ctx, dequant_kernel<WType::Q8_0, OutT>, grid, threads, 0, w, s, W.cols, rows, r0, n, out); break;
    case WType::FP8_B128:
      launch(ctx, dequant_kernel<WType::FP8_B128, OutT>, grid, threads, 0, w, s, W.cols, rows, r0, n, out);
      break;
    case WType::MXFP4: launch(ctx, dequant_kernel<WType::MXFP4, OutT>, grid, threads, 0, w, s, W.cols, rows, r0, n, out); break;
    case WType::GGML_BLOCK: break;  // handled above
  }
}

__global__ void f32_to_bf16_kernel(const float* x, int64_t n, int64_t cols, int64_t ldx, __nv_bfloat16* out) {
  pdl_enter();
  const int64_t total = n * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = i - t * cols;
    out[i] = __float2bfloat16_rn(x[t * ldx + c]);
  }
}

void check_weight(const WeightView& W) {
  HS_CHECK(W.data != nullptr && W.rows > 0 && W.cols > 0, "matmul: empty weight view");
  const bool scaled = W.type == WType::Q8_0 || W.type == WType::FP8_B128 || W.type == WType::MXFP4;
  HS_CHECK(!scaled || W.scales != nullptr, "matmul: ", wtype_name(W.type), " weight without scales");
  int64_t e = 4;
  if (W.type == WType::F16 || W.type == WType::BF16) e = 8;
  if (W.type == WType::FP8_B128) e = 16;
  if (W.type == WType::Q8_0 || W.type == WType::MXFP4) e = 32;
  if (W.type == WType::GGML_BLOCK) {
    HS_CHECK(ggml_block_supported(W.ggml), "matmul: no CUDA decoder for GGUF blocks of type ",
             ggml_type_info(static_cast<uint32_t>(W.ggml)) ? ggml_type_name(W.ggml) : "(unknown)");
    e = ggml_type_info(W.ggml).block_elems;
  }
  HS_CHECK(W.cols % e == 0, "matmul: ", wtype_name(W.type), " needs an input width that is a multiple of ", e,
           ", got ", W.cols);
}

// n > kMatvecMaxCols: dequantized tiles of W times x through cuBLAS.
void gemm_tiled(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, GemmMode mode,
                int64_t ldx, int64_t ldy) {
  const bool f32 = mode == GemmMode::F32 || (mode == GemmMode::Auto && W.type == WType::F32);
  const float one = 1.0f, zero = 0.0f;
  cublasHandle_t h = ctx.cublas();
  if (f32 && W.type == WType::F32) {
    HS_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(W.rows), static_cast<int>(n),
                                static_cast<int>(W.cols), &one, static_cast<const float*>(W.data),
                                static_cast<int>(W.cols), x, static_cast<int>(ldx), &zero, y, static_cast<int>(ldy)));
    return;
  }
  const size_t elem = f32 ? 4 : 2;
  const size_t tile_budget = size_t{64} << 20;
  int64_t tr = static_cast<int64_t>(tile_budget / (elem * static_cast<size_t>(W.cols)));
  tr = std::max<int64_t>(128, tr / 128 * 128);
  if (W.type == WType::BF16 && !f32) tr = W.rows;  // used in place, no tile
  tr = std::min<int64_t>(tr, W.rows);
  const size_t x_bytes = f32 ? 0 : ((static_cast<size_t>(n * W.cols) * 2 + 255) & ~size_t{255});
  const size_t tile_bytes = (W.type == WType::BF16 && !f32) ? 0 : static_cast<size_t>(tr * W.cols) * elem;
  auto lease = ctx.scratch(x_bytes + tile_bytes + 256);
  __nv_bfloat16* xb = lease.as<__nv_bfloat16>();
  void* tile = lease.as<char>(x_bytes);
  if (!f32) {
    launch(ctx, f32_to_bf16_kernel, grid_for(n * W.cols, 256), 256, 0, x, n, W.cols, ldx, xb);
  }
  for (int64_t r0 = 0; r0 < W.rows; r0 += tr) {
    const int64_t m = std::min<int64_t>(tr, W.rows - r0);
    const void* A;
    if (W.type == WType::BF16 && !f32) {
      A = static_cast<const uint16_t*>(W.data) + r0 * W.cols;
    } else {
      if (f32) dequant_launch(ctx, W, nullptr, r0, m, static_cast<float*>(tile));
      else dequant_launch(ctx, W, nullptr, r0, m, static_cast<__nv_bfloat16*>(tile));
      A = tile;
    }
    if (f32) {
      HS_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                                  static_cast<int>(W.cols), &one, static_cast<const float*>(A),
                                  static_cast<int>(W.cols), x, static_cast<int>(ldx), &zero, y + r0,
                                  static_cast<int>(ldy)));
    } else {
      HS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m), static_cast<int>(n),
                                   static_cast<int>(W.cols), &one, A, CUDA_R_16BF, static_cast<int>(W.cols), xb,
                                   CUDA_R_16BF, static_cast<int>(W.cols), &zero, y + r0, CUDA_R_32F,
                                   static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
  }
}

}  // namespace

void dequantize_rows(DeviceContext& ctx, const WeightView& W, const int32_t* rows, int64_t r0, int64_t n, float* out) {
  check_weight(W);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  dequant_launch(ctx, W, rows, r0, n, out);
}

MatmulPath matmul_path(const WeightView& W, int64_t n, GemmMode mode) {
  if (n <= kMatvecMaxCols) return mma_matvec_default(W, n) ? MatmulPath::TensorCores : MatmulPath::Matvec;
  return mode != GemmMode::Bf16 && mma_matvec_default(W, n) ? MatmulPath::TensorCores : MatmulPath::Tiled;
}

const char* matmul_path_name(MatmulPath p) {
  return p == MatmulPath::Matvec ? "matvec" : p == MatmulPath::TensorCores ? "mma" : "gemm";
}

void matmul(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, GemmMode mode, int64_t ldx,
            int64_t ldy) {
  check_weight(W);
  if (n <= 0) return;
  if (ldx == 0) ldx = W.cols;
  if (ldy == 0) ldy = W.rows;
  HS_CHECK(ldx >= W.cols && ldy >= W.rows && ldx % 4 == 0, "matmul: bad leading dimensions ", ldx, "/", ldy);
  HS_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "matmul: x must be 16-byte aligned");
  DeviceGuard g(ctx.device());
  switch (matmul_path(W, n, mode)) {
    case MatmulPath::Tiled: return gemm_tiled(ctx, W, x, n, y, mode, ldx, ldy);
    case MatmulPath::TensorCores: return mma_matvec(ctx, W, x, n, y, ldx, ldy, 1, W.rows, 0);
    case MatmulPath::Matvec: return matvec_dispatch(ctx, W, x, n, y, ldx, ldy, 1, W.rows, 0);
  }
}

bool matvec_same_input_ok(const WeightView* W, int count) {
  if (count < 2 || count > kMv1MaxMats) return false;
  const WeightView& w0 = W[0];
  if (w0.type == WType::GGML_BLOCK || w0.type == WType::MXFP4 || w0.cols < 4096 || rs_slices(w0.cols) > kMv1MaxWarps)
    return false;  // mv1_ok's types and widths
  int64_t bytes = 0;
  for (int i = 0; i < count; ++i) {
    if (W[i].type != w0.type || W[i].cols != w0.cols || W[i].data == nullptr) return false;
    bytes += W[i].data_bytes() + W[i].scale_bytes();
  }
  return bytes <= (int64_t{32} << 20);  // projections, not the big matrices (the shared-memory kernel's)
}

void matvec_same_input(DeviceContext& ctx, const WeightView* W, float* const* y, int count, const float* x) {
  HS_CHECK(matvec_same_input_ok(W, count), "matvec_same_input: ", count,
           " matrices that do not share a type and width the n == 1 kernel takes");
  for (int i = 0; i < count; ++i) check_weight(W[i]);
  HS_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "matmul: x must be 16-byte aligned");
  DeviceGuard g(ctx.device());
  launch_mv1(ctx, W, y, count, x, 1, 0);
}

void matvec_variant(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int rows_per_warp) {
  check_weight(W);
  const int64_t nmax = rows_per_warp == kMatvecTensorCores ? kMatvecMmaMaxCols : kMatvecMaxCols;
  HS_CHECK(n >= 1 && n <= nmax, "matvec_variant: n must be 1..", nmax, ", got ", n);
  HS_CHECK(rows_per_warp == 0 || rows_per_warp == 1 || rows_per_warp == 2 || rows_per_warp == 4 ||
               (rows_per_warp == kMatvecTensorCores && mma_matvec_supported(W)),
           "matvec_variant: rows per warp must be 0, 1, 2 or 4 (or kMatvecTensorCores for Q8_0, FP8_B128, F16 or BF16 weights)");
  if (rows_per_warp == 0) return matmul(ctx, W, x, n, y);  // automatic: matmul's own choice
  HS_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0, "matmul: x must be 16-byte aligned");
  DeviceGuard g(ctx.device());
  matvec_dispatch(ctx, W, x, n, y, W.cols, W.rows, 1, W.rows, 0, rows_per_warp);
}

void grouped_matmul(DeviceContext& ctx, const WeightView& W, int groups, const float* x, int64_t n, float* y,
                    GemmMode mode) {
  check_weight(W);
  HS_CHECK(groups >= 1 && W.rows % groups == 0, "grouped_matmul: ", W.rows, " rows do not split into ", groups,
           " groups");
  if (n <= 0) return;
  const int64_t R = W.rows / groups;
  DeviceGuard g(ctx.device());
  switch (matmul_path(W, n, mode)) {
    case MatmulPath::TensorCores: return mma_matvec(ctx, W, x, n, y, groups * W.cols, W.rows, groups, R, W.cols);
    case MatmulPath::Matvec: return matvec_dispatch(ctx, W, x, n, y, groups * W.cols, W.rows, groups, R, W.cols);
    case MatmulPath::Tiled: break;
  }
  for (int gi = 0; gi < groups; ++gi)
    gemm_tiled(ctx, W.slice_rows(gi * R, R), x + gi * W.cols, n, y + gi * R, mode, groups * W.cols, W.rows);
}

}  // namespace hs::cuda
