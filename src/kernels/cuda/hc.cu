// Manifold-constrained hyper-connections (ds4-model-spec.md §4): hc_pre, hc_post, hc_head, and
// hc_stream_mean (the DSpark drafter's taps).
//
// Few tokens (decode, hc 4): one launch per call, a cluster of 8 blocks per token. Each block
// streams 1/8 of the mixing matrix fn [mix, hc*D] (1.5 MB for V4-Flash) against its slice of
// the token's hc*D inputs (one float4 column per thread, all loads in flight at once), reduces
// the mix projections and the sum of squares over the block (warp reduce-scatter, then the warps
// in order), and publishes them in shared memory; after a cluster barrier every block sums the
// 8 blocks' partials in rank order through distributed shared memory, applies the RMS factor and
// the pre gates, and collapses the streams for its 1/8 of the channels (inputs loaded before the
// barrier). Block 0's first warp also writes post, and one of its threads runs the 4x4 Sinkhorn
// in registers. No global scratch, no atomics: the result is reproducible.
//
// Many tokens (or another hc): two kernels. The first streams fn in K-slices across many blocks
// and writes, per token and slice, the partial projections fn . v and the partial sum of squares.
// The second sums those partials in a fixed order, applies the RMS factor, sigmoid gates and
// (hc_pre) the Sinkhorn in one thread (hc 4: comb4_thread), then collapses the hc streams into u
// for its channel slice.
#include <cooperative_groups.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/quant_sim.cuh"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/rowstream.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kHcSlice = 512;  // K-slice of one projection block
constexpr int kHcThreads = 256;
constexpr int kHcMaxMix = 80;  // (2+hc)*hc for hc <= 8
constexpr int kHcCollapseChannels = 1024;

// partial[t, slice, 0..mix) = fn[:, slice] . v[slice]; partial[t, slice, mix] = sum v^2 over the slice.
__global__ void __launch_bounds__(kHcThreads) hc_proj_kernel(const float* fn, const float* X, int64_t len, int mix,
                                                             float* partial) {
  pdl_enter();
  __shared__ float4 xs[kHcSlice / 4];
  __shared__ float red[32];
  const int64_t t = blockIdx.y;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x) * kHcSlice;
  const int64_t nslices = gridDim.x;
  const int width = static_cast<int>(min64(kHcSlice, len - s0));  // multiple of 4
  const float* v = X + t * len + s0;
  for (int i = threadIdx.x; i < kHcSlice / 4; i += kHcThreads)
    xs[i] = 4 * i < width ? *reinterpret_cast<const float4*>(v + 4 * i) : make_float4(0.f, 0.f, 0.f, 0.f);
  __syncthreads();
  float* out = partial + (t * nslices + blockIdx.x) * (mix + 1);

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int row = warp; row < mix; row += kHcThreads / 32) {
    const float* f = fn + row * len + s0;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < kHcSlice / 128; ++i) {
      const int g = lane + 32 * i;
      if (4 * g < width) {
        acc = fma4(*reinterpret_cast<const float4*>(f + 4 * g), xs[g], acc);
      }
    }
    acc = warp_sum(acc);
    if (lane == 0) out[row] = acc;
  }
  float ss = 0.f;
  for (int i = threadIdx.x; i < kHcSlice / 4; i += kHcThreads) {
    const float4 b = xs[i];
    ss += b.x * b.x + b.y * b.y + b.z * b.z + b.w * b.w;
  }
  ss = block_sum(ss, red);
  if (threadIdx.x == 0) out[mix] = ss;
}

// Softmax over each row, then Sinkhorn normalisation (the CPU twin's order of operations), in
// one thread. HC > 0: the width is a compile-time constant and the matrix lives in registers;
// HC == 0: any width (hc 4 takes comb4_thread below).
template <int HC>
__device__ void sinkhorn_dev(float* A, int hc_rt, int iters, float eps) {
  const int hc = HC > 0 ? HC : hc_rt;
#pragma unroll
  for (int j = 0; j < (HC > 0 ? HC : 8); ++j) {
    if (j >= hc) break;
    float* row = A + j * hc;
    float mx = row[0];
#pragma unroll
    for (int k = 1; k < (HC > 0 ? HC : 8); ++k)
      if (k < hc) mx = fmaxf(mx, row[k]);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < (HC > 0 ? HC : 8); ++k)
      if (k < hc) {
        row[k] = expf(row[k] - mx);
        s += row[k];
      }
#pragma unroll
    for (int k = 0; k < (HC > 0 ? HC : 8); ++k)
      if (k < hc) row[k] = row[k] / s + eps;
  }
  const int n_col = iters < 1 ? 1 : iters;  // the CPU twin always normalises columns once
  for (int it = 0; it < n_col; ++it) {
    if (it > 0) {  // row normalisation before every column normalisation but the first
#pragma unroll
      for (int j = 0; j < (HC > 0 ? HC : 8); ++j) {
        if (j >= hc) break;
        float s = 0.f;
#pragma unroll
        for (int k = 0; k < (HC > 0 ? HC : 8); ++k)
          if (k < hc) s += A[j * hc + k];
#pragma unroll
        for (int k = 0; k < (HC > 0 ? HC : 8); ++k)
          if (k < hc) A[j * hc + k] /= (s + eps);
      }
    }
#pragma unroll
    for (int k = 0; k < (HC > 0 ? HC : 8); ++k) {
      if (k >= hc) break;
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < (HC > 0 ? HC : 8); ++j)
        if (j < hc) s += A[j * hc + k];
#pragma unroll
      for (int j = 0; j < (HC > 0 ? HC : 8); ++j)
        if (j < hc) A[j * hc + k] /= (s + eps);
    }
  }
}

// The comb matrix of one token: logits -> Sinkhorn, written to comb (registers when hc == 4).
template <int HC>
__device__ void comb_dev(const float* m, float r, const HcParams& p, float* comb) {
  const int hc = HC > 0 ? HC : p.hc;
  float A[HC > 0 ? HC * HC : 64];
#pragma unroll
  for (int q = 0; q < (HC > 0 ? HC * HC : 64); ++q)
    if (q < hc * hc) A[q] = m[2 * hc + q] * r * p.scale[2] + p.base[2 * hc + q];
  sinkhorn_dev<HC>(A, hc, p.sinkhorn_iters, p.hc_eps);
#pragma unroll
  for (int q = 0; q < (HC > 0 ? HC * HC : 64); ++q)
    if (q < hc * hc) comb[q] = A[q];
}

// The comb matrix of one token for hc == 4 in one thread, all 16 values in registers (every
// index a compile-time constant): sums in the serial order of sinkhorn_dev / the CPU twin (rows
// over k, columns over j, from 0); each normalisation multiplies by one reciprocal per row or
// column (__fdividef(1, s + eps), 2 ulp) instead of 16 IEEE divisions, which moves comb by
// ~1e-7 relative against the CPU. Measured on an H200 (docs/performance.md): hc_pre at n = 1
// took 30 us with comb_dev<4> and 11-12 us with this (or with a lane-per-element version), hc_head
// (no Sinkhorn) 4.4-5 us.
__device__ __forceinline__ void comb4_thread(const float* m, float r, const HcParams& p, float* comb) {
  float A[16];
#pragma unroll
  for (int q = 0; q < 16; ++q) A[q] = m[8 + q] * r * p.scale[2] + p.base[8 + q];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float mx = A[4 * j];
#pragma unroll
    for (int k = 1; k < 4; ++k) mx = fmaxf(mx, A[4 * j + k]);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      A[4 * j + k] = expf(A[4 * j + k] - mx);
      s += A[4 * j + k];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) A[4 * j + k] = A[4 * j + k] / s + p.hc_eps;
  }
  const int n_col = p.sinkhorn_iters < 1 ? 1 : p.sinkhorn_iters;  // the CPU twin always normalises columns once
#pragma unroll 1
  for (int it = 0; it < n_col; ++it) {
    if (it > 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float inv = __fdividef(1.0f, ((A[4 * j] + A[4 * j + 1]) + A[4 * j + 2]) + A[4 * j + 3] + p.hc_eps);
#pragma unroll
        for (int k = 0; k < 4; ++k) A[4 * j + k] *= inv;
      }
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float inv = __fdividef(1.0f, ((A[k] + A[4 + k]) + A[8 + k]) + A[12 + k] + p.hc_eps);
#pragma unroll
      for (int j = 0; j < 4; ++j) A[4 * j + k] *= inv;
    }
  }
#pragma unroll
  for (int q = 0; q < 16; ++q) comb[q] = A[q];
}

// head == false: hc_pre (pre, post, comb); head == true: hc_head (pre only).
__global__ void __launch_bounds__(kHcThreads) hc_finish_kernel(const float* partial, int nslices, int mix,
                                                               HcParams p, bool head, const float* X, float* u,
                                                               float* post, float* comb) {
  pdl_enter();
  __shared__ float m[kHcMaxMix + 1];
  __shared__ float pre[8];
  const int64_t t = blockIdx.y;
  const int hc = p.hc;
  const int64_t len = hc * p.dim;
  const float* part = partial + t * nslices * (mix + 1);
  for (int k = threadIdx.x; k <= mix; k += blockDim.x) {
    float s = 0.f;
    for (int i = 0; i < nslices; ++i) s += part[i * (mix + 1) + k];
    m[k] = s;
  }
  __syncthreads();
  const float r = 1.0f / sqrtf(m[mix] / static_cast<float>(len) + p.norm_eps);
  if (threadIdx.x == 0) {
    for (int j = 0; j < hc; ++j) pre[j] = sigmoidf_(m[j] * r * p.scale[0] + p.base[j]) + p.hc_eps;
    if (!head && blockIdx.x == 0) {
      for (int j = 0; j < hc; ++j) post[t * hc + j] = 2.0f * sigmoidf_(m[hc + j] * r * p.scale[1] + p.base[hc + j]);
      if (hc != 4) comb_dev<0>(m, r, p, comb + t * hc * hc);
    }
  }
  if (!head && blockIdx.x == 0 && hc == 4 && threadIdx.x == 32) comb4_thread(m, r, p, comb + t * hc * hc);
  __syncthreads();
  const float* x = X + t * len;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kHcCollapseChannels;
  const int64_t c1 = min64(p.dim, c0 + kHcCollapseChannels);
  for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) {
    float s = 0.f;
    for (int j = 0; j < hc; ++j) s += pre[j] * x[j * p.dim + c];
    u[t * p.dim + c] = s;
  }
}

// Blocks per token x threads: 16 x 256 where the device can co-schedule a cluster of 16 (a
// non-portable size: Hopper), else the portable 8 x 512. Each block streams 1/kHcCluster of fn,
// so more blocks put more SMs' load bandwidth on the 1.5 MB projection.
constexpr int64_t kHcClusterMaxTokens = 16;
// The fused hand-over keeps a block's share of X after hc_post (float4 columns) and of u in
// shared memory: at most this many of each (V4-Flash at 16 blocks: 256 of both).
constexpr int kHcFuseMaxShare = 512;
constexpr int kHcFuseMaxRow = 8192;  // and the whole row of u

// Stream k of X after hc_post at one channel: post_k y + sum_j comb[j][k] old[j] (the one
// arithmetic of hc_post_kernel and of the fused hand-over, so both give the same bits).
__device__ __forceinline__ float hc_post_val(float yv, float postk, const float* A, int hc, int k, const float* old) {
  float s = postk * yv;
  for (int j = 0; j < hc; ++j) s = fmaf(A[j * hc + k], old[j], s);
  return s;
}

// The fused hand-over (hc_post_pre_norm): the finishing sub-layer's hc_post before hc_pre, the
// next sub-layer's input norm after it.
struct HcFuse {
  float* X = nullptr;              // [n, hc, D]: the HC state, updated in place (the kernel's X)
  const float* y = nullptr;        // [n, D]: the finishing sub-layer's output
  const float* post_in = nullptr;  // [n, 4] and [n, 4, 4]: its hc_pre's post and comb
  const float* comb_in = nullptr;
  bool post_round = false;         // X rounded to BF16 after hc_post (hc_post_bf16)
  const float* norm_w = nullptr;   // [D]
  float eps = 0.f;
  bool round_in = false, round_out = false;  // the norm's BF16 rounding points
  float* xn = nullptr;             // [n, D]
  float* xq = nullptr;             // [n, D] or null: xn's FP8 round trip (act_quant_fp8)
};

template <bool HEAD, bool FUSE, int kHcCluster, int kHcClusterThreads>
__global__ void __launch_bounds__(kHcClusterThreads, 1) hc_cluster_kernel(HcParams p, const float* X, float* u,
                                                                         float* post, float* comb, HcFuse f) {
  constexpr int HC = 4, MIX = HEAD ? HC : (2 + HC) * HC, NV = HEAD ? 8 : 32;  // v[MIX]: the sum of squares
  static_assert(!(HEAD && FUSE), "the hand-over ends in hc_pre");
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  __shared__ float part[NV];
  __shared__ float wred[kHcClusterThreads / 32][NV];
  __shared__ float m[NV];
  __shared__ float pre[HC];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.y, D = p.dim, len4 = HC * D / 4;
  const float* x = X + t * HC * D;
  const float4* f4 = reinterpret_cast<const float4*>(p.fn);
  // This block's float4 columns [c0, c1) of fn and of the token's inputs.
  const int64_t per = (len4 + kHcCluster - 1) / kHcCluster, c0 = rank * per, c1 = min64(len4, c0 + per);
  const int64_t cf = c0 + threadIdx.x;  // this thread's first column (at Flash's width its only one)
  // PDL: before the wait only fn (a weight) is read: the first column of every row is loaded
  // while the previous kernel finishes.
  float4 fv0[MIX];
#pragma unroll
  for (int r = 0; r < MIX; ++r) fv0[r] = cf < c1 ? __ldg(f4 + r * len4 + cf) : make_float4(0.f, 0.f, 0.f, 0.f);
  pdl_enter();

  // FUSE: the finishing sub-layer's coefficients of this token, and X after its hc_post at one
  // channel of every stream (from the old X, which no block overwrites before the second
  // cluster barrier: every read of it comes first).
  float pin[HC] = {}, cin[HC * HC] = {};
  if constexpr (FUSE) {
#pragma unroll
    for (int k = 0; k < HC; ++k) pin[k] = f.post_in[t * HC + k];
#pragma unroll
    for (int q = 0; q < HC * HC; ++q) cin[q] = f.comb_in[t * HC * HC + q];
  }
  auto posted = [&](float yv, float (&xs)[HC]) {  // xs: the old X at a channel, y there -> the new X
    float o[HC];
#pragma unroll
    for (int k = 0; k < HC; ++k) {
      const float s = hc_post_val(yv, pin[k], cin, HC, k, xs);
      o[k] = f.post_round ? bf16_round(s) : s;
    }
#pragma unroll
    for (int k = 0; k < HC; ++k) xs[k] = o[k];
  };

  // The collapse inputs of this thread's first channel, in flight with the projection.
  const int64_t cd = (D + kHcCluster - 1) / kHcCluster, d0 = rank * cd, d1 = min64(D, d0 + cd);
  const int64_t c_first = d0 + threadIdx.x;
  float xc[HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) xc[j] = c_first < d1 ? (FUSE ? x[j * D + c_first] : __ldg(x + j * D + c_first)) : 0.f;
  if constexpr (FUSE) {
    if (c_first < d1) posted(f.y[t * D + c_first], xc);
  }

  // X's float4 column c of the token's [HC, D] row: as stored, or (FUSE) after hc_post, kept
  // for the write-back at the end.
  __shared__ float4 xnew[FUSE ? kHcFuseMaxShare : 1];
  auto xcol = [&](int64_t c) -> float4 {
    if constexpr (!FUSE) {
      return __ldg(reinterpret_cast<const float4*>(x) + c);
    } else {
      const int64_t k = 4 * c / D, ch = 4 * c - k * D;  // (D % 4 == 0: one stream)
      float4 o4[HC];
#pragma unroll
      for (int j = 0; j < HC; ++j) o4[j] = *reinterpret_cast<const float4*>(x + j * D + ch);
      const float4 y4 = *reinterpret_cast<const float4*>(f.y + t * D + ch);
      const float yv[4] = {y4.x, y4.y, y4.z, y4.w};
      float e[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float xs[HC];
#pragma unroll
        for (int j = 0; j < HC; ++j) xs[j] = i == 0 ? o4[j].x : i == 1 ? o4[j].y : i == 2 ? o4[j].z : o4[j].w;
        posted(yv[i], xs);
        e[i] = k == 0 ? xs[0] : k == 1 ? xs[1] : k == 2 ? xs[2] : xs[3];
      }
      const float4 v = make_float4(e[0], e[1], e[2], e[3]);
      xnew[c - c0] = v;
      return v;
    }
  };

  float v[NV];
#pragma unroll
  for (int r = 0; r < NV; ++r) v[r] = 0.f;
  auto column = [&](const float4 (&fv)[MIX], int64_t c) {
    const float4 xv = xcol(c);
#pragma unroll
    for (int r = 0; r < MIX; ++r) v[r] = fma4(fv[r], xv, v[r]);
    v[MIX] = fma4(xv, xv, v[MIX]);
  };
  if (cf < c1) column(fv0, cf);
  for (int64_t c = cf + blockDim.x; c < c1; c += blockDim.x) {
    float4 fv[MIX];
#pragma unroll
    for (int r = 0; r < MIX; ++r) fv[r] = __ldg(f4 + r * len4 + c);
    column(fv, c);
  }
  int ri;
  const float s = rs_reduce<NV>(v, ri);
  if (rs_writer<NV>()) wred[warp][ri] = s;
  __syncthreads();
  if (static_cast<int>(threadIdx.x) <= MIX) {
    float a = 0.f;
    for (int w = 0; w < kHcClusterThreads / 32; ++w) a += wred[w][threadIdx.x];
    part[threadIdx.x] = a;
  }
  cluster.sync();  // every block's partials are published
  if (static_cast<int>(threadIdx.x) <= MIX) {
    float a = 0.f;
#pragma unroll
    for (int q = 0; q < kHcCluster; ++q) a += cluster.map_shared_rank(part, q)[threadIdx.x];
    m[threadIdx.x] = a;
  }
  // Without the hand-over's norm no block reads another's shared memory past this point; with
  // it, the next barrier comes after the collapse (part is not written again).
  if constexpr (!FUSE) cluster.sync();
  else __syncthreads();
  const float r = 1.0f / sqrtf(m[MIX] / static_cast<float>(HC * D) + p.norm_eps);
  if (threadIdx.x < HC) {
    const int j = threadIdx.x;
    pre[j] = sigmoidf_(m[j] * r * p.scale[0] + p.base[j]) + p.hc_eps;
  }
  __syncthreads();
  if (!HEAD && rank == 0 && warp == 0) {  // post and the Sinkhorn, while the other warps collapse
    if (threadIdx.x < HC) {
      const int j = threadIdx.x;
      post[t * HC + j] = 2.0f * sigmoidf_(m[HC + j] * r * p.scale[1] + p.base[HC + j]);
    }
    if (threadIdx.x == 0) comb4_thread(m, r, p, comb + t * HC * HC);
  }
  __shared__ float ush[FUSE ? kHcFuseMaxShare : 1];  // FUSE: this block's channels of u (as the norm reads them)
  for (int64_t c = c_first; c < d1; c += blockDim.x) {
    if (c != c_first) {
#pragma unroll
      for (int j = 0; j < HC; ++j) xc[j] = x[j * D + c];
      if constexpr (FUSE) posted(f.y[t * D + c], xc);
    }
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < HC; ++j) acc += pre[j] * xc[j];
    if constexpr (FUSE) {
      if (f.round_in) acc = bf16_round(acc);  // the norm's input rounding, written back as it does
      ush[c - d0] = acc;
    }
    u[t * D + c] = acc;
  }
  if constexpr (FUSE) {
    cluster.sync();  // u is published; every read of the old X is done
    // The whole row of u from the blocks' shares (all loads in flight), then the unfused
    // rmsnorm's sum of squares, bit for bit: its T threads' in-order sums of elements vt, vt + T,
    // ..., each warp's butterfly, then the warps' sums as block_sum adds them.
    __shared__ float urow[kHcFuseMaxRow];
    for (int64_t e = threadIdx.x; e < cd; e += blockDim.x) {
      float g[kHcCluster];
#pragma unroll
      for (int q = 0; q < kHcCluster; ++q) g[q] = q * cd + e < D ? cluster.map_shared_rank(ush, q)[e] : 0.f;
#pragma unroll
      for (int q = 0; q < kHcCluster; ++q)
        if (q * cd + e < D) urow[q * cd + e] = g[q];
    }
    __syncthreads();
    __shared__ float nred[32];
    const int T = rmsnorm_threads(D);
    for (int vt0 = 0; vt0 < T; vt0 += kHcClusterThreads) {
      const int vt = vt0 + static_cast<int>(threadIdx.x);
      float ss = 0.f;
      if (vt < T)
        for (int64_t i = vt; i < D; i += T) ss = fmaf(urow[i], urow[i], ss);
      ss = warp_sum(ss);
      if (lane == 0 && vt < T) nred[vt >> 5] = ss;
    }
    __syncthreads();
    const float inv = 1.0f / sqrtf(warp_sum(lane < T / 32 ? nred[lane] : 0.0f) / static_cast<float>(D) + f.eps);
    for (int64_t c = c_first; c < d1; c += blockDim.x)
      f.xn[t * D + c] = norm_val(urow[c], f.norm_w[c], inv, f.round_in, f.round_out);
    if (f.xq) {  // act_quant_fp8's 128-blocks of xn, one warp each over the cluster
      constexpr int W = kHcClusterThreads / 32;
      for (int64_t b = static_cast<int64_t>(rank) * W + warp; b * 128 < D; b += kHcCluster * W)
        fp8_block_warp_of(
            f.xq + t * D, [&](int64_t i) { return norm_val(urow[i], f.norm_w[i], inv, f.round_in, f.round_out); },
            b * 128, min64(D, b * 128 + 128), false);
    }
    for (int64_t c = cf; c < c1; c += blockDim.x) reinterpret_cast<float4*>(f.X + t * HC * D)[c] = xnew[c - c0];
    cluster.sync();  // no block reads another's shared memory past this point
  }
}

template <bool HEAD, bool FUSE, int kHcCluster, int kHcClusterThreads>
void launch_hc_cluster(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* u, float* post,
                       float* comb, const HcFuse& f) {
  launch_cluster(ctx, hc_cluster_kernel<HEAD, FUSE, kHcCluster, kHcClusterThreads>,
                 dim3(kHcCluster, static_cast<unsigned>(n)), dim3(kHcClusterThreads), kHcCluster, p, X, u, post, comb,
                 f);
}

// The cluster shape the device takes: 16 x 256 where it co-schedules clusters of 16, else 8 x 512.
template <bool HEAD, bool FUSE>
bool hc_wide_cluster(DeviceContext& ctx) {
  return ctx.cluster_fits(reinterpret_cast<const void*>(hc_cluster_kernel<HEAD, FUSE, 16, 256>), 16, 256, true);
}

template <bool HEAD, bool FUSE>
void launch_hc_cluster(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* u, float* post,
                       float* comb, const HcFuse& f = {}) {
  if (hc_wide_cluster<HEAD, FUSE>(ctx)) launch_hc_cluster<HEAD, FUSE, 16, 256>(ctx, p, X, n, u, post, comb, f);
  else launch_hc_cluster<HEAD, FUSE, 8, 512>(ctx, p, X, n, u, post, comb, f);
}

void hc_collapse(DeviceContext& ctx, const HcParams& p, int mix, bool head, const float* X, int64_t n, float* u,
                 float* post, float* comb) {
  HS_CHECK(p.hc >= 1 && p.hc <= 8 && p.dim > 0 && (p.hc * p.dim) % 4 == 0, "hc: unsupported hc ", p.hc, " / dim ",
           p.dim);
  HS_CHECK(n <= 65535, "hc: at most 65535 tokens per call, got ", n);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  if (p.hc == 4 && n <= kHcClusterMaxTokens) {
    if (head) launch_hc_cluster<true, false>(ctx, p, X, n, u, post, comb);
    else launch_hc_cluster<false, false>(ctx, p, X, n, u, post, comb);
    return;
  }
  const int64_t len = p.hc * p.dim;
  const int nslices = static_cast<int>((len + kHcSlice - 1) / kHcSlice);
  auto lease = ctx.scratch(static_cast<size_t>(n) * nslices * (mix + 1) * sizeof(float));
  float* partial = lease.as<float>();
  launch(ctx, hc_proj_kernel, dim3(nslices, static_cast<unsigned>(n)), kHcThreads, 0, p.fn, X, len, mix,
                                                                                            partial);
  const unsigned cblocks = static_cast<unsigned>((p.dim + kHcCollapseChannels - 1) / kHcCollapseChannels);
  launch(ctx, hc_finish_kernel, dim3(cblocks, static_cast<unsigned>(n)), kHcThreads, 0, partial, nslices, mix, p, head, X, u, post, comb);
}

__global__ void hc_post_kernel(const float* y, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
                               float* X, bool round_out) {
  pdl_enter();
  const int64_t total = n * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, c = i - t * dim;
    float* x = X + t * hc * dim;
    const float* A = comb + t * hc * hc;
    float old[8];
    for (int j = 0; j < hc; ++j) old[j] = x[j * dim + c];
    const float yv = y[t * dim + c];
    for (int k = 0; k < hc; ++k) {
      const float s = hc_post_val(yv, post[t * hc + k], A, hc, k, old);
      x[k * dim + c] = round_out ? bf16_round(s) : s;
    }
  }
}

// The mean over the hc streams in f64 in stream order, like the CPU twin: the same floats.
__global__ void hc_stream_mean_kernel(const float* X, int64_t n, int hc, int64_t dim, float* out, int64_t stride) {
  pdl_enter();
  const int64_t total = n * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / dim, c = i - t * dim;
    const float* x = X + t * hc * dim + c;
    double s = 0;
    for (int j = 0; j < hc; ++j) s += x[j * dim];
    out[t * stride + c] = static_cast<float>(s / static_cast<double>(hc));
  }
}

}  // namespace

void hc_pre(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* u, float* post, float* comb) {
  hc_collapse(ctx, p, (2 + p.hc) * p.hc, false, X, n, u, post, comb);
}

void hc_head(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* h) {
  hc_collapse(ctx, p, p.hc, true, X, n, h, nullptr, nullptr);
}

void hc_post(DeviceContext& ctx, const float* y, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
             float* X, bool round_out) {
  HS_CHECK(hc >= 1 && hc <= 8, "hc_post: unsupported hc ", hc);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, hc_post_kernel, grid_for(n * dim, 256), 256, 0, y, post, comb, n, hc, dim, X, round_out);
}

void hc_stream_mean(DeviceContext& ctx, const float* X, int64_t n, int hc, int64_t dim, float* out, int64_t stride) {
  HS_CHECK(hc >= 1 && dim > 0 && stride >= dim, "hc_stream_mean: hc ", hc, ", dim ", dim, ", stride ", stride);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, hc_stream_mean_kernel, grid_for(n * dim, 256), 256, 0, X, n, hc, dim, out, stride);
}

bool hc_post_pre_norm_fits(DeviceContext& ctx, int hc, int64_t dim, int64_t n) {
  if (hc != 4 || n <= 0 || n > kHcClusterMaxTokens || dim % 4 != 0 || dim > kHcFuseMaxRow) return false;
  const bool wide = hc_wide_cluster<false, true>(ctx);
  const int64_t ranks = wide ? 16 : 8;
  if ((dim + ranks - 1) / ranks > kHcFuseMaxShare) return false;  // a block's share of X and of u
  // One cluster per row, all at once: past that the launch runs in waves of the longer kernel,
  // which costs more than the three ops (on an H100, n = 8 took 35 us against their 23, about
  // twice n = 1's 17.6: two waves; docs/performance.md).
  const void* k = wide ? reinterpret_cast<const void*>(hc_cluster_kernel<false, true, 16, 256>)
                       : reinterpret_cast<const void*>(hc_cluster_kernel<false, true, 8, 512>);
  return n <= ctx.active_clusters(k, static_cast<int>(ranks), wide ? 256 : 512, wide);
}

void hc_post_pre_norm(DeviceContext& ctx, const HcParams& p, const float* y, const float* post_in, const float* comb_in,
                      bool post_round, float* X, int64_t n, float* u, float* post, float* comb, const float* norm_w,
                      float eps, Bf16Round r, float* xn, float* xq) {
  HS_CHECK(hc_post_pre_norm_fits(ctx, p.hc, p.dim, n), "hc_post_pre_norm: no fused form for hc ", p.hc, ", dim ",
           p.dim, ", ", n, " tokens");
  HS_CHECK(xq != xn, "hc_post_pre_norm: the FP8 copy must not overwrite the normed rows");
  DeviceGuard g(ctx.device());
  HcFuse f;
  f.X = X;
  f.y = y;
  f.post_in = post_in;
  f.comb_in = comb_in;
  f.post_round = post_round;
  f.norm_w = norm_w;
  f.eps = eps;
  f.round_in = r.in;
  f.round_out = r.out;
  f.xn = xn;
  f.xq = xq;
  launch_hc_cluster<false, true>(ctx, p, X, n, u, post, comb, f);
}

}  // namespace hs::cuda
