// Manifold-constrained hyper-connections (ds4-model-spec.md §4): hc_pre, hc_post, hc_head.
//
// hc_pre / hc_head run as two kernels. The first streams the mixing matrix fn [mix, hc*D]
// (1.5 MB for V4-Flash) in K-slices across many blocks and writes, per token and slice, the
// partial projections fn . v and the partial sum of squares. The second sums those partials in
// a fixed order, applies the RMS factor, sigmoid gates and (hc_pre) the 4x4 Sinkhorn in
// registers of one thread, then collapses the hc streams into u for its channel slice.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"

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

// Softmax over each row, then Sinkhorn normalisation (the CPU twin's order of operations).
// HC > 0: the width is a compile-time constant, so the matrix lives in registers and the 20
// dependent iterations are a short chain of independent divisions (one thread; ~1 us for
// hc 4, where the runtime-width loop over a local array took ~60 us). HC == 0: any width.
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

// head == false: hc_pre (pre, post, comb); head == true: hc_head (pre only).
__global__ void __launch_bounds__(kHcThreads) hc_finish_kernel(const float* partial, int nslices, int mix,
                                                               HcParams p, bool head, const float* X, float* u,
                                                               float* post, float* comb) {
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
  if (threadIdx.x == 0) {
    const float r = 1.0f / sqrtf(m[mix] / static_cast<float>(len) + p.norm_eps);
    for (int j = 0; j < hc; ++j) pre[j] = sigmoidf_(m[j] * r * p.scale[0] + p.base[j]) + p.hc_eps;
    if (!head && blockIdx.x == 0) {
      for (int j = 0; j < hc; ++j) post[t * hc + j] = 2.0f * sigmoidf_(m[hc + j] * r * p.scale[1] + p.base[hc + j]);
      if (hc == 4) comb_dev<4>(m, r, p, comb + t * hc * hc);
      else comb_dev<0>(m, r, p, comb + t * hc * hc);
    }
  }
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

void hc_collapse(DeviceContext& ctx, const HcParams& p, int mix, bool head, const float* X, int64_t n, float* u,
                 float* post, float* comb) {
  HS_CHECK(p.hc >= 1 && p.hc <= 8 && p.dim > 0 && (p.hc * p.dim) % 4 == 0, "hc: unsupported hc ", p.hc, " / dim ",
           p.dim);
  HS_CHECK(n <= 65535, "hc: at most 65535 tokens per call, got ", n);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  const int64_t len = p.hc * p.dim;
  const int nslices = static_cast<int>((len + kHcSlice - 1) / kHcSlice);
  auto lease = ctx.scratch(static_cast<size_t>(n) * nslices * (mix + 1) * sizeof(float));
  float* partial = lease.as<float>();
  hc_proj_kernel<<<dim3(nslices, static_cast<unsigned>(n)), kHcThreads, 0, ctx.stream()>>>(p.fn, X, len, mix,
                                                                                            partial);
  HS_CUDA_CHECK_LAUNCH();
  const unsigned cblocks = static_cast<unsigned>((p.dim + kHcCollapseChannels - 1) / kHcCollapseChannels);
  hc_finish_kernel<<<dim3(cblocks, static_cast<unsigned>(n)), kHcThreads, 0, ctx.stream()>>>(
      partial, nslices, mix, p, head, X, u, post, comb);
  HS_CUDA_CHECK_LAUNCH();
}

__global__ void hc_post_kernel(const float* y, const float* post, const float* comb, int64_t n, int hc, int64_t dim,
                               float* X) {
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
      x[k * dim + c] = s;
    }
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
             float* X) {
  HS_CHECK(hc >= 1 && hc <= 8, "hc_post: unsupported hc ", hc);
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  hc_post_kernel<<<grid_for(n * dim, 256), 256, 0, ctx.stream()>>>(y, post, comb, n, hc, dim, X);
  HS_CUDA_CHECK_LAUNCH();
}

}  // namespace hs::cuda
