// RMSNorm, interleaved RoPE and the small elementwise ops (add, scale, fill, clamped SwiGLU).
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/quant_sim.cuh"
#include "kernels/cuda/rmsnorm.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

// A thread's elements of a row held in registers: i = tid + k * blockDim for k < N, N slots
// picked at launch from d / threads (row_slots: up to 16, a whole row of 8192 floats at 512
// threads). A decode step's norms are one row in one block: the loads must be in flight together,
// not one per loop trip; prefill's many rows want no more slots than the row needs (occupancy).
constexpr int kMaxRowSlots = 16;

// 1 / RMS of row xr of d, one block per row: each thread's elements i = tid + k * blockDim
// summed in order (loaded N at a time into v, which keeps the last such chunk: the whole
// thread's share when d <= N * blockDim; any N gives the same order), then block_sum (its barriers: every thread's
// reads are done when it returns). round_in: the input rounded to bf16 first (v holds the
// rounded values; written back to xw when non-null).
template <int N>
__device__ __forceinline__ float row_inv_rms(const float* xr, int64_t d, float eps, bool round_in, float* xw,
                                             float* red, float (&v)[N]) {
  float ss = 0.f;
  const int64_t step = blockDim.x;
  for (int64_t i0 = threadIdx.x; i0 < d; i0 += N * step) {
    _Pragma("unroll") for (int k = 0; k < N; ++k) v[k] = i0 + k * step < d ? xr[i0 + k * step] : 0.f;
    _Pragma("unroll") for (int k = 0; k < N; ++k) {
      const int64_t i = i0 + k * step;
      if (i >= d) break;
      if (round_in) {
        v[k] = bf16_round(v[k]);
        if (xw) xw[i] = v[k];
      }
      ss = fmaf(v[k], v[k], ss);
    }
  }
  ss = block_sum(ss, red);
  return 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
}

__device__ __forceinline__ float norm_elem(const float* xr, const float* w, int64_t i, float inv, bool round_in,
                                           bool round_out) {
  return norm_val(xr[i], w ? w[i] : 1.0f, inv, round_in, round_out);
}

// Position of row t: pos[t] + p0, or p0 + t * stride when pos is null.
__device__ __forceinline__ float rope_position(const int64_t* pos, int64_t p0, int64_t stride, int64_t t) {
  return static_cast<float>(pos ? pos[t] + p0 : p0 + t * stride);
}

// One block per row; the sum of squares is reduced in a fixed order. y may alias x.
// xw (non-null: BF16 rounding of the input, = x) gets the rounded input written back; round_out
// rounds y. Each thread reads and writes only its own elements, so the write-back is safe.
// yq (non-null): after a barrier, y's FP8 round trip in 128-blocks (act_quant_fp8's, one warp per
// block: the same bits as that op run on y) into yq, which may be y.
template <int N>
__global__ void rmsnorm_kernel(const float* x, const float* w, int64_t d, float eps, float* y, float* xw,
                               bool round_out, float* yq) {
  // PDL: before the wait only the norm's weights are read (weights are never written in a step).
  const bool in_regs = d <= N * static_cast<int64_t>(blockDim.x);  // the thread's share fits v
  float wv[N];
  _Pragma("unroll") for (int k = 0; k < N; ++k) {
    const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
    wv[k] = in_regs && w && i < d ? w[i] : 1.0f;
  }
  pdl_enter();
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float v[N];
  const float inv = row_inv_rms(xr, d, eps, xw != nullptr, xw ? xw + blockIdx.x * d : nullptr, red, v);
  if (in_regs) {
    _Pragma("unroll") for (int k = 0; k < N; ++k) {
      const int64_t i = threadIdx.x + k * static_cast<int64_t>(blockDim.x);
      if (i < d) yr[i] = norm_val(v[k], wv[k], inv, xw != nullptr, round_out);
    }
  } else {
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = norm_elem(xr, w, i, inv, xw != nullptr, round_out);
  }
  if (!yq) return;
  __syncthreads();  // the row of y is written (and visible to the block)
  for (int64_t b0 = (threadIdx.x >> 5) * 128; b0 < d; b0 += (blockDim.x >> 5) * 128)
    fp8_block_warp(yq + blockIdx.x * d, yr, b0, min64(d, b0 + 128), false, false);
}

// f(std::integral_constant<int, N>) with N the register slots of `rows` rows of d over `threads`:
// the power of two that holds a thread's share, at most kMaxRowSlots (past that, chunks of 16);
// 1 (a load per loop trip, few registers) when the rows alone fill the GPU twice over, as in
// prefill, where occupancy hides the loads' latency and 16 slots cost it (115 registers a thread).
template <class F>
void with_row_slots(const DeviceContext& ctx, int64_t rows, int64_t d, int threads, F&& f) {
  const int64_t s = rows >= 2 * static_cast<int64_t>(ctx.sm_count()) ? 1 : (d + threads - 1) / threads;
  if (s <= 1) f(std::integral_constant<int, 1>{});
  else if (s <= 2) f(std::integral_constant<int, 2>{});
  else if (s <= 4) f(std::integral_constant<int, 4>{});
  else if (s <= 8) f(std::integral_constant<int, 8>{});
  else f(std::integral_constant<int, kMaxRowSlots>{});
}

// Rotation of the pair (a.x, a.y) by angle pos * inv_freq (rope_kernel's and rope_bf16_kernel's).
__device__ __forceinline__ float2 rope_pair(float2 a, float pos, float inv_freq, float sign) {
  float s, c;
  sincosf(pos * inv_freq, &s, &c);
  s *= sign;
  return make_float2(a.x * c - a.y * s, a.y * c + a.x * s);
}

// rmsnorm of each head row of x [rows = n * heads, head_dim] (weights w or none), then RoPE
// (forward) of its trailing rope_dim channels, in place, with the rounding points of the
// unfused sequence rmsnorm_bf16(norm_r) -> rope_bf16(rope_r): one block per row, the sum of
// squares split as rmsnorm_kernel's (same threads per row, same order), then each thread one
// pair at a time (the same products and rotation): the same bits.
template <int N>
__global__ void rmsnorm_rope_kernel(float* x, const float* w, int64_t heads, int64_t head_dim, float eps,
                                    int rope_dim, const int64_t* pos, int64_t p0, int64_t stride,
                                    const float* inv_freq, bool norm_in, bool norm_out, bool rope_out) {
  pdl_enter();
  __shared__ float red[32];
  float* xr = x + blockIdx.x * head_dim;
  // (row_inv_rms's barrier: every read of the row is done before the writes below)
  float v[N];
  const float inv = row_inv_rms(xr, head_dim, eps, norm_in, nullptr, red, v);
  const int64_t t = blockIdx.x / heads, first = (head_dim - rope_dim) / 2;
  const float p = rope_position(pos, p0, stride, t);
  for (int64_t pr = threadIdx.x; pr < head_dim / 2; pr += blockDim.x) {
    float2 a = make_float2(norm_elem(xr, w, 2 * pr, inv, norm_in, norm_out),
                           norm_elem(xr, w, 2 * pr + 1, inv, norm_in, norm_out));
    if (pr >= first) a = rope_pair(a, p, inv_freq[pr - first], 1.0f);
    if (rope_out) a = make_float2(bf16_round(a.x), bf16_round(a.y));
    reinterpret_cast<float2*>(xr)[pr] = a;
  }
}

// RoPE with BF16 rounding over whole heads: one thread per channel pair of [n, heads, head_dim];
// pairs in the trailing rope_dim channels rotate (positions as rope_kernel), all are rounded
// before (round_in) and after (round_out).
__global__ void rope_bf16_kernel(float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim,
                                 const int64_t* pos, int64_t p0, int64_t stride, const float* inv_freq, float sign,
                                 bool round_in, bool round_out) {
  pdl_enter();
  const int64_t half = head_dim / 2, first = (head_dim - rope_dim) / 2;
  const int64_t total = n * heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pr = i % half, th = i / half, t = th / heads;
    float2* v = reinterpret_cast<float2*>(x + th * head_dim + 2 * pr);
    float2 a = *v;
    if (round_in) a = make_float2(bf16_round(a.x), bf16_round(a.y));
    if (pr >= first) a = rope_pair(a, rope_position(pos, p0, stride, t), inv_freq[pr - first], sign);
    if (round_out) a = make_float2(bf16_round(a.x), bf16_round(a.y));
    *v = a;
  }
}

// One thread per (token, head, pair) of the trailing rope_dim channels (positions: rope_position).
__global__ void rope_kernel(float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, const int64_t* pos,
                            int64_t p0, int64_t stride, const float* inv_freq, float sign) {
  pdl_enter();
  const int half = rope_dim / 2;
  const int64_t total = n * heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int p = static_cast<int>(i % half);
    const int64_t th = i / half;  // t * heads + h
    const int64_t t = th / heads;
    float2* v = reinterpret_cast<float2*>(x + th * head_dim + (head_dim - rope_dim) + 2 * p);
    *v = rope_pair(*v, rope_position(pos, p0, stride, t), inv_freq[p], sign);
  }
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

__global__ void scale_kernel(float* x, int64_t n, float s, bool round_in, bool round_out) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = (round_in ? bf16_round(x[i]) : x[i]) * s;
    x[i] = round_out ? bf16_round(v) : v;
  }
}

__global__ void fill_kernel(float* x, int64_t n, float v) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] = v;
}

__global__ void swiglu_kernel(const float* g, const float* u, int64_t n, float limit, float* h) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gg = fminf(g[i], limit);
    const float uu = fminf(fmaxf(u[i], -limit), limit);
    h[i] = gg / (1.0f + expf(-gg)) * uu;
  }
}

}  // namespace

void rmsnorm(DeviceContext& ctx, const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  if (rows <= 0) return;
  HS_CHECK(rows <= 0x7fffffff && d > 0, "rmsnorm: bad shape ", rows, "x", d);
  DeviceGuard g(ctx.device());
  const int threads = rmsnorm_threads(d);
  with_row_slots(ctx, rows, d, threads, [&](auto n) {
    launch(ctx, rmsnorm_kernel<decltype(n)::value>, static_cast<unsigned>(rows), threads, 0, x, w, d, eps, y,
           nullptr, false, nullptr);
  });
}

void rmsnorm_bf16(DeviceContext& ctx, float* x, const float* w, int64_t rows, int64_t d, float eps, float* y,
                  Bf16Round r, float* fp8_out) {
  if (rows <= 0) return;
  HS_CHECK(rows <= 0x7fffffff && d > 0, "rmsnorm: bad shape ", rows, "x", d);
  DeviceGuard g(ctx.device());
  const int threads = rmsnorm_threads(d);
  with_row_slots(ctx, rows, d, threads, [&](auto n) {
    launch(ctx, rmsnorm_kernel<decltype(n)::value>, static_cast<unsigned>(rows), threads, 0, x, w, d, eps, y,
           r.in ? x : nullptr, r.out, fp8_out);
  });
}

void rope_bf16(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim,
               const int64_t* pos, int64_t p0, int64_t stride, const float* inv_freq, int sign, Bf16Round r) {
  if (n <= 0 || heads <= 0) return;
  HS_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim && head_dim % 2 == 0,
           "rope: bad rope_dim ", rope_dim, " for head_dim ", head_dim);
  HS_CHECK(sign == 1 || sign == -1, "rope: sign must be +1 or -1");
  DeviceGuard g(ctx.device());
  const int64_t total = n * heads * (head_dim / 2);
  launch(ctx, rope_bf16_kernel, grid_for(total, 256), 256, 0, x, n, heads, head_dim, rope_dim, pos, p0, stride,
                                                                    inv_freq, static_cast<float>(sign), r.in, r.out);
}

void rmsnorm_rope(DeviceContext& ctx, float* x, const float* w, int64_t n, int64_t heads, int64_t head_dim, float eps,
                  Bf16Round norm_r, int rope_dim, const int64_t* pos, int64_t p0, int64_t stride,
                  const float* inv_freq, Bf16Round rope_r) {
  if (n <= 0 || heads <= 0) return;
  HS_CHECK(n * heads <= 0x7fffffff && head_dim > 0 && head_dim % 2 == 0, "rmsnorm_rope: bad shape ", n, "x", heads,
           "x", head_dim);
  HS_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim, "rope: bad rope_dim ", rope_dim,
           " for head_dim ", head_dim);
  DeviceGuard g(ctx.device());
  const int threads = rmsnorm_threads(head_dim);
  with_row_slots(ctx, n * heads, head_dim, threads, [&](auto s) {
    launch(ctx, rmsnorm_rope_kernel<decltype(s)::value>, static_cast<unsigned>(n * heads), threads, 0, x, w, heads,
           head_dim, eps, rope_dim, pos, p0, stride, inv_freq, norm_r.in, norm_r.out || rope_r.in, rope_r.out);
  });
}

void rope(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, const int64_t* pos,
          const float* inv_freq, int sign) {
  HS_CHECK(pos, "rope: no positions");
  rope_affine(ctx, x, n, heads, head_dim, rope_dim, pos, 0, 0, inv_freq, sign);
}

void rope_affine(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, int64_t p0,
                 int64_t stride, const float* inv_freq, int sign) {
  rope_affine(ctx, x, n, heads, head_dim, rope_dim, nullptr, p0, stride, inv_freq, sign);
}

void rope_affine(DeviceContext& ctx, float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim,
                 const int64_t* pos, int64_t p0, int64_t stride, const float* inv_freq, int sign) {
  if (n <= 0 || heads <= 0) return;
  HS_CHECK(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim && head_dim % 2 == 0,
           "rope: bad rope_dim ", rope_dim, " for head_dim ", head_dim);
  HS_CHECK(sign == 1 || sign == -1, "rope: sign must be +1 or -1");
  DeviceGuard g(ctx.device());
  const int64_t total = n * heads * (rope_dim / 2);
  launch(ctx, rope_kernel, grid_for(total, 256), 256, 0, x, n, heads, head_dim, rope_dim, pos, p0, stride,
                                                               inv_freq, static_cast<float>(sign));
}

void add(DeviceContext& ctx, float* y, const float* x, int64_t n) {
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, add_kernel, grid_for(n, 256), 256, 0, y, x, n);
}

void scale(DeviceContext& ctx, float* x, int64_t n, float s) {
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, scale_kernel, grid_for(n, 256), 256, 0, x, n, s, false, false);
}

void scale_bf16(DeviceContext& ctx, float* x, int64_t n, float s, Bf16Round r) {
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, scale_kernel, grid_for(n, 256), 256, 0, x, n, s, r.in, r.out);
}

void fill(DeviceContext& ctx, float* x, int64_t n, float v) {
  if (n <= 0) return;
  DeviceGuard g(ctx.device());
  launch(ctx, fill_kernel, grid_for(n, 256), 256, 0, x, n, v);
}

void swiglu_clamp(DeviceContext& ctx, const float* g, const float* u, int64_t n, float limit, float* h) {
  if (n <= 0) return;
  DeviceGuard guard(ctx.device());
  launch(ctx, swiglu_kernel, grid_for(n, 256), 256, 0, g, u, n, limit, h);
}

}  // namespace hs::cuda
