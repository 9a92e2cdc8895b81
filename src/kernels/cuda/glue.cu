#include "kernels/cuda/glue.h"
#include "kernels/cuda/launch.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

__global__ void broadcast_kernel(const float* src, int64_t n, int hc, int64_t dim, float* dst) {
  pdl_enter();
  const int64_t total = n * hc * dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % dim, t = i / (hc * dim);
    dst[i] = src[t * dim + c];
  }
}

unsigned grid_for(int64_t n) {
  const int64_t g = (n + 255) / 256;
  return static_cast<unsigned>(g < 4096 ? (g > 0 ? g : 1) : 4096);
}

}  // namespace

void broadcast_streams(DeviceContext& ctx, const float* src, int64_t n, int hc, int64_t dim, float* dst) {
  DeviceGuard g(ctx.device());
  launch(ctx, broadcast_kernel, grid_for(n * hc * dim), 256, 0, src, n, hc, dim, dst);
}

}  // namespace hs::cuda
