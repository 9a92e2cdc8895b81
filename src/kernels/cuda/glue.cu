#include "kernels/cuda/glue.h"

namespace hs::cuda {

namespace {

__global__ void broadcast_kernel(const float* src, int64_t n, int hc, int64_t dim, float* dst) {
  const int64_t total = n * hc * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % dim, t = i / (hc * dim);
    dst[i] = src[t * dim + c];
  }
}

__global__ void gather_kernel(const float* src, const int32_t* idx, int64_t m, int64_t dim, float* dst) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m * dim;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[static_cast<int64_t>(idx[i / dim]) * dim + i % dim];
}

__global__ void scatter_add_kernel(const float* src, const int32_t* idx, const float* w, int64_t m, int64_t dim,
                                   float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < m * dim;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / dim;
    y[static_cast<int64_t>(idx[r]) * dim + i % dim] += w ? w[r] * src[i] : src[i];
  }
}

__global__ void scale_rows_kernel(float* x, const float* w, int64_t rows, int64_t dim) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * dim;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= w[i / dim];
}

unsigned grid_for(int64_t n) {
  const int64_t g = (n + 255) / 256;
  return static_cast<unsigned>(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

}  // namespace

void broadcast_streams(DeviceContext& ctx, const float* src, int64_t n, int hc, int64_t dim, float* dst) {
  DeviceGuard g(ctx.device());
  broadcast_kernel<<<grid_for(n * hc * dim), 256, 0, ctx.stream()>>>(src, n, hc, dim, dst);
  HS_CUDA_CHECK_LAUNCH();
}

void gather_rows(DeviceContext& ctx, const float* src, const int32_t* idx, int64_t m, int64_t dim, float* dst) {
  DeviceGuard g(ctx.device());
  gather_kernel<<<grid_for(m * dim), 256, 0, ctx.stream()>>>(src, idx, m, dim, dst);
  HS_CUDA_CHECK_LAUNCH();
}

void scatter_add_rows(DeviceContext& ctx, const float* src, const int32_t* idx, const float* w, int64_t m,
                      int64_t dim, float* y) {
  DeviceGuard g(ctx.device());
  scatter_add_kernel<<<grid_for(m * dim), 256, 0, ctx.stream()>>>(src, idx, w, m, dim, y);
  HS_CUDA_CHECK_LAUNCH();
}

void scale_rows(DeviceContext& ctx, float* x, const float* w, int64_t rows, int64_t dim) {
  if (rows <= 0 || dim <= 0) return;
  DeviceGuard g(ctx.device());
  scale_rows_kernel<<<grid_for(rows * dim), 256, 0, ctx.stream()>>>(x, w, rows, dim);
  HS_CUDA_CHECK_LAUNCH();
}

}  // namespace hs::cuda
