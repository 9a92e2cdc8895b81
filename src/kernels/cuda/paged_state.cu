// The state ops over the paged pool (paged_state_cuda.h). Their arithmetic is that of the
// separate kernels they replace (compress_pool, rmsnorm, rope in attention.cu / norm_rope.cu),
// in the same order, so the entries come out as before.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/paged_state_cuda.h"
#include "kernels/cuda/rmsnorm.cuh"
#include "kernels/cuda/state_rows.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr float kNegInf = -kInf;

// One warp per row; the row is staged in shared memory (the FP4 form rotates it in place).
__global__ void kv_store_kernel(DevRows r, PageTables t, PagedRows kv, const float* x) {
  pdl_enter();
  extern __shared__ float stage[];
  const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * warps + warp;
  if (row >= r.n) return;
  const int32_t slot = r.slot[row];
  if (slot < 0) return;
  const int64_t p = r.pos[row];
  const int32_t b = t.swa[slot * t.max_pages + p / t.page];
  if (b < 0) return;  // a row no later query reads
  const int d = kv.fmt.d;
  float* v = stage + warp * d;
  for (int i = lane; i < d; i += 32) v[i] = x[row * d + i];
  __syncwarp();
  encode_row_warp(kv.fmt, v, kv.row(b, p % t.page));
}

struct CompressorArgs {
  DevRows r;
  PageTables t;
  CompressorPaged c;
  const float* a;
  const float* g;
  bool decode;
};

// One block per row. z: the pooled entry [d] in shared memory.
__global__ void compressor_kernel(CompressorArgs A) {
  pdl_enter();
  extern __shared__ float z[];
  __shared__ float red[32];
  const CompressorPaged& c = A.c;
  const int64_t row = blockIdx.x;
  const int32_t slot = A.r.slot[row];
  if (slot < 0) return;
  const int d = c.dst.fmt.d, r = c.ratio, co = c.coff;
  const int64_t width = static_cast<int64_t>(co) * d;
  const int64_t p = A.r.pos[row], r0 = A.r.row0[row], p0 = A.r.pos[r0];
  float* rk = c.ring_kv + static_cast<int64_t>(slot) * c.ring * width;
  float* rg = c.ring_gate + static_cast<int64_t>(slot) * c.ring * width;
  if (A.decode)  // one row per sequence: its row goes to the ring now (the reads below are of other slots)
    for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
      rk[(p % c.ring) * width + i] = A.a[row * width + i];
      rg[(p % c.ring) * width + i] = A.g[row * width + i];
    }
  if ((p + 1) % r != 0) return;
  const int64_t ie = (p + 1) / r - 1, first = ie * r;
  // Raw row of position q: this step's rows from a/g, earlier ones from the ring.
  auto A_row = [&](int64_t q) { return q >= p0 ? A.a + (r0 + q - p0) * width : rk + (q % c.ring) * width; };
  auto G_row = [&](int64_t q) { return q >= p0 ? A.g + (r0 + q - p0) * width : rg + (q % c.ring) * width; };
  const int slots = co * r;
  for (int ch = threadIdx.x; ch < d; ch += blockDim.x) {
    // Slot s: CSA's first r slots are the previous window's first half (absent for entry 0),
    // the last r this window's second half; HCA's r slots are this window.
    auto slot_value = [&](int s, float& kv, float& gate) {
      if (co == 2 && s < r) {
        if (ie == 0) {
          kv = 0.0f;
          gate = kNegInf;
          return;
        }
        const int64_t q = first - r + s;
        kv = A_row(q)[ch];
        gate = G_row(q)[ch] + c.ape[s * width + ch];
      } else {
        const int sl = co == 2 ? s - r : s;
        const int64_t off = co == 2 ? d + ch : ch;
        const int64_t q = first + sl;
        kv = A_row(q)[off];
        gate = G_row(q)[off] + c.ape[sl * width + off];
      }
    };
    float mx = kNegInf;
    for (int s = 0; s < slots; ++s) {
      float kv, gate;
      slot_value(s, kv, gate);
      mx = fmaxf(mx, gate);
    }
    float den = 0.f, num = 0.f;
    for (int s = 0; s < slots; ++s) {
      float kv, gate;
      slot_value(s, kv, gate);
      if (gate == kNegInf) continue;  // absent slot: weight 0
      const float w = expf(gate - mx);
      den += w;
      num = fmaf(w, kv, num);
    }
    z[ch] = num / den;
  }
  __syncthreads();
  // RMSNorm (BF16 before and after under model numerics), as rmsnorm_kernel.
  float ss = 0.f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    float v = z[i];
    if (c.model) v = bf16_round(v);
    ss = fmaf(v, v, ss);
  }
  ss = block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + c.eps);
  for (int i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = (c.model ? bf16_round(z[i]) : z[i]) * inv;
    const float o = c.norm[i] * v;
    z[i] = c.model ? bf16_round(o) : o;
  }
  __syncthreads();
  // RoPE on the tail at the window's first position, as rope_kernel.
  const int half = c.rope_dim / 2;
  for (int pr = threadIdx.x; pr < half; pr += blockDim.x) {
    const float ang = static_cast<float>(first) * c.inv_freq[pr];
    float s, cs;
    sincosf(ang, &s, &cs);
    float* v = z + (d - c.rope_dim) + 2 * pr;
    const float x0 = v[0], x1 = v[1];
    v[0] = x0 * cs - x1 * s;
    v[1] = x1 * cs + x0 * s;
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int32_t b = A.t.cmp[slot * A.t.max_pages + first / A.t.page];
  encode_row_warp(c.dst.fmt, z, c.dst.row(b, ie % c.dst.rows_per_block));
}

// The latest `ring` rows of each sequence of a multi-row step into its ring.
__global__ void ring_store_kernel(DevRows r, float* ring_kv, float* ring_gate, int32_t ring, int64_t width,
                                  const float* a, const float* g) {
  pdl_enter();
  const int64_t row = blockIdx.x;
  const int32_t slot = r.slot[row];
  if (slot < 0) return;
  const int64_t p = r.pos[row], r0 = r.row0[row];
  const int64_t end = r.pos[r0] + (r.row_end[row] - r0);
  if (p < end - ring) return;  // a later row of this step takes its ring row
  float* rk = ring_kv + (static_cast<int64_t>(slot) * ring + p % ring) * width;
  float* rg = ring_gate + (static_cast<int64_t>(slot) * ring + p % ring) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    rk[i] = a[row * width + i];
    rg[i] = g[row * width + i];
  }
}

__global__ void attention_rows_paged_kernel(DevRows r, PageTables t, int window, int ratio, int32_t epp,
                                            const int32_t* sel, int k, int32_t* rows, int32_t* n_rows, int64_t ld) {
  pdl_enter();
  const int64_t row = blockIdx.x;
  const int32_t slot = r.slot[row];
  if (slot < 0) {
    if (threadIdx.x == 0) n_rows[row] = 0;
    return;
  }
  const int64_t p = r.pos[row], r0 = r.row0[row], p0 = r.pos[r0];
  const int32_t* swa = t.swa + slot * t.max_pages;
  const int32_t* cmp = t.cmp + slot * t.max_pages;
  const int64_t cw = p + 1 < window ? p + 1 : window;
  const int64_t first = p - cw + 1;
  int32_t* out = rows + row * ld;
  for (int64_t j = threadIdx.x; j < cw; j += blockDim.x) {
    const int64_t s = first + j;
    out[j] = s >= p0 ? static_cast<int32_t>(r0 + s - p0)
                     : static_cast<int32_t>((1 << kAttnPoolShift) | (swa[s / t.page] * t.page + s % t.page));
  }
  auto entry = [&](int64_t e) {
    return static_cast<int32_t>((2 << kAttnPoolShift) | (cmp[e * ratio / t.page] * epp + e % epp));
  };
  int64_t nc = 0;
  if (ratio > 0) {
    if (sel) {
      const int32_t* st = sel + row * k;
      int valid = 0;
      for (int j = threadIdx.x; j < k; j += blockDim.x) {
        const int32_t e = st[j];
        if (e >= 0) out[cw + j] = entry(e);
        valid += e >= 0;
      }
      __shared__ int s_valid;
      if (threadIdx.x == 0) s_valid = 0;
      __syncthreads();
      atomicAdd(&s_valid, valid);
      __syncthreads();
      nc = s_valid;
    } else {
      const int64_t vis = (p + 1) / ratio;
      for (int64_t j = threadIdx.x; j < vis; j += blockDim.x) out[cw + j] = entry(j);
      nc = vis;
    }
  }
  if (threadIdx.x == 0) n_rows[row] = static_cast<int32_t>(cw + nc);
}

}  // namespace

void kv_store_paged(DeviceContext& ctx, const DevRows& rows, const PageTables& t, const PagedRows& kv, const float* x) {
  if (rows.n <= 0) return;
  HS_CHECK(kv.fmt.form != RowForm::Fp4Index || (kv.fmt.d & (kv.fmt.d - 1)) == 0,
           "kv_store_paged: FP4 rows need a power-of-two width");
  DeviceGuard g(ctx.device());
  constexpr int kWarps = 4;
  const size_t smem = static_cast<size_t>(kWarps) * kv.fmt.d * sizeof(float);
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(kv_store_kernel), smem);
  launch(ctx, kv_store_kernel, static_cast<unsigned>((rows.n + kWarps - 1) / kWarps), 32 * kWarps, smem, rows, t, kv, x);
}

void compressor_paged(DeviceContext& ctx, const DevRows& rows, const PageTables& t, const CompressorPaged& c,
                      const float* a, const float* g, bool decode) {
  if (rows.n <= 0) return;
  const int d = c.dst.fmt.d;
  HS_CHECK(c.ratio >= 1 && (c.coff == 1 || c.coff == 2) && d >= 1 && c.ring >= c.coff * c.ratio &&
               c.rope_dim % 2 == 0 && c.rope_dim <= d,
           "compressor_paged: bad shape (ratio ", c.ratio, ", coff ", c.coff, ", d ", d, ", ring ", c.ring, ")");
  HS_CHECK(c.dst.fmt.form != RowForm::Fp4Index || (d & (d - 1)) == 0, "compressor_paged: FP4 rows need a power-of-two width");
  HS_CHECK(rows.n <= 0x7fffffff, "compressor_paged: too many rows");
  DeviceGuard guard(ctx.device());
  // rmsnorm's block size for this width, so the norm's sum is reduced as before.
  const int threads = rmsnorm_threads(d);
  const size_t smem = static_cast<size_t>(d) * sizeof(float);
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(compressor_kernel), smem);
  launch(ctx, compressor_kernel, static_cast<unsigned>(rows.n), threads, smem, CompressorArgs{rows, t, c, a, g, decode});
  if (!decode) {
    launch(ctx, ring_store_kernel, static_cast<unsigned>(rows.n), 128, 0, rows, c.ring_kv, c.ring_gate, c.ring, static_cast<int64_t>(c.coff) * d, a, g);
  }
}

void attention_rows_paged(DeviceContext& ctx, const DevRows& r, const PageTables& t, int window, int ratio,
                          int32_t entries_per_page, const int32_t* sel, int k, int32_t* rows, int32_t* n_rows,
                          int64_t ld) {
  if (r.n <= 0) return;
  HS_CHECK(ld >= window + (ratio > 0 ? (sel ? k : 1) : 0), "attention_rows_paged: ld ", ld, " is too small");
  HS_CHECK(r.n <= 0x7fffffff, "attention_rows_paged: too many rows");
  DeviceGuard g(ctx.device());
  launch(ctx, attention_rows_paged_kernel, static_cast<unsigned>(r.n), 128, 0, r, t, window, ratio,
                                                                                     entries_per_page, sel, k, rows,
                                                                                     n_rows, ld);
}

}  // namespace hs::cuda
