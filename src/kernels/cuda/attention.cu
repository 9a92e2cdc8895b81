// Compressor pooling, lightning-indexer scores, per-query top-k, and attention with a sink
// (flash-decoding: row splits computed by separate blocks, merged by a second kernel).
#include <climits>

#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/state_rows.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr float kNegInf = -kInf;

// ---- compressor pooling: one thread per (entry, channel)
__global__ void compress_pool_kernel(const float* kv, const float* gate, int slots, int64_t d, int64_t n_entries,
                                     float* out) {
  pdl_enter();
  const int64_t total = n_entries * d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t e = i / d, ch = i - e * d;
    const float* g = gate + e * slots * d + ch;
    const float* a = kv + e * slots * d + ch;
    float mx = kNegInf;
    for (int s = 0; s < slots; ++s) mx = fmaxf(mx, g[s * d]);
    float den = 0.f, num = 0.f;
    for (int s = 0; s < slots; ++s) {
      const float gs = g[s * d];
      if (gs == kNegInf) continue;  // absent slot: weight 0
      const float w = expf(gs - mx);
      den += w;
      num = fmaf(w, a[s * d], num);
    }
    out[i] = num / den;
  }
}

__device__ __forceinline__ int64_t n_visible(const int64_t* pos, int ratio, int64_t t, int64_t n) {
  if (!pos) return n;
  const int64_t v = (pos[t] + 1) / ratio;
  return v < 0 ? 0 : v > n ? n : v;
}

// ---- indexer scores. Block: 64 keys x all heads of one query; thread = (key, head group of 4).
constexpr int kIdxKeys = 64;
constexpr int kIdxThreads = 256;
constexpr int kIdxHeadGroups = kIdxThreads / kIdxKeys;

__global__ void __launch_bounds__(kIdxThreads) indexer_scores_kernel(const float* q, const float* w, int ih, int64_t id,
                                                                     KeySource keys, int64_t n_entries,
                                                                     const int64_t* pos, int ratio, float* score) {
  pdl_enter();
  extern __shared__ float smem[];
  const int64_t t = blockIdx.y;
  const int64_t k0 = static_cast<int64_t>(blockIdx.x) * kIdxKeys;
  const int32_t* table = nullptr;
  int64_t nv = n_visible(pos, ratio, t, n_entries);
  if (keys.table) {  // paged keys of query t's own sequence
    const int32_t slot = keys.slot[t];
    if (slot < 0) nv = 0;
    else table = keys.table + slot * keys.table_ld;
  }
  float* out = score + t * n_entries;
  if (k0 >= nv) {  // nothing visible in this tile
    for (int i = threadIdx.x; i < kIdxKeys; i += blockDim.x)
      if (k0 + i < n_entries) out[k0 + i] = kNegInf;
    return;
  }
  const int64_t kstride = id + 4;  // padded rows: conflict-free float4 reads across lanes
  float* qs = smem;                                   // [ih, id]
  float* ks = qs + ih * id;                           // [64, id + 4]
  float* ws = ks + kIdxKeys * kstride;                // [ih]
  float* part = ws + ih;                              // [head groups, 64]
  const float* qt = q + t * ih * id;
  for (int64_t i = threadIdx.x; i < ih * id / 4; i += blockDim.x)
    reinterpret_cast<float4*>(qs)[i] = reinterpret_cast<const float4*>(qt)[i];
  for (int i = threadIdx.x; i < ih; i += blockDim.x) ws[i] = w[t * ih + i];
  const int64_t id4 = id / 4;
  for (int64_t i = threadIdx.x; i < kIdxKeys * id4; i += blockDim.x) {
    const int64_t r = i / id4, c = i - r * id4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (k0 + r < nv) {
      const int64_t e = k0 + r;
      const uint8_t* row = table ? static_cast<const uint8_t*>(keys.base) +
                                       (static_cast<int64_t>(table[e / keys.rows_per_block]) * keys.rows_per_block +
                                        e % keys.rows_per_block) * keys.fmt.bytes
                                 : static_cast<const uint8_t*>(keys.base) + e * id * 4;
      v = table ? decode4(keys.fmt, row, static_cast<int>(c)) : reinterpret_cast<const float4*>(row)[c];
    }
    *reinterpret_cast<float4*>(ks + r * kstride + 4 * c) = v;
  }
  __syncthreads();

  const int kk = threadIdx.x % kIdxKeys, hg = threadIdx.x / kIdxKeys;
  const float sc = 1.0f / sqrtf(static_cast<float>(id));
  const float4* krow = reinterpret_cast<const float4*>(ks + kk * kstride);
  float s = 0.f;
  for (int h = hg; h < ih; h += kIdxHeadGroups) {
    const float d = dot4(reinterpret_cast<const float4*>(qs + h * id), krow, id4);
    s = fmaf(fmaxf(d, 0.f) * sc, ws[h], s);
  }
  part[hg * kIdxKeys + kk] = s;
  __syncthreads();
  if (threadIdx.x < kIdxKeys) {
    float v = 0.f;
    for (int g = 0; g < kIdxHeadGroups; ++g) v += part[g * kIdxKeys + threadIdx.x];
    const int64_t i = k0 + threadIdx.x;
    if (i < n_entries) out[i] = i < nv ? v : kNegInf;
  }
}

// ---- top-k by radix select. One block of 1024 threads per query row.
constexpr int kTopkThreads = 1024;

// Order-preserving float -> u32 (bigger key = bigger float); -0 and +0 map to one key.
__device__ __forceinline__ uint32_t float_key(float f) {
  if (f == 0.f) f = 0.f;
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block-wide exclusive prefix count of `flag`; returns the rank and sets *total.
__device__ __forceinline__ int block_rank(bool flag, int* warp_tot, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const unsigned b = __ballot_sync(kFullMask, flag);
  const int in_warp = __popc(b & ((1u << lane) - 1u));
  __syncthreads();
  if (lane == 0) warp_tot[warp] = __popc(b);
  __syncthreads();
  int before = 0, all = 0;
  for (int i = 0; i < nw; ++i) {
    const int c = warp_tot[i];
    if (i < warp) before += c;
    all += c;
  }
  *total = all;
  return before + in_warp;
}

__global__ void __launch_bounds__(kTopkThreads) topk_kernel(const float* score, int64_t ld, const int64_t* pos,
                                                            int ratio, int k, int32_t* out) {
  pdl_enter();
  __shared__ uint32_t sel_key[kTopkMax];
  __shared__ int32_t sel_idx[kTopkMax];
  __shared__ int hist[256];
  __shared__ int warp_tot[32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining, s_count;
  const int64_t t = blockIdx.x;
  const float* sc = score + t * ld;
  const int64_t nv = n_visible(pos, ratio, t, ld);
  const int kk = static_cast<int>(min64(k, nv));
  int32_t* o = out + t * k;
  for (int i = kk + threadIdx.x; i < k; i += blockDim.x) o[i] = -1;
  if (kk == 0) return;

  if (kk == nv) {  // every visible entry is picked (contexts up to k * ratio): only the order is left
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      sel_key[i] = float_key(sc[i]);
      sel_idx[i] = static_cast<int32_t>(i);
    }
  } else {  // radix select of the kk-th largest key, 8 bits a pass, then the keys above it and the ties
    if (threadIdx.x == 0) {
      s_prefix = 0;
      s_remaining = kk;
      s_count = 0;
    }
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
        const uint32_t key = float_key(sc[i]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (threadIdx.x < 32) {  // the bin holding the rem-th largest key, counting from bin 255 down
        const int lane = threadIdx.x, rem = s_remaining;
        int c[8], own = 0;  // this lane's bins 8 lane .. 8 lane + 7
#pragma unroll
        for (int j = 0; j < 8; ++j) own += (c[j] = hist[8 * lane + j]);
        int suf = own;  // keys in this lane's bins and every bin above them
#pragma unroll
        for (int dl = 1; dl < 32; dl <<= 1) {
          const int v = __shfl_down_sync(kFullMask, suf, dl);
          if (lane + dl < 32) suf += v;
        }
        int cum = suf - own;
        if (cum < rem && rem <= suf) {  // exactly one lane
          for (int j = 7; j >= 0; --j) {
            if (cum + c[j] >= rem) {
              s_prefix = prefix | (static_cast<uint32_t>(8 * lane + j) << shift);
              s_remaining = rem - cum;
              break;
            }
            cum += c[j];
          }
        }
      }
      mask |= 255u << shift;
      __syncthreads();
    }
    const uint32_t thr = s_prefix;      // key of the kk-th largest score
    const int ties = s_remaining;       // how many entries equal to thr are taken (lowest indices)
    const int n_gt = kk - ties;
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) {
      const uint32_t key = float_key(sc[i]);
      if (key > thr) {
        const int slot = atomicAdd(&s_count, 1);
        sel_key[slot] = key;
        sel_idx[slot] = static_cast<int32_t>(i);
      }
    }
    int taken = 0;
    for (int64_t base = 0; base < nv && taken < ties; base += blockDim.x) {
      const int64_t i = base + threadIdx.x;
      const bool flag = i < nv && float_key(sc[i]) == thr;
      int total = 0;
      const int rank = block_rank(flag, warp_tot, &total);
      if (flag && taken + rank < ties) {
        sel_key[n_gt + taken + rank] = thr;
        sel_idx[n_gt + taken + rank] = static_cast<int32_t>(i);
      }
      taken += total;
    }
  }
  __syncthreads();
  // Bitonic sort of the kk picks by (key desc, index asc), padded to a power of two.
  int P = 1;
  while (P < kk) P <<= 1;
  for (int i = kk + threadIdx.x; i < P; i += blockDim.x) {
    sel_key[i] = 0;
    sel_idx[i] = INT_MAX;
  }
  __syncthreads();
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < P; i += blockDim.x) {
        const int j = i ^ stride;
        if (j > i) {
          const uint32_t ki = sel_key[i], kj = sel_key[j];
          const int32_t ii = sel_idx[i], ij = sel_idx[j];
          const bool i_first = ki > kj || (ki == kj && ii < ij);  // i precedes j in the final order
          const bool up = (i & size) == 0;
          if (up ? !i_first : i_first) {
            sel_key[i] = kj;
            sel_key[j] = ki;
            sel_idx[i] = ij;
            sel_idx[j] = ii;
          }
        }
      }
      __syncthreads();
    }
  }
  for (int i = threadIdx.x; i < kk; i += blockDim.x) o[i] = sel_idx[i];
}

// ---- attention with a sink, split over rows.
constexpr int kAttnThreads = 256;
constexpr int kAttnHeads = 8;    // heads per block (one warp each in the logit phase)
constexpr int kAttnTile = 32;    // rows per tile (one lane each in the logit phase)
constexpr int kAttnMaxHd = 512;
constexpr int kAttnItems = kAttnHeads * kAttnMaxHd / 4 / kAttnThreads;  // float4 accumulators per thread

struct AttnArgs {
  const float* q;
  AttnRows rows;
  int64_t heads, hd;
  float scale;
  int rows_per_split, n_splits;
  float* partial;  // [nq, n_splits, heads, hd + 2]: m, l, then the unnormalised output
};

__global__ void __launch_bounds__(kAttnThreads) attn_split_kernel(AttnArgs a) {
  pdl_enter();
  extern __shared__ float smem[];
  const int64_t hd = a.hd, hd4 = hd / 4, kstride = hd + 4;
  float* qs = smem;                              // [8, hd]
  float* ks = qs + kAttnHeads * hd;              // [32, hd + 4]
  float* ps = ks + kAttnTile * kstride;          // [8, 32]
  float* alpha = ps + kAttnHeads * kAttnTile;    // [8]
  const int64_t t = blockIdx.z;
  const int split = blockIdx.x;
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kAttnHeads;
  const int nh = static_cast<int>(min64(kAttnHeads, a.heads - h0));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  const int64_t n_rows = a.rows.n_rows ? a.rows.n_rows[t] : a.rows.rows_ld;
  const int64_t r_begin = static_cast<int64_t>(split) * a.rows_per_split;
  const int64_t r_end = min64(n_rows, r_begin + a.rows_per_split);
  // The splits are sized by the row capacity (the host does not know a step's row counts); a
  // split past this query's rows writes nothing, and attn_combine_kernel reads only the splits
  // that hold rows (an empty split's partial was m = -inf, which the merge skipped anyway).
  if (r_begin >= n_rows && split > 0) return;
  const int32_t* rl = a.rows.rows + t * a.rows.rows_ld;

  for (int64_t i = threadIdx.x; i < kAttnHeads * hd4; i += blockDim.x) {
    const int64_t h = i / hd4;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (h < nh) v = reinterpret_cast<const float4*>(a.q + (t * a.heads + h0 + h) * hd)[i - h * hd4];
    reinterpret_cast<float4*>(qs)[i] = v;
  }
  // This thread's output items: float4 k of its accumulators is channels 4c..4c+3 of head h.
  auto for_items = [&](auto&& fn) {
#pragma unroll
    for (int k = 0; k < kAttnItems; ++k) {
      const int64_t item = threadIdx.x + static_cast<int64_t>(k) * kAttnThreads;
      const int64_t h = item / hd4, c = item - h * hd4;
      if (item < kAttnHeads * hd4 && h < nh) fn(k, h, c);
    }
  };
  float m_run = kNegInf, l_run = 0.f;  // per warp (= head), identical on all lanes
  float4 acc[kAttnItems];
#pragma unroll
  for (int k = 0; k < kAttnItems; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int64_t j0 = r_begin; j0 < r_end; j0 += kAttnTile) {
    __syncthreads();  // previous tile fully consumed (and qs written on the first pass)
    for (int64_t i = threadIdx.x; i < kAttnTile * hd4; i += blockDim.x) {
      const int64_t r = i / hd4, c = i - r * hd4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j0 + r < r_end) {
        const int32_t ri = rl[j0 + r];
        const int pool = ri >> kAttnPoolShift;
        const int64_t idx = ri & kAttnRowMask;
        if (pool == 0) {
          v = reinterpret_cast<const float4*>(a.rows.kv + idx * hd)[c];
        } else {
          const RowFormat& f = pool == 1 ? a.rows.fmt1 : a.rows.fmt2;
          const uint8_t* base = static_cast<const uint8_t*>(pool == 1 ? a.rows.kv1 : a.rows.kv2);
          v = decode4(f, base + idx * f.bytes, static_cast<int>(c));
        }
      }
      *reinterpret_cast<float4*>(ks + r * kstride + 4 * c) = v;
    }
    __syncthreads();
    if (warp < nh) {
      const float d = dot4(reinterpret_cast<const float4*>(qs + warp * hd),
                           reinterpret_cast<const float4*>(ks + lane * kstride), hd4);
      const float logit = (j0 + lane < r_end) ? d * a.scale : kNegInf;
      const float m_new = fmaxf(m_run, warp_max(logit));
      const float p = logit == kNegInf ? 0.f : expf(logit - m_new);
      const float al = m_run == kNegInf ? 0.f : expf(m_run - m_new);
      l_run = l_run * al + warp_sum(p);
      m_run = m_new;
      ps[warp * kAttnTile + lane] = p;
      if (lane == 0) alpha[warp] = al;
    }
    __syncthreads();
    for_items([&](int k, int64_t h, int64_t c) {
      const float al = alpha[h];
      float4 o = acc[k];
      o.x *= al;
      o.y *= al;
      o.z *= al;
      o.w *= al;
      const float* pr = ps + h * kAttnTile;
      for (int r = 0; r < kAttnTile; ++r) {
        const float pv = pr[r];
        const float4 v = *reinterpret_cast<const float4*>(ks + r * kstride + 4 * c);
        o.x = fmaf(pv, v.x, o.x);
        o.y = fmaf(pv, v.y, o.y);
        o.z = fmaf(pv, v.z, o.z);
        o.w = fmaf(pv, v.w, o.w);
      }
      acc[k] = o;
    });
  }
  // Partial results of this split.
  const int64_t pstride = hd + 2;
  float* part = a.partial + ((t * a.n_splits + split) * a.heads + h0) * pstride;
  if (warp < nh && lane == 0) {
    part[warp * pstride] = m_run;
    part[warp * pstride + 1] = l_run;
  }
  for_items([&](int k, int64_t h, int64_t c) {
    float* o = part + h * pstride + 2 + 4 * c;
    o[0] = acc[k].x;
    o[1] = acc[k].y;
    o[2] = acc[k].z;
    o[3] = acc[k].w;
  });
}

// Merge the splits of one (query, head) with the sink: softmax over [scores, sink], sink dropped.
__global__ void attn_combine_kernel(const float* partial, int n_splits, int64_t heads, int64_t hd, const float* sinks,
                                    const int32_t* n_rows, int rows_per_split, float* out) {
  pdl_enter();
  const int64_t t = blockIdx.y, h = blockIdx.x;
  const int64_t pstride = hd + 2;
  const float* base = partial + (t * n_splits * heads + h) * pstride;
  const int64_t split_stride = heads * pstride;
  if (n_rows) {  // the splits attn_split_kernel wrote: those holding rows (split 0 always)
    const int64_t used = (static_cast<int64_t>(n_rows[t]) + rows_per_split - 1) / rows_per_split;
    n_splits = static_cast<int>(used < 1 ? 1 : used < n_splits ? used : n_splits);
  }
  float M = sinks[h];
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, base[s * split_stride]);
  float den = expf(sinks[h] - M);
  for (int s = 0; s < n_splits; ++s) {
    const float m = base[s * split_stride];
    if (m != kNegInf) den += base[s * split_stride + 1] * expf(m - M);
  }
  for (int64_t c = threadIdx.x; c < hd; c += blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < n_splits; ++s) {
      const float m = base[s * split_stride];
      if (m != kNegInf) v = fmaf(expf(m - M), base[s * split_stride + 2 + c], v);
    }
    out[(t * heads + h) * hd + c] = v / den;
  }
}

}  // namespace

void compress_pool(DeviceContext& ctx, const float* kv, const float* gate, int slots, int64_t d, int64_t n_entries,
                   float* out) {
  if (n_entries <= 0) return;
  HS_CHECK(slots >= 1 && d >= 1, "compress_pool: bad shape");
  DeviceGuard g(ctx.device());
  launch(ctx, compress_pool_kernel, grid_for(n_entries * d, 256), 256, 0, kv, gate, slots, d, n_entries, out);
}

void indexer_scores(DeviceContext& ctx, const float* q, const float* w, int64_t nq, int ih, int64_t id,
                    const KeySource& keys, int64_t n_entries, const int64_t* pos, int ratio, float* score) {
  if (nq <= 0 || n_entries <= 0) return;
  HS_CHECK(id % 4 == 0 && ih >= 1 && nq <= 65535, "indexer_scores: unsupported shape ih ", ih, " id ", id);
  HS_CHECK(!keys.table || (keys.slot && keys.fmt.d == id && keys.rows_per_block > 0),
           "indexer_scores: paged keys need slots and a row form of width ", id);
  HS_CHECK(!pos || ratio >= 1, "indexer_scores: ratio must be >= 1");
  DeviceGuard g(ctx.device());
  const size_t smem = sizeof(float) * static_cast<size_t>(ih * id + kIdxKeys * (id + 4) + ih + kIdxHeadGroups * kIdxKeys);
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(indexer_scores_kernel), smem);
  const dim3 grid(static_cast<unsigned>((n_entries + kIdxKeys - 1) / kIdxKeys), static_cast<unsigned>(nq));
  launch(ctx, indexer_scores_kernel, grid, kIdxThreads, smem, q, w, ih, id, keys, n_entries, pos, ratio, score);
}

void topk(DeviceContext& ctx, const float* score, int64_t nq, int64_t ld, const int64_t* pos, int ratio, int k,
          int32_t* out) {
  if (nq <= 0 || k <= 0) return;
  HS_CHECK(k <= kTopkMax, "topk: k ", k, " above ", kTopkMax);
  HS_CHECK(ld <= 0x7fffffff, "topk: rows longer than 2^31 entries");
  HS_CHECK(!pos || ratio >= 1, "topk: ratio must be >= 1");
  DeviceGuard g(ctx.device());
  launch(ctx, topk_kernel, static_cast<unsigned>(nq), kTopkThreads, 0, score, ld, pos, ratio, k, out);
}

void attention_sink(DeviceContext& ctx, const float* q, int64_t nq, int64_t heads, int64_t hd, const AttnRows& rows,
                    const float* sinks, float scale, float* out) {
  if (nq <= 0 || heads <= 0) return;
  HS_CHECK(hd % 4 == 0 && hd >= 4 && hd <= kAttnMaxHd, "attention_sink: head dim ", hd, " unsupported");
  HS_CHECK(rows.rows_ld >= 0 && nq <= 65535, "attention_sink: bad row list");
  DeviceGuard g(ctx.device());
  const int64_t R = rows.rows_ld > 0 ? rows.rows_ld : 1;
  // Enough blocks to fill the GPU about four times over: decode (one query) splits its rows
  // into tiles of 32 over many blocks; prefill has blocks enough from its queries alone.
  const int64_t groups = nq * ((heads + kAttnHeads - 1) / kAttnHeads);
  const int64_t want = (4 * ctx.sm_count() + groups - 1) / groups;
  int n_splits = static_cast<int>(std::min<int64_t>((R + kAttnTile - 1) / kAttnTile, std::max<int64_t>(want, 1)));
  n_splits = n_splits < 1 ? 1 : n_splits > 512 ? 512 : n_splits;
  int rps = static_cast<int>((R + n_splits - 1) / n_splits);
  rps = (rps + kAttnTile - 1) / kAttnTile * kAttnTile;
  n_splits = static_cast<int>((R + rps - 1) / rps);
  auto lease = ctx.scratch(static_cast<size_t>(nq) * n_splits * heads * (hd + 2) * sizeof(float));
  AttnArgs a{q, rows, heads, hd, scale, rps, n_splits, lease.as<float>()};
  const size_t smem = sizeof(float) * static_cast<size_t>(kAttnHeads * hd + kAttnTile * (hd + 4) +
                                                          kAttnHeads * kAttnTile + kAttnHeads);
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(attn_split_kernel), smem);
  const dim3 grid(static_cast<unsigned>(n_splits), static_cast<unsigned>((heads + kAttnHeads - 1) / kAttnHeads),
                  static_cast<unsigned>(nq));
  launch(ctx, attn_split_kernel, grid, kAttnThreads, smem, a);
  launch(ctx, attn_combine_kernel, dim3(static_cast<unsigned>(heads), static_cast<unsigned>(nq)), 128, 0, a.partial,
         n_splits, heads, hd, sinks, rows.n_rows, rps, out);
}

}  // namespace hs::cuda
