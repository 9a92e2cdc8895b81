// Synthetic weights made in device memory (synth_fill_cuda.h): host-quantised pools of random
// rows, and a row-gather kernel that fills each weight from its pool.
#include <cmath>
#include <cstring>

#include "format/quants.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/synth_fill_cuda.h"
#include "util/thread_pool.h"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

// SplitMix64's finalizer (as model/synthetic_weights.cpp).
__host__ __device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t row_key(uint64_t seed) { return mix64(seed ^ 0x243F6A8885A308D3ULL); }

// The pool row that output row `row` copies (n pool rows; n == 1: always row 0).
__host__ __device__ __forceinline__ int64_t pick_row(uint64_t key, int64_t row, int64_t n) {
  if (n <= 1) return 0;
  return static_cast<int64_t>(mix64(key + static_cast<uint64_t>(row + 1) * kGolden) % static_cast<uint64_t>(n));
}

// dst row r = pool row pick_row(key, r, pool_rows); rows of row_v elements of V. One warp per row.
template <typename V>
__global__ void gather_rows_kernel(V* __restrict__ dst, const V* __restrict__ pool, int64_t row_v, int64_t rows,
                                   int64_t pool_rows, uint64_t key) {
  pdl_enter();
  const int lane = threadIdx.x & 31;
  const int64_t step = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; r < rows; r += step) {
    const V* s = pool + pick_row(key, r, pool_rows) * row_v;
    V* d = dst + r * row_v;
#pragma unroll 4
    for (int64_t i = lane; i < row_v; i += 32) d[i] = s[i];
  }
}

template <typename V>
void gather_launch(DeviceContext& ctx, void* dst, const void* pool, int64_t row_bytes, int64_t rows, int64_t pool_rows,
                   uint64_t key) {
  launch(ctx, gather_rows_kernel<V>, grid_for(rows, kWarpsPerBlock), kThreads, 0, static_cast<V*>(dst), static_cast<const V*>(pool), row_bytes / static_cast<int64_t>(sizeof(V)), rows, pool_rows,
      key);
}

// The widest copy unit that divides the row and both base addresses.
void gather(DeviceContext& ctx, void* dst, const void* pool, int64_t row_bytes, int64_t rows, int64_t pool_rows,
            uint64_t key) {
  if (rows <= 0 || row_bytes <= 0) return;
  const auto fits = [&](int64_t w) {
    return row_bytes % w == 0 && reinterpret_cast<uintptr_t>(dst) % w == 0 && reinterpret_cast<uintptr_t>(pool) % w == 0;
  };
  if (fits(16)) gather_launch<uint4>(ctx, dst, pool, row_bytes, rows, pool_rows, key);
  else if (fits(8)) gather_launch<uint2>(ctx, dst, pool, row_bytes, rows, pool_rows, key);
  else if (fits(4)) gather_launch<uint32_t>(ctx, dst, pool, row_bytes, rows, pool_rows, key);
  else gather_launch<uint8_t>(ctx, dst, pool, row_bytes, rows, pool_rows, key);
}

// util/fp.h's f32_to_e4m3 (that header needs C++20, CUDA sources build as C++17): nearest
// E4M3FN code, ties to even, saturating to +-448.
uint8_t e4m3_encode(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  int e;
  std::frexp(a, &e);
  int exp_unb = e - 1;
  if (exp_unb < -6) exp_unb = -6;
  const float step = std::ldexp(1.0f, exp_unb - 3);
  const float q = std::nearbyint(a / step) * step;
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  const int qunb = qe - 1;
  if (qunb < -6) return sign | static_cast<uint8_t>(std::lround(q / 0x1p-9f));
  const int man = static_cast<int>(std::lround((q / std::ldexp(1.0f, qunb) - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>(((qunb + 7) << 3) | man);
}

bool is_planar(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::MXFP4; }

}  // namespace

std::string SynthType::name() const {
  if (fp8_b128) return "FP8_B128";
  std::string n = ggml_type_name(ggml);
  if (keep_blocks && is_planar(ggml)) n += "(blocks)";
  return n;
}

uint64_t synth_tensor_seed(uint64_t seed, uint64_t tensor_id) { return mix64(mix64(seed + kGolden) ^ tensor_id); }

WeightView synth_layout(SynthType type, int64_t rows, int64_t cols) {
  HS_CHECK(rows > 0 && cols > 0, "synthetic weight: empty shape ", rows, "x", cols);
  WeightView v;
  v.rows = rows;
  v.cols = cols;
  if (type.fp8_b128) {
    HS_CHECK(cols % 16 == 0, "synthetic FP8_B128 weight: need cols % 16 == 0, got ", cols);
    v.type = WType::FP8_B128;
    return v;
  }
  const GgmlType g = type.ggml;
  HS_CHECK(ggml_type_info(static_cast<uint32_t>(g)) && type_has_quantizer(g) && cuda_supports_gguf_type(g),
           "synthetic weights: no reference quantiser or CUDA decoder for GGUF type ",
           ggml_type_info(static_cast<uint32_t>(g)) ? ggml_type_name(g) : "(unknown)");
  ggml_row_bytes(g, cols);  // throws when cols is not a whole number of blocks
  switch (g) {
    case GgmlType::F32: v.type = WType::F32; break;
    case GgmlType::F16: v.type = WType::F16; break;
    case GgmlType::BF16: v.type = WType::BF16; break;
    case GgmlType::Q8_0: v.type = type.keep_blocks ? WType::GGML_BLOCK : WType::Q8_0; break;
    case GgmlType::MXFP4: v.type = type.keep_blocks ? WType::GGML_BLOCK : WType::MXFP4; break;
    default: v.type = WType::GGML_BLOCK; break;
  }
  v.ggml = g;
  return v;
}

SynthPool::SynthPool(DeviceContext& ctx, int64_t pool_rows, uint64_t seed, ThreadPool* threads)
    : ctx_(&ctx), rows_((std::max<int64_t>(pool_rows, 1) + 127) / 128 * 128), seed_(seed), threads_(threads) {}

int SynthPool::device() const { return ctx_->device(); }

int64_t SynthPool::source_row(uint64_t seed, int64_t row) const { return pick_row(row_key(seed), row, rows_); }

const SynthPool::Entry& SynthPool::get(SynthType type, int64_t cols) {
  synth_layout(type, rows_, cols);  // validates the type and width
  if (type.fp8_b128) type = SynthType::fp8();
  if (!is_planar(type.ggml)) type.keep_blocks = false;
  std::lock_guard<std::mutex> lk(mu_);
  const auto key = std::make_tuple(static_cast<uint32_t>(type.ggml), type.fp8_b128, type.keep_blocks, cols);
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;

  Entry e;
  e.type = type;
  e.cols = cols;
  // Values as model/synthetic_weights.cpp draws them: Irwin-Hall(4), unit variance, times 1/sqrt(cols).
  const uint64_t vkey = mix64(seed_ ^ mix64((static_cast<uint64_t>(type.ggml) << 40) ^
                                            (static_cast<uint64_t>(type.fp8_b128) << 39) ^ static_cast<uint64_t>(cols)));
  const float scale = 1.0f / std::sqrt(static_cast<float>(cols));
  const int64_t n = rows_ * cols;
  std::vector<float> x(static_cast<size_t>(n));
  const auto run = [&](int64_t count, const std::function<void(int64_t, int64_t)>& fn) {
    if (threads_) threads_->parallel_for(count, 8, fn);
    else fn(0, count);
  };
  run(rows_, [&](int64_t b, int64_t end) {
    for (int64_t i = b * cols; i < end * cols; ++i) {
      const uint64_t h = mix64(vkey + static_cast<uint64_t>(i + 1) * kGolden);
      const auto sum = static_cast<float>((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48));
      x[static_cast<size_t>(i)] = scale * ((sum + 2.0f) * 0x1p-16f - 2.0f) * 1.7320508f;
    }
  });
  if (type.fp8_b128) {
    // One power-of-two scale per 128-column block over all pool rows (TensorGen::fp8_blocks).
    const int64_t kb = (cols + 127) / 128;
    e.bytes.resize(static_cast<size_t>(n));
    e.fp8_scales.resize(static_cast<size_t>(kb));
    for (int64_t cb = 0; cb < kb; ++cb) {
      const int64_t c0 = cb * 128, c1 = std::min(cols, c0 + 128);
      float amax = 0.0f;
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
      int ex = 0;
      if (amax > 0.0f) {
        const float m = std::frexp(amax / 448.0f, &ex);
        if (m == 0.5f) --ex;
      }
      HS_CHECK(ex + 127 >= 1 && ex + 127 <= 254, "internal: synthetic FP8 scale out of range");
      e.fp8_scales[static_cast<size_t>(cb)] = static_cast<uint8_t>(ex + 127);
      for (int64_t r = 0; r < rows_; ++r)
        for (int64_t c = c0; c < c1; ++c)
          e.bytes[static_cast<size_t>(r * cols + c)] = e4m3_encode(std::ldexp(x[static_cast<size_t>(r * cols + c)], -ex));
    }
    std::vector<uint8_t> scales(static_cast<size_t>(rows_ / 128 * kb));
    for (size_t i = 0; i < scales.size(); ++i) scales[i] = e.fp8_scales[i % static_cast<size_t>(kb)];
    e.dev = upload_fp8_weight(*ctx_, e.bytes.data(), scales.data(), rows_, cols);
  } else {
    const int64_t rb = ggml_row_bytes(type.ggml, cols);
    e.bytes.resize(static_cast<size_t>(rows_ * rb));
    run(rows_, [&](int64_t b, int64_t end) {
      for (int64_t r = b; r < end; ++r)
        quantize_row(type.ggml, x.data() + r * cols, e.bytes.data() + r * rb, cols);
    });
    e.dev = upload_gguf_weight(*ctx_, type.ggml, e.bytes.data(), rows_, cols, type.keep_blocks);
  }
  return entries_.emplace(key, std::move(e)).first->second;
}

void fill_random_weight(DeviceContext& ctx, SynthPool& pool, SynthType type, const WeightView& dst, uint64_t seed) {
  const WeightView want = synth_layout(type, dst.rows, dst.cols);
  HS_CHECK(dst.type == want.type && dst.ggml == want.ggml, "fill_random_weight: the destination is ",
           wtype_name(dst.type), ", ", type.name(), " needs ", wtype_name(want.type));
  HS_CHECK(dst.data && (dst.scales || dst.scale_bytes() == 0), "fill_random_weight: destination without memory");
  HS_CHECK(pool.device() == ctx.device(), "fill_random_weight: the pool belongs to cuda:", pool.device(),
           ", not cuda:", ctx.device());
  const WeightView& pv = pool.get(type, dst.cols).dev.view;
  const uint64_t key = row_key(seed);
  void* data = const_cast<void*>(dst.data);
  void* scales = const_cast<void*>(dst.scales);
  DeviceGuard g(ctx.device());
  gather(ctx, data, pv.data, pv.data_bytes() / pv.rows, dst.rows, pv.rows, key);
  if (dst.type == WType::Q8_0 || dst.type == WType::MXFP4)  // the same rows' scales
    gather(ctx, scales, pv.scales, pv.scale_bytes() / pv.rows, dst.rows, pv.rows, key);
  else if (dst.type == WType::FP8_B128)  // every 128-row block has the pool's one scale row
    gather(ctx, scales, pv.scales, (dst.cols + 127) / 128, (dst.rows + 127) / 128, 1, key);
}

DeviceWeight make_random_weight(DeviceContext& ctx, SynthPool& pool, SynthType type, int64_t rows, int64_t cols,
                                uint64_t seed) {
  DeviceWeight w;
  w.view = synth_layout(type, rows, cols);
  w.data = ctx.alloc(static_cast<size_t>(w.view.data_bytes()));
  w.view.data = w.data.data();
  if (w.view.scale_bytes() > 0) {
    w.scales = ctx.alloc(static_cast<size_t>(w.view.scale_bytes()));
    w.view.scales = w.scales.data();
  }
  fill_random_weight(ctx, pool, type, w.view, seed);
  return w;
}

}  // namespace hs::cuda
