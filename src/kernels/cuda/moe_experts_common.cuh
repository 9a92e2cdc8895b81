// Shared pieces of the routed-MoE kernels (moe_experts.cu, the decode kernels in
// moe_experts_decode.cuh): block shape, slot order, SwiGLU, the swizzled x staging, mma.sync.
// Included by moe_experts.cu only (one translation unit: internal linkage is intended).
#pragma once

#include <cuda_bf16.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma_bf16.cuh"
#include "kernels/cuda/moe_cuda.h"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/quant_sim.cuh"
#include "kernels/cuda/quant_sim_cuda.h"
#include "kernels/cuda/weights.cuh"

#define HS_UNROLL _Pragma("unroll")

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTok = 16;  // tokens per prefill work item

__device__ __forceinline__ int clamp_e(int e, int E) { return e < 0 ? 0 : (e >= E ? E - 1 : e); }

// Place of slot j among a token's k slots, ordered by (expert id, slot).
__device__ __forceinline__ int slot_rank(const int32_t* it, int k, int j, int E) {
  const int e = clamp_e(it[j], E);
  int r = 0;
  for (int i = 0; i < k; ++i) r += clamp_e(it[i], E) < e || (clamp_e(it[i], E) == e && i < j);
  return r;
}

// cpu::swiglu_clamp of one element.
__device__ __forceinline__ float swiglu(float g, float u, float limit) {
  g = limit < g ? limit : g;
  u = u < -limit ? -limit : (limit < u ? limit : u);
  return g / (1.0f + expf(-g)) * u;
}

// n4 float4s of src into xs4, float4 i at i ^ ((i >> 3) & (Q - 1)) (conflict-free chunk reads);
// 4 loads per thread in flight (blocks of kThreads threads).
template <int Q>
__device__ __forceinline__ void stage_x(float4* xs4, const float* src, int64_t n4) {
  const float4* s4 = reinterpret_cast<const float4*>(src);
  for (int64_t i0 = threadIdx.x; i0 < n4; i0 += 4 * kThreads) {
    float4 v[4];
    HS_UNROLL for (int u = 0; u < 4; ++u) v[u] = i0 + u * kThreads < n4 ? s4[i0 + u * kThreads] : float4{};
    HS_UNROLL for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * kThreads;
      if (i < n4) xs4[i ^ ((i >> 3) & (Q - 1))] = v[u];
    }
  }
}

// 16 bytes at p of which only those below `end` are read (the rest are zero).
__device__ __noinline__ uint4 load_tail(const uint8_t* p, const uint8_t* end) {
  uint8_t v[16];
  HS_UNROLL for (int i = 0; i < 16; ++i) v[i] = p + i < end ? p[i] : 0;
  uint4 u;
  memcpy(&u, v, 16);
  return u;
}
__device__ __forceinline__ uint4 load_chunk(const uint8_t* p, const uint8_t* end) {
  return p + 16 <= end ? ld_stream16(p) : load_tail(p, end);
}
__device__ __forceinline__ void cp_async16(void* dst, const uint8_t* src, const uint8_t* end) {
  if (src + 16 > end) return void(*static_cast<uint4*>(dst) = load_tail(src, end));
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src));
}


// Exclusive scan of one int per thread over the block; *total = the block's sum.
__device__ int block_exscan(int v, int* ws, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int inc = v;
  HS_UNROLL for (int o = 1; o < 32; o <<= 1) {
    const int u = __shfl_up_sync(kFullMask, inc, o);
    if (lane >= o) inc += u;
  }
  __syncthreads();  // ws may still be read by a previous call
  if (lane == 31) ws[warp] = inc;
  __syncthreads();
  int before = 0, all = 0;
  for (int i = 0; i < nw; ++i) before += i < warp ? ws[i] : 0, all += ws[i];
  *total = all;
  return before + inc - v;
}

// One block of 1024 threads: counting sort of the n*k pairs by expert (perm: sorted position ->
// pair t*k+j, pos_of: pair -> position) and the work items {expert, first position, tokens, 0},
// at most tok tokens each (prefill: kTok; grouped decode: kBCols).
__global__ void __launch_bounds__(1024) moe_sort_kernel(const int32_t* idx, int nk, int E, int* perm, int* pos_of,
                                                        int4* items, int* n_items, int tok) {
  pdl_enter();
  __shared__ int cnt[kMoeMaxExperts], fill[kMoeMaxExperts], off[kMoeMaxExperts], ws[32];
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += blockDim.x) cnt[e] = fill[e] = 0;
  __syncthreads();
  for (int i = tid; i < nk; i += blockDim.x) atomicAdd(&cnt[clamp_e(idx[i], E)], 1);
  __syncthreads();
  const int c = tid < E ? cnt[tid] : 0, tiles = (c + tok - 1) / tok;
  int total_c, total_t, o = block_exscan(c, ws, &total_c), ot = block_exscan(tiles, ws, &total_t);
  if (tid < E) off[tid] = o;
  for (int j = 0; tid < E && j < tiles; ++j) items[ot + j] = make_int4(tid, o + j * tok, min(tok, c - j * tok), 0);
  if (tid == 0) *n_items = total_t;
  __syncthreads();
  for (int i = tid; i < nk; i += blockDim.x) {
    const int e = clamp_e(idx[i], E), p = off[e] + atomicAdd(&fill[e], 1);
    perm[p] = i;
    pos_of[i] = p;
  }
}

}  // namespace
}  // namespace hs::cuda
