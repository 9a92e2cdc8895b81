// MoE routing (sqrt-softplus scores, bias for selection only, hash rows) and token sampling
// (greedy, temperature, top-k, min-p, top-p with a caller-supplied uniform number).
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kRouteThreads = 256;
constexpr int kRouteMaxExperts = 1024;
constexpr int kRouteMaxK = 32;
constexpr int kSampleThreads = 1024;

struct ArgMax {
  float v;
  int i;
};
// a precedes b: larger value, then lower index. NaN never wins against a number.
__device__ __forceinline__ bool better(const ArgMax& a, const ArgMax& b) {
  if (a.i < 0) return false;
  if (b.i < 0) return true;
  return a.v > b.v || (a.v == b.v && a.i < b.i) || (isnan(b.v) && !isnan(a.v));
}
__device__ __forceinline__ ArgMax warp_argmax(ArgMax a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    ArgMax b{__shfl_xor_sync(kFullMask, a.v, o), __shfl_xor_sync(kFullMask, a.i, o)};
    if (better(b, a)) a = b;
  }
  return a;
}
// Block-wide arg-max; `sv`/`si` are shared arrays of 32. Every thread gets the result.
__device__ ArgMax block_argmax(ArgMax a, float* sv, int* si) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  a = warp_argmax(a);
  __syncthreads();
  if (lane == 0) {
    sv[warp] = a.v;
    si[warp] = a.i;
  }
  __syncthreads();
  ArgMax b{lane < nw ? sv[lane] : 0.f, lane < nw ? si[lane] : -1};
  return warp_argmax(b);
}

__device__ __forceinline__ float softplus_dev(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

__global__ void __launch_bounds__(kRouteThreads) moe_route_kernel(const float* logits, int n_experts, int k,
                                                                  const float* bias, const int32_t* tid2eid,
                                                                  const int32_t* tokens, float route_scale,
                                                                  int32_t* idx, float* weight) {
  pdl_enter();
  __shared__ float s[kRouteMaxExperts];
  __shared__ float key[kRouteMaxExperts];
  __shared__ int chosen[kRouteMaxK];
  __shared__ float sv[32];
  __shared__ int si[32];
  const int64_t t = blockIdx.x;
  for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
    const float v = sqrtf(softplus_dev(logits[t * n_experts + e]));
    s[e] = v;
    key[e] = v + (bias ? bias[e] : 0.f);
  }
  __syncthreads();
  if (tid2eid) {
    for (int i = threadIdx.x; i < k; i += blockDim.x) chosen[i] = tid2eid[static_cast<int64_t>(tokens[t]) * k + i];
  } else {
    for (int i = 0; i < k; ++i) {
      ArgMax best{0.f, -1};
      for (int e = threadIdx.x; e < n_experts; e += blockDim.x) {
        const ArgMax c{key[e], e};
        if (better(c, best)) best = c;
      }
      best = block_argmax(best, sv, si);
      if (threadIdx.x == 0) {
        chosen[i] = best.i;
        key[best.i] = -kInf;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.f;
    for (int i = 0; i < k; ++i) sum += s[chosen[i]];
    for (int i = 0; i < k; ++i) {
      idx[t * k + i] = chosen[i];
      weight[t * k + i] = s[chosen[i]] / (sum + 1e-20f) * route_scale;
    }
  }
}

// ---- sampling

__global__ void __launch_bounds__(kSampleThreads) argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
  pdl_enter();
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* l = logits + blockIdx.x * vocab;
  ArgMax best{0.f, -1};
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const ArgMax c{l[i], static_cast<int>(i)};
    if (better(c, best)) best = c;
  }
  best = block_argmax(best, sv, si);
  if (threadIdx.x == 0) out[blockIdx.x] = best.i;
}

// Block-wide inclusive scan of floats (fixed order); `ws` shared of 32. Returns the prefix,
// *total gets the block total.
__device__ float block_scan(float v, float* ws, float* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += u;
  }
  __syncthreads();
  if (lane == 31) ws[warp] = v;
  __syncthreads();
  float before = 0.f, all = 0.f;
  for (int i = 0; i < nw; ++i) {
    if (i < warp) before += ws[i];
    all += ws[i];
  }
  *total = all;
  return before + v;
}

// Canonical float keys (as the top-k kernel uses), so -0 == +0 and the sort is stable by id.
__global__ void sort_keys_kernel(const float* logits, int64_t vocab, uint32_t* keys, int32_t* ids) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vocab;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float f = logits[i];
    if (f == 0.f) f = 0.f;
    const uint32_t u = __float_as_uint(f);
    keys[i] = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    ids[i] = static_cast<int32_t>(i);
  }
}

// Candidates cand[0..m) are token ids sorted by (logit desc, id asc).
__global__ void __launch_bounds__(kSampleThreads) sample_finish_kernel(const float* logits, const int32_t* cand,
                                                                       int64_t m, SamplingParams sp, float u,
                                                                       int32_t* out) {
  pdl_enter();
  __shared__ float ws[32];
  __shared__ float red[32];
  __shared__ int64_t s_cut;
  const float inv_t = 1.0f / sp.temperature;
  const float z0 = logits[cand[0]] * inv_t;
  auto e_of = [&](int64_t i) { return expf(logits[cand[i]] * inv_t - z0); };
  // min-p: e_i = p_i / p_0 is non-increasing, so the survivors are a prefix.
  int64_t m2 = m;
  if (sp.min_p > 0.f) {
    float cnt = 0.f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) cnt += e_of(i) >= sp.min_p ? 1.f : 0.f;
    m2 = static_cast<int64_t>(block_sum(cnt, red) + 0.5f);
    if (m2 < 1) m2 = 1;
  }
  // top-p over the survivors: shortest prefix with mass >= top_p of their total.
  float z2 = 0.f;
  for (int64_t i = threadIdx.x; i < m2; i += blockDim.x) z2 += e_of(i);
  z2 = block_sum(z2, red);
  int64_t m3 = m2;
  float z3 = z2;
  if (sp.top_p < 1.0f) {
    const float target = sp.top_p * z2;
    if (threadIdx.x == 0) s_cut = m2;
    float run = 0.f;
    for (int64_t b = 0; b < m2; b += blockDim.x) {
      const int64_t i = b + threadIdx.x;
      float tot = 0.f;
      const float c = run + block_scan(i < m2 ? e_of(i) : 0.f, ws, &tot);
      // Prefix sums only grow, so the smallest i reaching the target is the cut.
      if (i < m2 && c >= target)
        atomicMin(reinterpret_cast<unsigned long long*>(&s_cut), static_cast<unsigned long long>(i + 1));
      run += tot;
      __syncthreads();
      if (s_cut < m2) break;
    }
    __syncthreads();
    m3 = s_cut;
    float z = 0.f;
    for (int64_t i = threadIdx.x; i < m3; i += blockDim.x) z += e_of(i);
    z3 = block_sum(z, red);
  }
  // Draw: the first candidate whose cumulative mass exceeds u * z3.
  const float target = u * z3;
  if (threadIdx.x == 0) s_cut = m3 - 1;
  __syncthreads();
  float run = 0.f;
  for (int64_t b = 0; b < m3; b += blockDim.x) {
    const int64_t i = b + threadIdx.x;
    float tot = 0.f;
    const float e = i < m3 ? e_of(i) : 0.f;
    const float c = run + block_scan(e, ws, &tot);
    if (i < m3 && c > target)
      atomicMin(reinterpret_cast<unsigned long long*>(&s_cut), static_cast<unsigned long long>(i));
    run += tot;
    __syncthreads();
    if (s_cut < m3 - 1) break;
  }
  __syncthreads();
  if (threadIdx.x == 0) out[0] = cand[s_cut];
}

}  // namespace

void moe_route(DeviceContext& ctx, const float* logits, int64_t n, int n_experts, int k, const float* bias,
               const int32_t* tid2eid, const int32_t* tokens, float route_scale, int32_t* idx, float* weight) {
  if (n <= 0) return;
  HS_CHECK(n_experts >= 1 && n_experts <= kRouteMaxExperts && k >= 1 && k <= kRouteMaxK && k <= n_experts,
           "moe_route: unsupported experts ", n_experts, " / k ", k);
  HS_CHECK(!tid2eid || tokens, "moe_route: hash routing needs the token ids");
  DeviceGuard g(ctx.device());
  launch(ctx, moe_route_kernel, static_cast<unsigned>(n), kRouteThreads, 0, logits, n_experts, k, bias, tid2eid,
                                                                                 tokens, route_scale, idx, weight);
}

namespace {
// Row r's logit i becomes -inf unless bit i of bits[r] is set (a constrained request's mask).
__global__ void mask_tokens_kernel(float* logits, int64_t vocab, const uint64_t* bits, int64_t words) {
  pdl_enter();
  const int64_t r = blockIdx.y;
  float* row = logits + r * vocab;
  const uint64_t* b = bits + r * words;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < vocab;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (!((b[i >> 6] >> (i & 63)) & 1u)) row[i] = -kInf;
}
}  // namespace

void mask_tokens(DeviceContext& ctx, float* logits, int64_t rows, int64_t vocab, const uint64_t* bits) {
  if (rows <= 0) return;
  HS_CHECK(rows <= 65535, "mask_tokens: too many rows");
  DeviceGuard g(ctx.device());
  const dim3 grid(std::min<unsigned>(static_cast<unsigned>((vocab + 255) / 256), 128u), static_cast<unsigned>(rows));
  launch(ctx, mask_tokens_kernel, grid, 256, 0, logits, vocab, bits, (vocab + 63) / 64);
}

void sample(DeviceContext& ctx, const float* logits, int64_t rows, int64_t vocab, const SamplingParams& sp,
            const std::vector<float>& uniform, int32_t* out) {
  if (rows <= 0) return;
  HS_CHECK(vocab >= 1 && vocab <= 0x7fffffff, "sample: bad vocabulary size ", vocab);
  DeviceGuard g(ctx.device());
  if (sp.temperature <= 0.f || sp.top_k == 1) {
    launch(ctx, argmax_kernel, static_cast<unsigned>(rows), kSampleThreads, 0, logits, vocab, out);
    return;
  }
  HS_CHECK(static_cast<int64_t>(uniform.size()) >= rows, "sample: need one uniform number per row");
  HS_CHECK(sp.top_k >= 0 && sp.top_p > 0.f && sp.min_p >= 0.f && sp.min_p <= 1.f, "sample: bad parameters");
  const int64_t m = sp.top_k > 0 ? std::min<int64_t>(sp.top_k, vocab) : vocab;
  if (m <= kTopkMax) {
    auto lease = ctx.scratch(static_cast<size_t>(rows * m) * sizeof(int32_t));
    int32_t* cand = lease.as<int32_t>();
    topk(ctx, logits, rows, vocab, nullptr, 1, static_cast<int>(m), cand);
    for (int64_t r = 0; r < rows; ++r) {
      launch(ctx, sample_finish_kernel, 1, kSampleThreads, 0, logits + r * vocab, cand + r * m, m, sp,
                                                                   uniform[r], out + r);
    }
    return;
  }
  // Full stable radix sort of (canonical key, id), descending.
  const int nv = static_cast<int>(vocab);
  size_t temp_bytes = 0;
  HS_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                                          static_cast<uint32_t*>(nullptr),
                                                          static_cast<const int32_t*>(nullptr),
                                                          static_cast<int32_t*>(nullptr), nv, 0, 32, ctx.stream()));
  const size_t arr = (static_cast<size_t>(vocab) * 4 + 255) & ~size_t{255};
  auto lease = ctx.scratch(4 * arr + temp_bytes);
  uint32_t* keys = lease.as<uint32_t>(0);
  uint32_t* keys_out = lease.as<uint32_t>(arr);
  int32_t* ids = lease.as<int32_t>(2 * arr);
  int32_t* ids_out = lease.as<int32_t>(3 * arr);
  void* temp = lease.as<char>(4 * arr);
  for (int64_t r = 0; r < rows; ++r) {
    launch(ctx, sort_keys_kernel, grid_for(vocab, 256), 256, 0, logits + r * vocab, vocab, keys, ids);
    size_t tb = temp_bytes;
    HS_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(temp, tb, keys, keys_out, ids, ids_out, nv, 0, 32,
                                                            ctx.stream()));
    launch(ctx, sample_finish_kernel, 1, kSampleThreads, 0, logits + r * vocab, ids_out, m, sp, uniform[r],
                                                                 out + r);
  }
}

}  // namespace hs::cuda
