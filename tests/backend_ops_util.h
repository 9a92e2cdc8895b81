// Shared helpers of the CUDA backend-ops tests (test_backend_ops*.cpp): random inputs,
// comparison and reporting, device buffers, host weights in every storage type, and the
// one-context fixture. Only built with CUDA.
#pragma once
#ifdef HS_HAVE_CUDA
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "format/quants.h"
#include "kernels/cpu/ops.h"
#include "kernels/cuda/ops_cuda.h"
#include "util/fp.h"
#include "util/thread_pool.h"

using namespace hs;
namespace hc = hs::cuda;

// A named namespace (not an anonymous one): each test binary compiles one .cpp, so the
// helpers a binary does not use are not "defined but not used".
namespace backend_ops_test {

// ---- random data (fresh per process; the seed is printed so a failure can be replayed)

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t base_seed() {
  static const uint64_t s = [] {
    const char* env = std::getenv("HS_TEST_SEED");
    const uint64_t v = env ? std::strtoull(env, nullptr, 10) : std::random_device{}();
    std::printf("[backend-ops] seed %llu (set HS_TEST_SEED to replay)\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return s;
}

class Rand {
 public:
  explicit Rand(uint64_t stream) : seed_(splitmix(base_seed() ^ splitmix(stream))) {}
  uint64_t bits(uint64_t i) const { return splitmix(seed_ + i * 0x9e3779b97f4a7c15ull); }
  float uni(uint64_t i) const { return static_cast<float>(bits(i) >> 40) * 0x1p-24f * 2.0f - 1.0f; }  // [-1, 1)
 private:
  uint64_t seed_;
};

ThreadPool& pool() {
  static ThreadPool p;
  return p;
}

std::vector<float> randv(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  Rand r(stream);
  pool().parallel_for(static_cast<int64_t>(n), 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) v[static_cast<size_t>(i)] = r.uni(static_cast<uint64_t>(i)) * scale;
  });
  return v;
}

// ---- comparison

struct Cmp {
  double rel = 0;
  int64_t bad = 0;  // non-finite where the reference is finite
};

Cmp compare(const float* got, const float* want, size_t n) {
  double num = 0, den = 0;
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(want[i])) {
      if (!(std::isinf(want[i]) && got[i] == want[i])) ++bad;  // -inf markers must match exactly
      continue;
    }
    if (!std::isfinite(got[i])) {
      ++bad;
      continue;
    }
    const double d = static_cast<double>(got[i]) - want[i];
    num += d * d;
    den += static_cast<double>(want[i]) * want[i];
  }
  Cmp c;
  c.rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  c.bad = bad;
  return c;
}

void check(const std::string& op, const std::string& type, const std::string& shape, const std::vector<float>& got,
           const std::vector<float>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  const Cmp c = compare(got.data(), want.data(), got.size());
  const bool ok = c.bad == 0 && c.rel <= tol;
  std::printf("[backend-ops] %-16s %-9s %-34s rel=%.3e tol=%.0e%s %s\n", op.c_str(), type.c_str(), shape.c_str(), c.rel,
              tol, c.bad ? (" nonfinite=" + std::to_string(c.bad)).c_str() : "", ok ? "PASS" : "FAIL");
  EXPECT_EQ(c.bad, 0) << op << " " << type << " " << shape << ": non-finite outputs";
  EXPECT_LE(c.rel, tol) << op << " " << type << " " << shape;
}

void check_exact(const std::string& op, const std::string& type, const std::string& shape, int64_t mismatches) {
  std::printf("[backend-ops] %-16s %-9s %-34s mismatches=%lld %s\n", op.c_str(), type.c_str(), shape.c_str(),
              static_cast<long long>(mismatches), mismatches == 0 ? "PASS" : "FAIL");
  EXPECT_EQ(mismatches, 0) << op << " " << type << " " << shape;
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

// ---- device buffers

template <typename T>
struct Dev {
  hc::DeviceBuffer buf;
  size_t n = 0;
  hc::DeviceContext* ctx = nullptr;
  Dev(hc::DeviceContext& c, size_t count) : buf(c.alloc(std::max<size_t>(count, 1) * sizeof(T))), n(count), ctx(&c) {}
  Dev(hc::DeviceContext& c, const std::vector<T>& host) : Dev(c, host.size()) { put(host); }
  T* p() const { return buf.as<T>(); }
  void put(const std::vector<T>& host) { ctx->upload(p(), host.data(), host.size() * sizeof(T)); }
  std::vector<T> get() const {
    ctx->synchronize();
    std::vector<T> h(n);
    ctx->download(h.data(), p(), n * sizeof(T));
    return h;
  }
  void poison() { ctx->fill_bytes(p(), 0xff, n * sizeof(T)); }  // all-ones: NaN for floats, -1 for ints
};

// ---- weights: host bytes in their storage format + the CPU twin's dequantized copy

struct HostWeight {
  hc::WType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;   // GGUF layout (or official FP8 weight bytes)
  std::vector<uint8_t> scales;  // FP8 only
  std::vector<float> deq;       // [rows, cols]
};

GgmlType gguf_of(hc::WType t) {
  switch (t) {
    case hc::WType::F32: return GgmlType::F32;
    case hc::WType::F16: return GgmlType::F16;
    case hc::WType::BF16: return GgmlType::BF16;
    case hc::WType::Q8_0: return GgmlType::Q8_0;
    case hc::WType::MXFP4: return GgmlType::MXFP4;
    default: return GgmlType::F32;
  }
}

HostWeight make_weight(hc::WType type, int64_t rows, int64_t cols, uint64_t stream) {
  HostWeight w{type, rows, cols, {}, {}, std::vector<float>(static_cast<size_t>(rows * cols))};
  Rand r(stream);
  if (type == hc::WType::FP8_B128) {
    w.bytes.resize(static_cast<size_t>(rows * cols));
    const int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
    w.scales.resize(static_cast<size_t>(sr * sc));
    for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = static_cast<uint8_t>(118 + r.bits(~i) % 13);  // 2^-9..2^3
    pool().parallel_for(rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o)
        for (int64_t i = 0; i < cols; ++i) {
          uint8_t v = static_cast<uint8_t>(r.bits(static_cast<uint64_t>(o * cols + i)));
          if ((v & 0x7f) == 0x7f) v ^= 1;  // no NaN codes: every other e4m3 value, subnormals included
          w.bytes[static_cast<size_t>(o * cols + i)] = v;
          w.deq[static_cast<size_t>(o * cols + i)] =
              e4m3_to_f32(v) * e8m0_to_f32(w.scales[static_cast<size_t>((o / 128) * sc + i / 128)]);
        }
    });
    return w;
  }
  const GgmlType g = gguf_of(type);
  const int64_t rb = ggml_row_bytes(g, cols);
  w.bytes.resize(static_cast<size_t>(rows * rb));
  pool().parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      uint8_t* row = w.bytes.data() + o * rb;
      const uint64_t base = static_cast<uint64_t>(o * cols) * 2;
      switch (type) {
        case hc::WType::F32:
          for (int64_t i = 0; i < cols; ++i) {
            const float v = r.uni(base + i);
            std::memcpy(row + 4 * i, &v, 4);
          }
          break;
        case hc::WType::F16:
          for (int64_t i = 0; i < cols; ++i) {
            const uint16_t h = f32_to_f16(r.uni(base + i));
            std::memcpy(row + 2 * i, &h, 2);
          }
          break;
        case hc::WType::BF16:
          for (int64_t i = 0; i < cols; ++i) {
            const uint16_t h = f32_to_bf16(r.uni(base + i));
            std::memcpy(row + 2 * i, &h, 2);
          }
          break;
        case hc::WType::Q8_0:  // random f16 scale (either sign) + every int8 code
          for (int64_t blk = 0; blk < cols / 32; ++blk) {
            uint8_t* p = row + blk * 34;
            const uint16_t d = f32_to_f16(r.uni(base + blk * 64) * 0.02f);
            std::memcpy(p, &d, 2);
            for (int j = 0; j < 32; ++j) p[2 + j] = static_cast<uint8_t>(r.bits(base + blk * 64 + 1 + j));
          }
          break;
        case hc::WType::MXFP4:  // scale byte 2^(e-128) for e in 110..135 + every nibble code
          for (int64_t blk = 0; blk < cols / 32; ++blk) {
            uint8_t* p = row + blk * 17;
            p[0] = static_cast<uint8_t>(110 + r.bits(base + blk * 64) % 26);
            for (int j = 0; j < 16; ++j) p[1 + j] = static_cast<uint8_t>(r.bits(base + blk * 64 + 1 + j));
          }
          break;
        default: break;
      }
      dequantize_row(g, row, w.deq.data() + o * cols, cols);
    }
  });
  return w;
}

hc::DeviceWeight upload(hc::DeviceContext& ctx, const HostWeight& w) {
  if (w.type == hc::WType::FP8_B128) return hc::upload_fp8_weight(ctx, w.bytes.data(), w.scales.data(), w.rows, w.cols);
  return hc::upload_gguf_weight(ctx, gguf_of(w.type), w.bytes.data(), w.rows, w.cols);
}

// y[n, out] on the CPU from the dequantized weight (the twin of every matmul path).
std::vector<float> cpu_matmul(const HostWeight& w, const std::vector<float>& x, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n * w.rows));
  cpu::matmul(pool(), w.deq.data(), w.rows, w.cols, x.data(), n, y.data());
  return y;
}

// grouped_matmul's CPU twin: y[t, g*R + j] = W[g*R + j] . x[t, g*in : (g+1)*in].
std::vector<float> cpu_grouped_matmul(const HostWeight& w, int groups, const std::vector<float>& x, int64_t n) {
  const int64_t R = w.rows / groups, in = w.cols;
  std::vector<float> ref(static_cast<size_t>(n * w.rows));
  for (int g = 0; g < groups; ++g) {
    std::vector<float> xg(static_cast<size_t>(n * in)), yg(static_cast<size_t>(n * R));
    for (int64_t r = 0; r < n; ++r) std::copy_n(x.begin() + r * groups * in + g * in, in, xg.begin() + r * in);
    cpu::matmul(pool(), w.deq.data() + g * R * in, R, in, xg.data(), n, yg.data());
    for (int64_t r = 0; r < n; ++r) std::copy_n(yg.begin() + r * R, R, ref.begin() + r * groups * R + g * R);
  }
  return ref;
}

// matmul(W, x) for n columns on a poisoned y vs the first n rows of ref; tolerance 1e-5 for the
// f32-exact paths (weight streaming, the tensor-core matvec), 1e-2 where the tiled path uses bf16
// tensor cores (weights not F32).
void check_matmul_n(hc::DeviceContext& c, const hc::WeightView& w, const float* x, float* y,
                    const std::vector<float>& ref, int64_t n, bool f32_weights, const std::string& prefix,
                    const std::string& type, const std::string& shape, const std::string& what) {
  c.fill_bytes(y, 0xff, static_cast<size_t>(n * w.rows) * sizeof(float));  // NaN
  hc::matmul(c, w, x, n, y);
  c.synchronize();
  std::vector<float> got(static_cast<size_t>(n * w.rows));
  c.download(got.data(), y, got.size() * sizeof(float));
  const std::vector<float> want(ref.begin(), ref.begin() + n * w.rows);
  const hc::MatmulPath path = hc::matmul_path(w, n, hc::GemmMode::Auto);
  const bool tiled = path == hc::MatmulPath::Tiled;
  check(prefix + (tiled ? "matmul-tiled" : path == hc::MatmulPath::TensorCores ? "matvec-mma" : "matvec"), type,
        shape + " n=" + std::to_string(n) + " " + what, got, want, tiled && !f32_weights ? 1e-2 : 1e-5);
}

const hc::WType kAllTypes[] = {hc::WType::F32, hc::WType::F16, hc::WType::BF16,
                               hc::WType::Q8_0, hc::WType::FP8_B128, hc::WType::MXFP4};
// ---- fixture: one context for the whole suite; SKIPPED without a GPU

class BackendOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (hc::device_count() > 0) {
      ctx_ = std::make_unique<hc::DeviceContext>(0);
      // HS_TEST_PDL=1: every kernel launches with programmatic dependent launch (--pdl on), so
      // the suite checks the kernels' PDL entry against the CPU twins too.
      const char* pdl = std::getenv("HS_TEST_PDL");
      ctx_->set_pdl(pdl && std::string(pdl) == "1");
      std::printf("[backend-ops] device %s%s\n", ctx_->describe().c_str(), ctx_->pdl() ? ", PDL on" : "");
    }
  }
  static void TearDownTestSuite() { ctx_.reset(); }
  void SetUp() override {
    if (!ctx_) GTEST_SKIP() << "no CUDA device (hs::cuda::device_count() == 0)";
  }
  hc::DeviceContext& ctx() { return *ctx_; }
  static std::unique_ptr<hc::DeviceContext> ctx_;
};
std::unique_ptr<hc::DeviceContext> BackendOps::ctx_;

// The device form of one hyper-connection's weights.
hc::HcParams hc_params(const float* fn, const float* base, const float* scale, int hc, int64_t dim) {
  hc::HcParams p;
  p.fn = fn;
  p.base = base;
  p.scale = scale;
  p.hc = hc;
  p.dim = dim;
  return p;
}

// GPU time of `calls` back-to-back calls of f in ms, from events: the median (ms[reps / 2]) of
// `reps` repetitions after a warm-up call (the timing tests print it; nothing asserts on it).
double event_median_ms(hc::DeviceContext& ctx, const std::function<void()>& f, int calls = 1, int reps = 20) {
  f();
  ctx.synchronize();
  cudaEvent_t a, b;
  HS_CUDA_CHECK(cudaEventCreate(&a));
  HS_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int rep = 0; rep < reps; ++rep) {
    HS_CUDA_CHECK(cudaEventRecord(a, ctx.stream()));
    for (int i = 0; i < calls; ++i) f();
    HS_CUDA_CHECK(cudaEventRecord(b, ctx.stream()));
    HS_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    HS_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  HS_CUDA_CHECK(cudaEventDestroy(a));
  HS_CUDA_CHECK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[static_cast<size_t>(reps / 2)];
}

}  // namespace backend_ops_test
using namespace backend_ops_test;
#endif  // HS_HAVE_CUDA
