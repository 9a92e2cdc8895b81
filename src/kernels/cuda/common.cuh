// Device-side helpers shared by the kernels in this folder (CUDA translation units only).
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <limits>

#include "kernels/cuda/device_context.h"
#include "kernels/cuda/launch.cuh"

namespace hs::cuda::detail {

constexpr unsigned kFullMask = 0xffffffffu;
// A constexpr variable (not the host function) is usable in device code.
constexpr float kInf = std::numeric_limits<float>::infinity();

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Block-wide sum/max with a fixed reduction order (so results are reproducible). `red` is
// shared scratch of at least 32 floats; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = lane < nw ? red[lane] : 0.0f;
  return warp_sum(s);
}
__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float s = lane < nw ? red[lane] : -kInf;
  return warp_max(s);
}

// acc + a . b over the 4 lanes of two float4s, in lane order.
__device__ __forceinline__ float fma4(const float4& a, const float4& b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}
__device__ __forceinline__ float fma4(const float (&a)[4], const float4& b, float acc) {
  return fma4(make_float4(a[0], a[1], a[2], a[3]), b, acc);
}
// Dot product of n4 float4s.
__device__ __forceinline__ float dot4(const float4* a, const float4* b, int64_t n4) {
  float d = 0.f;
  for (int64_t c = 0; c < n4; ++c) d = fma4(a[c], b[c], d);
  return d;
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) { return __uint_as_float(h << 16); }

__device__ __forceinline__ float f16_bits_to_f32(uint16_t h) {
  return __half2float(__ushort_as_half(h));
}

// E8M0 as DeepSeek's official scales: 2^(e-127); 0 -> 2^-127; 0xff -> NaN.
__device__ __forceinline__ float e8m0_to_f32(uint32_t e) {
  if (e == 0xffu) return __uint_as_float(0x7fc00000u);
  if (e == 0u) return __uint_as_float(0x00400000u);
  return __uint_as_float(e << 23);
}
// ggml's MXFP4 half scale 2^(e-128), built from bits as ggml does (e = 255 -> 2^127).
__device__ __forceinline__ float e8m0_half_to_f32(uint32_t e) {
  if (e < 2u) return __uint_as_float(e == 0u ? 0x00200000u : 0x00400000u);
  return __uint_as_float((e - 1u) << 23);
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

// Grid-size helper for 1-D elementwise kernels.
inline unsigned grid_for(int64_t n, int threads, int64_t cap = 65535LL * 16) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b);
}

}  // namespace hs::cuda::detail
