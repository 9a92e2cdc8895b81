#include <algorithm>
#include <vector>

#include "kernels/cuda/ops_cuda.h"

namespace hs::cuda {

double measure_copy_gbs(DeviceContext& ctx, size_t bytes, int reps) {
  DeviceGuard guard(ctx.device());
  DeviceBuffer src = ctx.alloc(bytes), dst = ctx.alloc(bytes);
  ctx.fill_bytes(src.data(), 1, bytes);
  cudaEvent_t a = nullptr, b = nullptr;
  HS_CUDA_CHECK(cudaEventCreate(&a));
  HS_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  try {
    for (int i = 0; i < reps + 3; ++i) {  // 3 warm-up copies
      HS_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
      ctx.copy(dst.data(), src.data(), bytes);
      HS_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
      HS_CUDA_CHECK(cudaEventSynchronize(b));
      float x = 0;
      HS_CUDA_CHECK(cudaEventElapsedTime(&x, a, b));
      if (i >= 3) ms.push_back(x);
    }
  } catch (...) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    throw;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  const double med = ms[ms.size() / 2];
  return 2.0 * static_cast<double>(bytes) / (med * 1e-3) / 1e9;
}

}  // namespace hs::cuda
