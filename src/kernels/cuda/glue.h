// Small data-movement kernels the engine's CUDA backend needs around the ops of ops_cuda.h.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_context.h"

namespace hs::cuda {

// dst[t, j, :] = src[t, :] for j < hc   (the embedding copied into every HC stream)
void broadcast_streams(DeviceContext& ctx, const float* src, int64_t n, int hc, int64_t dim, float* dst);

}  // namespace hs::cuda
