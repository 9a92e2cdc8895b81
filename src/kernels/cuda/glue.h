// Small data-movement kernels the engine's CUDA backend needs around the ops of ops_cuda.h.
#pragma once
#include <cstdint>

#include "kernels/cuda/device_context.h"

namespace hs::cuda {

// dst[t, j, :] = src[t, :] for j < hc   (the embedding copied into every HC stream)
void broadcast_streams(DeviceContext& ctx, const float* src, int64_t n, int hc, int64_t dim, float* dst);
// dst[i, :] = src[idx[i], :]   (idx: device int32 [m])
void gather_rows(DeviceContext& ctx, const float* src, const int32_t* idx, int64_t m, int64_t dim, float* dst);
// y[idx[i], :] += w[i] * src[i, :]   (idx, w: device [m]; idx distinct within one call; w null: 1)
void scatter_add_rows(DeviceContext& ctx, const float* src, const int32_t* idx, const float* w, int64_t m,
                      int64_t dim, float* y);
// x[r, :] *= w[r]   (w: device [rows])
void scale_rows(DeviceContext& ctx, float* x, const float* w, int64_t rows, int64_t dim);

}  // namespace hs::cuda
