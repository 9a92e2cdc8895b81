// The generic path for GGUF block weights kept in their GGUF layout (WType::GGML_BLOCK): a
// weight-streaming matvec for n <= 8 columns and the dequantisation behind dequantize_rows and
// the tiled (cuBLAS) path for n > 8. Decoders: quant_decode.cuh.
//
// Work split. One warp owns one row at a time (persistent grid, rows strided over the warps).
// A row is walked in steps of 32 units of 32 elements, one unit per lane: a step covers 32
// consecutive blocks of a 32-element type or 4 super-blocks of a 256-element type. The step's
// bytes, contiguous in memory, are fetched as 16-byte chunks with coalesced streaming loads
// (one step ahead, in registers, while the current step decodes), committed to the warp's
// shared-memory staging buffer, and each lane decodes its unit from there (BlockIn: any
// alignment, blocks are 10..292 bytes). The matvec keeps x for all columns in shared memory
// (swizzled so a quarter-warp's float4 reads hit distinct banks), accumulates in f32 per lane
// and reduces across the warp with shuffles in a fixed order (results are reproducible).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/quant_decode.cuh"
#include "kernels/cuda/weights.cuh"

namespace hs::cuda::detail {

namespace {

constexpr int kGThreads = 256;
constexpr int kGWarps = kGThreads / 32;

template <GgmlType T>
struct StepGeo {
  using Tr = QTraits<T>;
  static constexpr int kUnits = Tr::kBlk / 32;               // units per block
  static constexpr int kBlocks = 32 / kUnits;                // blocks per step (one unit per lane)
  static constexpr int kStepBytes = kBlocks * Tr::kBytes;
  static constexpr int kChunks = (kStepBytes + 30) / 16;     // 16-byte chunks a step can touch
  static constexpr int kPerLane = (kChunks + 31) / 32;
  static constexpr int kStage = kPerLane * 32 * 16 + 16;     // staging bytes per warp (+ over-read pad)
};

// 16 bytes at p, of which only those inside [lo, hi) are read (the edges of a view whose ends
// are not 16-byte aligned; the rest stay zero).
__device__ __noinline__ uint4 load_edge(uintptr_t p, uintptr_t lo, uintptr_t hi) {
  uint8_t v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = (p + i >= lo && p + i < hi) ? *reinterpret_cast<const uint8_t*>(p + i) : 0;
  uint4 u;
  memcpy(&u, v, 16);
  return u;
}

// One warp's stream over steps of a block matrix: issue() loads the 16-byte chunks covering a
// step's bytes into registers, commit() stores them to the warp's staging buffer, where the
// step's first block starts at byte `head`.
template <GgmlType T>
struct WarpStream {
  using G = StepGeo<T>;
  uintptr_t lo_, hi_;  // the view's bytes: chunks reaching outside are loaded bytewise
  uint4 buf[G::kPerLane];
  int n16 = 0, head = 0;

  __device__ WarpStream(const uint8_t* base, int64_t bytes)
      : lo_(reinterpret_cast<uintptr_t>(base)), hi_(reinterpret_cast<uintptr_t>(base) + bytes) {}

  // Bytes [lo, hi) of the view.
  __device__ __forceinline__ void issue(int64_t lo, int64_t hi, int lane) {
    const uintptr_t a0 = (lo_ + lo) & ~uintptr_t{15}, a1 = (lo_ + hi + 15) & ~uintptr_t{15};
    n16 = static_cast<int>((a1 - a0) >> 4);
    head = static_cast<int>(lo_ + lo - a0);
#pragma unroll
    for (int k = 0; k < G::kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j < n16) {
        const uintptr_t p = a0 + 16 * static_cast<uintptr_t>(j);
        buf[k] = (p >= lo_ && p + 16 <= hi_) ? ld_stream16(reinterpret_cast<const void*>(p)) : load_edge(p, lo_, hi_);
      }
    }
  }
  __device__ __forceinline__ void commit(uint4* stage, int lane) const {
#pragma unroll
    for (int k = 0; k < G::kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j < n16) stage[j] = buf[k];
    }
  }
  // Starts bytes [lo, hi) of the view towards L2 (one 128-byte line per lane and pass).
  __device__ __forceinline__ void prefetch(int64_t lo, int64_t hi, int lane) const {
    for (int64_t o = lo + 128 * lane; o < hi; o += 128 * 32) prefetch_l2(reinterpret_cast<const void*>(lo_ + o));
  }
};

// The rows of one warp (first, first + stride, ... < n_rows; src_row(r) is its row in the
// view), step by step: every lane decodes its unit ui of the row into w[32] and calls
// unit_fn(r, ui, w); after a row's last step row_fn(r) runs on the whole warp. The next step's
// loads are in flight while a step decodes, and starting a row prefetches the rest of it to L2
// (prefetching the warp's next row as well measured 5-10% slower at wq_b). setup()
// is the block-wide staging (tables, x; it ends with __syncthreads and returns the tables): it
// runs once the first step's loads are issued, so the two overlap.
template <GgmlType T, typename SrcRow, typename Setup, typename UnitFn, typename RowFn>
__device__ __forceinline__ void walk_rows(const uint8_t* w, int64_t w_bytes, int64_t cols, int64_t first,
                                          int64_t stride, int64_t n_rows, SrcRow src_row, Setup setup,
                                          uint4* stage, UnitFn unit_fn, RowFn row_fn) {
  using Tr = QTraits<T>;
  using G = StepGeo<T>;
  const int lane = threadIdx.x & 31;
  const int64_t units = cols / 32, blocks_per_row = cols / Tr::kBlk, rb = blocks_per_row * Tr::kBytes;
  const int steps = static_cast<int>((units + 31) / 32);
  const uint32_t* stage32 = reinterpret_cast<const uint32_t*>(stage);
  WarpStream<T> ws(w, w_bytes);
  auto issue = [&](int64_t r, int s) {
    const int64_t row0 = src_row(r) * rb, b0 = static_cast<int64_t>(s) * G::kBlocks;
    const int64_t lo = row0 + b0 * Tr::kBytes, hi = row0 + min64(blocks_per_row, b0 + G::kBlocks) * Tr::kBytes;
    if (s == 0 && steps > 1) ws.prefetch(hi, row0 + rb, lane);  // the row's later steps, towards L2
    ws.issue(lo, hi, lane);
  };
  int64_t r = first;
  int s = 0;
  if (r < n_rows) issue(r, 0);
  const QTabs tabs = setup();  // every warp of the block, rows or not
  while (r < n_rows) {
    ws.commit(stage, lane);
    __syncwarp();
    const int head = ws.head, cs = s;
    const int64_t cr = r;
    if (++s == steps) {
      s = 0;
      r += stride;
    }
    if (r < n_rows) issue(r, s);  // in flight while this step decodes
    const int64_t ui = static_cast<int64_t>(cs) * 32 + lane;
    if (ui < units) {
      float v[32];
      QDecode<T>::unit(BlockIn{stage32, head + (lane / G::kUnits) * Tr::kBytes}, lane % G::kUnits, tabs, v);
      unit_fn(cr, ui, v);
    }
    if (cs == steps - 1) row_fn(cr);
    __syncwarp();  // the staging buffer is rewritten next
  }
}

struct GArgs {
  const uint8_t* w;
  int64_t w_bytes;  // the whole view
  const float* x;
  float* y;
  int64_t rows;     // rows per group
  int64_t cols;
  int64_t ldx, ldy;
  int64_t x_group;  // x offset between groups (floats)
  int ncols;        // valid columns (<= NC)
};

template <GgmlType T, int NC>
__global__ void __launch_bounds__(kGThreads) ggml_matvec_kernel(GArgs a) {
  pdl_enter();
  using G = StepGeo<T>;
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t group = blockIdx.y;
  float4* xs4 = reinterpret_cast<float4*>(smem + QTableLayout<T>::kBytes);
  const int64_t g4 = a.cols / 4;
  uint4* stage = reinterpret_cast<uint4*>(smem + QTableLayout<T>::kBytes + static_cast<int64_t>(NC) * a.cols * 4 +
                                          warp * G::kStage);
  auto setup = [&] {
    const QTabs tabs = stage_tables<T>(smem);
    // x -> shared memory, float4 group k of column j stored at k ^ ((k >> 3) & 7).
    const float* x = a.x + group * a.x_group;
    for (int64_t i = threadIdx.x; i < NC * g4; i += kGThreads) {
      const int j = static_cast<int>(i / g4);
      const int64_t k = i - j * g4;
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (j < a.ncols) v = *reinterpret_cast<const float4*>(x + j * a.ldx + 4 * k);
      xs4[j * g4 + (k ^ ((k >> 3) & 7))] = v;
    }
    __syncthreads();
    return tabs;
  };

  const int64_t row_base = group * a.rows;
  float* y = a.y + group * a.rows;
  float acc[NC];
#pragma unroll
  for (int j = 0; j < NC; ++j) acc[j] = 0.f;
  walk_rows<T>(
      a.w, a.w_bytes, a.cols, static_cast<int64_t>(blockIdx.x) * kGWarps + warp,
      static_cast<int64_t>(gridDim.x) * kGWarps, a.rows, [&](int64_t r) { return row_base + r; }, setup, stage,
      [&](int64_t, int64_t ui, const float (&w)[32]) {
#pragma unroll
        for (int p = 0; p < 8; ++p) {
          const int64_t phys = ui * 8 + (p ^ static_cast<int>(ui & 7));
          const float4 wv = make_float4(w[4 * p], w[4 * p + 1], w[4 * p + 2], w[4 * p + 3]);
#pragma unroll
          for (int j = 0; j < NC; ++j) acc[j] = fma4(wv, xs4[j * g4 + phys], acc[j]);
        }
      },
      [&](int64_t r) {
#pragma unroll
        for (int j = 0; j < NC; ++j) {
          const float v = warp_sum(acc[j]);
          if (lane == 0 && j < a.ncols) y[j * a.ldy + r] = v;
          acc[j] = 0.f;
        }
      });
}

template <typename OutT>
__device__ __forceinline__ void store32(OutT* o, const float (&w)[32]) {
  if constexpr (sizeof(OutT) == 4) {
#pragma unroll
    for (int p = 0; p < 8; ++p)
      reinterpret_cast<float4*>(o)[p] = make_float4(w[4 * p], w[4 * p + 1], w[4 * p + 2], w[4 * p + 3]);
  } else {
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      uint32_t u[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(w[8 * p + 2 * k], w[8 * p + 2 * k + 1]);
        memcpy(&u[k], &h, 4);
      }
      reinterpret_cast<uint4*>(o)[p] = make_uint4(u[0], u[1], u[2], u[3]);
    }
  }
}

// out[r, :] = row (rows ? rows[r] : r0 + r) of the view, dequantized. One warp per output row.
template <GgmlType T, typename OutT>
__global__ void __launch_bounds__(kGThreads) ggml_dequant_kernel(const uint8_t* w, int64_t w_bytes, int64_t cols,
                                                                 const int32_t* rows, int64_t r0, int64_t n,
                                                                 OutT* out) {
  pdl_enter();
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  const int warp = threadIdx.x >> 5;
  uint4* stage = reinterpret_cast<uint4*>(smem + QTableLayout<T>::kBytes + warp * StepGeo<T>::kStage);
  auto setup = [&] {
    const QTabs tabs = stage_tables<T>(smem);
    __syncthreads();
    return tabs;
  };
  walk_rows<T>(
      w, w_bytes, cols, static_cast<int64_t>(blockIdx.x) * kGWarps + warp, static_cast<int64_t>(gridDim.x) * kGWarps,
      n, [&](int64_t r) { return rows ? static_cast<int64_t>(rows[r]) : r0 + r; }, setup, stage,
      [&](int64_t r, int64_t ui, const float (&v)[32]) { store32(out + r * cols + ui * 32, v); }, [](int64_t) {});
}

// ---- host side

// The compile-time block geometry must agree with format/ggml_types.cpp.
template <GgmlType T>
void check_traits() {
  const GgmlTypeInfo& info = ggml_type_info(T);
  HS_CHECK(info.block_elems == QTraits<T>::kBlk && info.block_bytes == QTraits<T>::kBytes,
           "internal: device block geometry of ", info.name, " disagrees with ggml_types");
}

template <GgmlType T>
size_t fixed_smem() {
  return static_cast<size_t>(QTableLayout<T>::kBytes) + static_cast<size_t>(kGWarps) * StepGeo<T>::kStage;
}

template <GgmlType T, int NC>
void launch_mv(DeviceContext& ctx, const GArgs& a, int groups) {
  auto kern = ggml_matvec_kernel<T, NC>;
  const size_t smem = fixed_smem<T>() + static_cast<size_t>(NC) * a.cols * sizeof(float);
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(kern), smem);
  const int bps = ctx.blocks_per_sm(reinterpret_cast<const void*>(kern), kGThreads, smem);
  const int64_t need = (a.rows + kGWarps - 1) / kGWarps;
  const int64_t cap = std::max<int64_t>(1, static_cast<int64_t>(bps) * ctx.sm_count() / groups);
  const unsigned gx = static_cast<unsigned>(std::min<int64_t>(need, cap));
  launch(ctx, kern, dim3(gx, static_cast<unsigned>(groups)), kGThreads, smem, a);
}

template <GgmlType T>
void matvec_t(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy,
              int groups, int64_t rows_per_group, int64_t x_group) {
  check_traits<T>();
  GArgs a{};
  a.w = static_cast<const uint8_t*>(W.data);
  a.w_bytes = W.data_bytes();
  a.x = x;
  a.y = y;
  a.rows = rows_per_group;
  a.cols = W.cols;
  a.ldx = ldx;
  a.ldy = ldy;
  a.x_group = x_group;
  a.ncols = static_cast<int>(n);
  switch (n) {
    case 1: return launch_mv<T, 1>(ctx, a, groups);
    case 2: return launch_mv<T, 2>(ctx, a, groups);
    case 3:
    case 4: return launch_mv<T, 4>(ctx, a, groups);
    default: return launch_mv<T, 8>(ctx, a, groups);
  }
}

template <GgmlType T, typename OutT>
void dequant_t(DeviceContext& ctx, const WeightView& W, const int32_t* rows, int64_t r0, int64_t n, OutT* out) {
  check_traits<T>();
  auto kern = ggml_dequant_kernel<T, OutT>;
  const size_t smem = fixed_smem<T>();
  ctx.ensure_dynamic_smem(reinterpret_cast<const void*>(kern), smem);
  const int bps = ctx.blocks_per_sm(reinterpret_cast<const void*>(kern), kGThreads, smem);
  const int64_t need = (n + kGWarps - 1) / kGWarps;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(need, static_cast<int64_t>(bps) * ctx.sm_count()));
  launch(ctx, kern, grid, kGThreads, smem, static_cast<const uint8_t*>(W.data), W.data_bytes(), W.cols, rows, r0,
                                                n, out);
}

// Offsets of a Lucebox block's UE4M3 scale bytes (-1: none); false for other types.
bool rocm_scale_offsets(GgmlType t, int& o0, int& o1) {
  o0 = o1 = -1;
  switch (t) {
    case GgmlType::Q4_0_ROCMFP4: o0 = 16, o1 = 17; return true;
    case GgmlType::Q4_0_ROCMFP4_FAST: o0 = 16; return true;
    case GgmlType::Q6_0_ROCMFPX: o0 = 24, o1 = 25; return true;
    case GgmlType::Q8_0_ROCMFPX: o0 = 32; return true;
    case GgmlType::Q3_0_ROCMFPX: o0 = 12, o1 = 13; return true;
    case GgmlType::Q2_0_ROCMFP2: o0 = 8, o1 = 9; return true;
    default: return false;
  }
}

}  // namespace

bool ggml_block_supported(GgmlType t) {
  switch (t) {
#define HS_CASE(TYPE) case GgmlType::TYPE:
    HS_GGML_BLOCK_TYPES(HS_CASE)
#undef HS_CASE
    return true;
    default: return false;
  }
}

void ggml_block_validate(GgmlType t, const void* host, int64_t n_blocks) {
  int o0, o1;
  if (!rocm_scale_offsets(t, o0, o1)) return;
  const int64_t bb = ggml_type_info(t).block_bytes;
  const auto* p = static_cast<const uint8_t*>(host);
  for (int64_t b = 0; b < n_blocks; ++b)
    for (int o : {o0, o1}) {
      if (o < 0 || p[b * bb + o] <= 0x7E) continue;
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", p[b * bb + o]);
      fail(ggml_type_name(t), " block ", b, " has the invalid scale byte ", hex,
           " (valid UE4M3 scales are 0x00..0x7E)");
    }
}

size_t ggml_matvec_smem_reserve(GgmlType t) {
  switch (t) {
#define HS_CASE(TYPE) \
  case GgmlType::TYPE: return fixed_smem<GgmlType::TYPE>() + 1024;
    HS_GGML_BLOCK_TYPES(HS_CASE)
#undef HS_CASE
    default: fail("matvec: no CUDA decoder for ", ggml_type_name(t));
  }
}

void ggml_matvec(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int64_t ldx,
                 int64_t ldy, int groups, int64_t rows_per_group, int64_t x_group) {
  HS_CHECK(n >= 1 && n <= 8, "internal: ggml_matvec takes 1..8 columns, got ", n);
  switch (W.ggml) {
#define HS_CASE(TYPE) \
  case GgmlType::TYPE: return matvec_t<GgmlType::TYPE>(ctx, W, x, n, y, ldx, ldy, groups, rows_per_group, x_group);
    HS_GGML_BLOCK_TYPES(HS_CASE)
#undef HS_CASE
    default: fail("matvec: no CUDA decoder for ", ggml_type_name(W.ggml));
  }
}

void ggml_dequant(DeviceContext& ctx, const WeightView& W, const int32_t* rows, int64_t r0, int64_t n, void* out,
                  bool bf16) {
  switch (W.ggml) {
#define HS_CASE(TYPE)                                                                                   \
  case GgmlType::TYPE:                                                                                  \
    if (bf16) return dequant_t<GgmlType::TYPE>(ctx, W, rows, r0, n, static_cast<__nv_bfloat16*>(out)); \
    return dequant_t<GgmlType::TYPE>(ctx, W, rows, r0, n, static_cast<float*>(out));
    HS_GGML_BLOCK_TYPES(HS_CASE)
#undef HS_CASE
    default: fail("dequantize: no CUDA decoder for ", ggml_type_name(W.ggml));
  }
}

}  // namespace hs::cuda::detail
