// The model-numerics round trips (quant_sim_cuda.h), bit-exact with kernels/cpu/quant_sim.cpp.
// Per element every step is the CPU's own IEEE operation (quant_sim.cuh); the block amax is a
// max, exact in any order; the Hadamard butterflies run in the CPU's stage order, each output
// the same a + b or a - b of the same two operands, so the parallel transform is exact too.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_sim.cuh"
#include "kernels/cuda/quant_sim_cuda.h"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

unsigned warp_grid(int64_t warps) { return grid_for(warps, kWarpsPerBlock); }

__global__ void round_bf16_kernel(float* x, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = bf16_round(x[i]);
}

// FP8 round trip in blocks of `block` (<= 128) over the first `channels` of each row (rows
// `stride` apart), then bf16 when bf16_after; the tail [channels, stride) only gets the bf16.
// One warp per segment of a row: segments 0..nblk-1 are the quantisation blocks, the rest
// 128-wide pieces of the tail (bf16_after only). Lane l holds elements l, l+32, l+64, l+96.
// src: where the rows are read (x itself in place; act_quant_fp8 out of place).
__global__ void fp8_blocks_kernel(float* x, const float* src, int64_t rows, int64_t stride, int64_t channels,
                                  int block, int64_t nblk, int64_t segs, bool bf16_after, bool bf16_before) {
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t total = rows * segs;
  const int64_t step = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t w = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; w < total; w += step) {
    const int64_t r = w / segs, sg = w - r * segs;
    float* v = x + r * stride;
    const float* in = src + r * stride;
    if (sg < nblk) {
      const int64_t b0 = sg * block;
      fp8_block_warp(v, in, b0, min64(channels, b0 + block), bf16_before, bf16_after);
    } else {
      const int64_t c0 = channels + (sg - nblk) * 128;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int64_t i = c0 + lane + 32 * k;
        if (i < stride) v[i] = bf16_round(in[i]);
      }
    }
  }
}

void fp8_blocks(DeviceContext& ctx, float* x, const float* src, int64_t rows, int64_t stride, int64_t channels,
                int block, bool bf16_after, bool bf16_before = false) {
  HS_CHECK(block > 0 && block <= 128, "internal: FP8 round-trip blocks of at most 128, got ", block);
  const int64_t nblk = (channels + block - 1) / block;
  const int64_t tail = bf16_after ? (stride - channels + 127) / 128 : 0;
  const int64_t segs = nblk + tail;
  if (rows <= 0 || segs <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, fp8_blocks_kernel, warp_grid(rows * segs), kThreads, 0, x, src, rows, stride, channels, block,
                                                                           nblk, segs, bf16_after, bf16_before);
}

// Indexer FP4 simulation, one warp per row of d = 32 * E: lane l holds elements l + 32k. The
// butterflies of stage h < 32 pair lanes l and l ^ h (shuffles), those of h >= 32 registers k
// and k ^ (h / 32); the FP4 32-blocks are the registers k of all lanes.
template <int E>
__global__ void indexer_fp4_warp_kernel(float* x, int64_t rows, float scale) {
  pdl_enter();
  constexpr int d = 32 * E;
  const int lane = threadIdx.x & 31;
  const int64_t step = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; r < rows; r += step) {
    float* p = x + r * d;
    float v[E];
#pragma unroll
    for (int k = 0; k < E; ++k) v[k] = p[lane + 32 * k];
#pragma unroll
    for (int h = 1; h < 32; h <<= 1) {
      const bool upper = (lane & h) != 0;
#pragma unroll
      for (int k = 0; k < E; ++k) {
        const float t = __shfl_xor_sync(kFullMask, v[k], h);
        v[k] = upper ? __fsub_rn(t, v[k]) : __fadd_rn(v[k], t);  // lower: a + b; upper: a - b
      }
    }
#pragma unroll
    for (int hk = 1; hk < E; hk <<= 1)
#pragma unroll
      for (int k = 0; k < E; ++k)
        if ((k & hk) == 0) {
          const float a = v[k], b = v[k + hk];
          v[k] = __fadd_rn(a, b);
          v[k + hk] = __fsub_rn(a, b);
        }
#pragma unroll
    for (int k = 0; k < E; ++k) {
      const float h = bf16_round(__fmul_rn(v[k], scale));
      const float s = block_scale(warp_amax(amax_step(kFp4AmaxFloor, h)), 6.0f);
      p[lane + 32 * k] = bf16_round(fp4_sim(h, s));
    }
  }
}

// Any power-of-two d (below 32 or above 1024): one thread per row, the CPU's loops in place.
__global__ void indexer_fp4_row_kernel(float* x, int64_t rows, int64_t d, float scale) {
  pdl_enter();
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float* v = x + r * d;
    for (int64_t h = 1; h < d; h *= 2)
      for (int64_t i = 0; i < d; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = __fadd_rn(a, b);
          v[j + h] = __fsub_rn(a, b);
        }
    for (int64_t i = 0; i < d; ++i) v[i] = bf16_round(__fmul_rn(v[i], scale));
    for (int64_t b = 0; b < d; b += 32) {
      const int64_t e = min64(d, b + 32);
      float amax = kFp4AmaxFloor;
      for (int64_t i = b; i < e; ++i) amax = amax_step(amax, v[i]);
      const float s = block_scale(amax, 6.0f);
      for (int64_t i = b; i < e; ++i) v[i] = bf16_round(fp4_sim(v[i], s));
    }
  }
}

}  // namespace

void round_bf16(DeviceContext& ctx, float* x, int64_t n) {
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, round_bf16_kernel, grid_for(n, kThreads), kThreads, 0, x, n);
}

void act_quant_fp8(DeviceContext& ctx, float* x, int64_t rows, int64_t cols) {
  HS_CHECK(rows >= 0 && cols >= 0, "act_quant_fp8: bad shape ", rows, "x", cols);
  fp8_blocks(ctx, x, x, rows, cols, cols, 128, false);
}

void act_quant_fp8(DeviceContext& ctx, float* dst, const float* src, int64_t rows, int64_t cols, bool round_in) {
  HS_CHECK(rows >= 0 && cols >= 0, "act_quant_fp8: bad shape ", rows, "x", cols);
  fp8_blocks(ctx, dst, src, rows, cols, cols, 128, false, round_in);
}

void kv_fp8_sim(DeviceContext& ctx, float* x, int64_t rows, int64_t head_dim, int64_t channels) {
  HS_CHECK(rows >= 0 && head_dim >= 0 && channels >= 0 && channels <= head_dim, "kv_fp8_sim: bad shape ", rows, "x",
           head_dim, " with ", channels, " FP8 channels");
  fp8_blocks(ctx, x, x, rows, head_dim, channels, 64, true);
}

void indexer_fp4_sim(DeviceContext& ctx, float* x, int64_t rows, int64_t d) {
  HS_CHECK(d > 0 && (d & (d - 1)) == 0, "Hadamard rotation needs a power-of-two width, got ", d);
  if (rows <= 0) return;
  // The CPU's scale expression, evaluated on the host as the CPU does.
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  DeviceGuard g(ctx.device());
  const unsigned grid = warp_grid(rows);
  switch (d) {
    case 32: launch(ctx, indexer_fp4_warp_kernel<1>, grid, kThreads, 0, x, rows, scale); break;
    case 64: launch(ctx, indexer_fp4_warp_kernel<2>, grid, kThreads, 0, x, rows, scale); break;
    case 128: launch(ctx, indexer_fp4_warp_kernel<4>, grid, kThreads, 0, x, rows, scale); break;
    case 256: launch(ctx, indexer_fp4_warp_kernel<8>, grid, kThreads, 0, x, rows, scale); break;
    case 512: launch(ctx, indexer_fp4_warp_kernel<16>, grid, kThreads, 0, x, rows, scale); break;
    case 1024: launch(ctx, indexer_fp4_warp_kernel<32>, grid, kThreads, 0, x, rows, scale); break;
    default: launch(ctx, indexer_fp4_row_kernel, grid_for(rows, 64), 64, 0, x, rows, d, scale); break;
  }
  HS_CUDA_CHECK_LAUNCH();
}

}  // namespace hs::cuda
