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

template <bool HEAD, int kHcCluster, int kHcClusterThreads>
__global__ void __launch_bounds__(kHcClusterThreads, 1) hc_cluster_kernel(HcParams p, const float* X, float* u,
                                                                         float* post, float* comb) {
  constexpr int HC = 4, MIX = HEAD ? HC : (2 + HC) * HC, NV = HEAD ? 8 : 32;  // v[MIX]: the sum of squares
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  __shared__ float part[NV];
  __shared__ float wred[kHcClusterThreads / 32][NV];
  __shared__ float m[NV];
  __shared__ float pre[HC];
  const int warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.y, D = p.dim, len4 = HC * D / 4;
  const float* x = X + t * HC * D;
  const float4* x4 = reinterpret_cast<const float4*>(x);
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

  // The collapse inputs of this thread's first channel, in flight with the projection.
  const int64_t cd = (D + kHcCluster - 1) / kHcCluster, d0 = rank * cd, d1 = min64(D, d0 + cd);
  const int64_t c_first = d0 + threadIdx.x;
  float xc[HC];
#pragma unroll
  for (int j = 0; j < HC; ++j) xc[j] = c_first < d1 ? __ldg(x + j * D + c_first) : 0.f;

  float v[NV];
#pragma unroll
  for (int r = 0; r < NV; ++r) v[r] = 0.f;
  auto column = [&](const float4 (&fv)[MIX], int64_t c) {
    const float4 xv = __ldg(x4 + c);
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
  cluster.sync();  // no block reads another's shared memory past this point
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
  for (int64_t c = c_first; c < d1; c += blockDim.x) {
    if (c != c_first) {
#pragma unroll
      for (int j = 0; j < HC; ++j) xc[j] = x[j * D + c];
    }
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j < HC; ++j) acc += pre[j] * xc[j];
    u[t * D + c] = acc;
  }
}

template <bool HEAD, int kHcCluster, int kHcClusterThreads>
void launch_hc_cluster(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* u, float* post,
                       float* comb) {
  launch_cluster(ctx, hc_cluster_kernel<HEAD, kHcCluster, kHcClusterThreads>, dim3(kHcCluster, static_cast<unsigned>(n)),
                 dim3(kHcClusterThreads), kHcCluster, p, X, u, post, comb);
}

template <bool HEAD>
void launch_hc_cluster(DeviceContext& ctx, const HcParams& p, const float* X, int64_t n, float* u, float* post,
                       float* comb) {
  const void* wide = reinterpret_cast<const void*>(hc_cluster_kernel<HEAD, 16, 256>);
  if (ctx.cluster_fits(wide, 16, 256, true)) launch_hc_cluster<HEAD, 16, 256>(ctx, p, X, n, u, post, comb);
  else launch_hc_cluster<HEAD, 8, 512>(ctx, p, X, n, u, post, comb);
}

void hc_collapse(DeviceContext& ctx, const HcParams& p, int mix, bool head, const float* X, int64_t n, float* u,
                 float* post, float* comb) {
  HS_CHECK(p.hc >= 1 && p.hc <= 8 && p.dim > 0 && (p.hc * p.dim) % 4 == 0, "hc: unsupported hc ", p.hc, " / dim ",
           p.dim);
  HS_CHECK(n <= 65535, "hc: at most 65535 tokens per call, got ", n);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  if (p.hc == 4 && n <= kHcClusterMaxTokens) {
    if (head) launch_hc_cluster<true>(ctx, p, X, n, u, post, comb);
    else launch_hc_cluster<false>(ctx, p, X, n, u, post, comb);
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
      float s = post[t * hc + k] * yv;
      for (int j = 0; j < hc; ++j) s += A[j * hc + k] * old[j];
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

}  // namespace hs::cuda
