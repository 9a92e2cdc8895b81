#include <algorithm>
#include <limits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/state_cuda.h"

namespace hs::cuda {

using namespace detail;

namespace {

// Row v of the virtual sequence [buffered rows | this chunk's rows], column c.
__device__ __forceinline__ float virtual_row(const float* buf, const float* chunk, int buf_n, int64_t width, int64_t v,
                                             int64_t c) {
  return v < buf_n ? buf[v * width + c] : chunk[(v - buf_n) * width + c];
}

__global__ void compressor_gather_kernel(CompressorBuffers st, int buf_n, bool has_prev, const float* a,
                                         const float* g, const float* ape, int64_t nw, float* kv_out, float* gate_out,
                                         float* prev_out) {
  const int r = st.ratio;
  const int64_t d = st.d, width = st.coff * d;
  const int slots = st.coff * r;
  const int64_t total = nw * slots * d;
  const float ninf = -INFINITY;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ch = i % d;
    const int s = static_cast<int>((i / d) % slots);
    const int64_t j = i / (d * slots);
    float kv, gate;
    if (st.coff == 2 && s < r) {  // the previous window's first half
      if (j == 0) {
        kv = has_prev ? st.prev_kv[s * d + ch] : 0.0f;
        gate = has_prev ? st.prev_gate[s * d + ch] : ninf;
      } else {
        const int64_t v = (j - 1) * r + s;
        kv = virtual_row(st.buf_kv, a, buf_n, width, v, ch);
        gate = virtual_row(st.buf_gate, g, buf_n, width, v, ch) + ape[s * width + ch];
      }
    } else {
      const int sl = st.coff == 2 ? s - r : s;
      const int64_t c = st.coff == 2 ? d + ch : ch;
      const int64_t v = j * r + sl;
      kv = virtual_row(st.buf_kv, a, buf_n, width, v, c);
      gate = virtual_row(st.buf_gate, g, buf_n, width, v, c) + ape[sl * width + c];
    }
    kv_out[i] = kv;
    gate_out[i] = gate;
  }
  if (st.coff == 2) {  // the last window's first half becomes the next overlap
    const int64_t total_prev = r * d;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total_prev;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const int64_t ch = i % d;
      const int s = static_cast<int>(i / d);
      const int64_t v = (nw - 1) * r + s;
      prev_out[i] = virtual_row(st.buf_kv, a, buf_n, width, v, ch);
      prev_out[total_prev + i] = virtual_row(st.buf_gate, g, buf_n, width, v, ch) + ape[s * width + ch];
    }
  }
}

// One block per query. With pos (device), the queries sit at pos[0] + t (a decode step's
// position read at run time, so one captured graph serves every step).
__global__ void attention_rows_kernel(const int64_t* pos, int64_t p0_arg, int window, int ratio, int64_t n_entries,
                                      const int32_t* sel, int k, int32_t* rows, int32_t* n_rows, int64_t rows_ld) {
  const int64_t t = blockIdx.x;
  const int64_t p0 = pos ? pos[0] : p0_arg;
  const int64_t p = p0 + t;
  const int64_t cw = p + 1 < window ? p + 1 : window;
  const int64_t first = p - cw + 1;
  int32_t* out = rows + t * rows_ld;
  for (int64_t j = threadIdx.x; j < cw; j += blockDim.x) {
    const int64_t s = first + j;
    out[j] = s >= p0 ? static_cast<int32_t>(s - p0) : static_cast<int32_t>((1 << kAttnPoolShift) | (s % window));
  }
  int64_t nc = 0;
  if (ratio > 0) {
    if (sel) {
      const int32_t* st = sel + t * k;
      int valid = 0;
      for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const int32_t e = st[j];
        if (e >= 0) out[cw + j] = (2 << kAttnPoolShift) | e;
        valid += e >= 0;
      }
      __shared__ int s_valid;  // sel, ratio are the same for the whole block: no divergent barrier
      if (threadIdx.x == 0) s_valid = 0;
      __syncthreads();
      atomicAdd(&s_valid, valid);
      __syncthreads();
      nc = s_valid;
    } else {
      const int64_t vis = min64(n_entries, (p + 1) / ratio);
      for (int64_t j = threadIdx.x; j < vis; j += blockDim.x) out[cw + j] = static_cast<int32_t>((2 << kAttnPoolShift) | j);
      nc = vis;
    }
  }
  if (threadIdx.x == 0) n_rows[t] = static_cast<int32_t>(cw + nc);
}

// One row per pair: dst[slot * width + c] = src[c], slot = ((pos[0] + add) / div) % mod.
__global__ void store_row_at_kernel(float* dst0, const float* src0, float* dst1, const float* src1, int64_t width,
                                    const int64_t* pos, int64_t add, int64_t div, int64_t mod) {
  const int64_t slot = ((pos[0] + add) / div) % mod;
  float* dst = blockIdx.y == 0 ? dst0 : dst1;
  const float* src = blockIdx.y == 0 ? src0 : src1;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < width;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[slot * width + c] = src[c];
}

}  // namespace

void store_row_at(DeviceContext& ctx, float* dst0, const float* src0, float* dst1, const float* src1, int64_t width,
                  const int64_t* pos, int64_t add, int64_t div, int64_t mod) {
  HS_CHECK(pos && dst0 && src0 && div >= 1 && mod >= 1 && width >= 1 && (!dst1) == (!src1),
           "store_row_at: bad arguments");
  DeviceGuard guard(ctx.device());
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((width + 255) / 256, 64)), dst1 ? 2u : 1u);
  store_row_at_kernel<<<grid, 256, 0, ctx.stream()>>>(dst0, src0, dst1, src1, width, pos, add, div, mod);
  HS_CUDA_CHECK_LAUNCH();
}

void compressor_gather(DeviceContext& ctx, const CompressorBuffers& st, int buf_n, bool has_prev, const float* a,
                       const float* g, int64_t n, const float* ape, int64_t nw, float* kv_out, float* gate_out,
                       float* prev_out) {
  if (nw <= 0) return;
  HS_CHECK(st.coff == 1 || st.coff == 2, "compressor_gather: coff must be 1 or 2");
  HS_CHECK(buf_n >= 0 && buf_n < st.ratio && nw * st.ratio <= buf_n + n, "compressor_gather: ", nw,
           " windows of ", st.ratio, " do not fit in ", buf_n, " buffered + ", n, " new rows");
  HS_CHECK(st.coff == 1 || prev_out, "compressor_gather: CSA needs prev_out");
  DeviceGuard guard(ctx.device());
  const int64_t total = std::max<int64_t>(nw * st.coff * st.ratio * st.d, st.ratio * st.d);
  compressor_gather_kernel<<<grid_for(total, 256), 256, 0, ctx.stream()>>>(st, buf_n, has_prev, a, g, ape, nw, kv_out,
                                                                           gate_out, prev_out);
  HS_CUDA_CHECK_LAUNCH();
}

int64_t attention_rows_ld(int64_t n, int64_t p0, int window, int ratio, int64_t n_entries, bool has_sel, int k) {
  int64_t ld = std::min<int64_t>(p0 + n, window);
  if (ratio > 0) ld += has_sel ? k : std::min<int64_t>(n_entries, (p0 + n) / ratio);
  return std::max<int64_t>(ld, 1);
}

void attention_rows(DeviceContext& ctx, int64_t n, int64_t p0, int window, int ratio, int64_t n_entries,
                    const int32_t* sel, int k, int32_t* rows, int32_t* n_rows, int64_t rows_ld, const int64_t* pos) {
  if (n <= 0) return;
  HS_CHECK(rows_ld >= attention_rows_ld(n, p0, window, ratio, n_entries, sel != nullptr, k),
           "attention_rows: rows_ld ", rows_ld, " is too small");
  HS_CHECK(n_entries <= kAttnRowMask && window <= kAttnRowMask, "attention_rows: too many rows for the pool index");
  DeviceGuard guard(ctx.device());
  attention_rows_kernel<<<static_cast<unsigned>(n), 128, 0, ctx.stream()>>>(pos, p0, window, ratio, n_entries, sel,
                                                                            k, rows, n_rows, rows_ld);
  HS_CUDA_CHECK_LAUNCH();
}

}  // namespace hs::cuda
