// CUDA ops vs their CPU twins (kernels/cpu) on fresh random inputs, in the spirit of
// llama.cpp's test-backend-ops. Shapes include the DeepSeek-V4-Flash widths. Every GPU output
// is poisoned (NaN) before the run, so an element the kernel never writes fails the check.
// Tolerances: relative L2 <= 1e-5 for f32 paths, <= 1e-2 for bf16 tensor-core paths; NaN or
// inf where the reference is finite always fails. Each check prints one line
//   [backend-ops] <op> <type> <shape> rel=<err> tol=<tol> PASS|FAIL
// which scripts/device_test.sh collects into a summary. Without a GPU every test is SKIPPED.
#include <gtest/gtest.h>

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

namespace {

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
// f32 paths, 1e-2 where the tiled path uses bf16 tensor cores (n > 8, weights not F32).
void check_matmul_n(hc::DeviceContext& c, const hc::WeightView& w, const float* x, float* y,
                    const std::vector<float>& ref, int64_t n, bool f32_weights, const std::string& prefix,
                    const std::string& type, const std::string& shape, const std::string& what) {
  c.fill_bytes(y, 0xff, static_cast<size_t>(n * w.rows) * sizeof(float));  // NaN
  hc::matmul(c, w, x, n, y);
  c.synchronize();
  std::vector<float> got(static_cast<size_t>(n * w.rows));
  c.download(got.data(), y, got.size() * sizeof(float));
  const std::vector<float> want(ref.begin(), ref.begin() + n * w.rows);
  const bool tiled = n > hc::kMatvecMaxCols;
  check(prefix + (tiled ? "matmul-tiled" : "matvec"), type, shape + " n=" + std::to_string(n) + " " + what, got, want,
        tiled && !f32_weights ? 1e-2 : 1e-5);
}

const hc::WType kAllTypes[] = {hc::WType::F32, hc::WType::F16, hc::WType::BF16,
                               hc::WType::Q8_0, hc::WType::FP8_B128, hc::WType::MXFP4};

// ---- GGUF block types (WType::GGML_BLOCK, the generic kernels of matvec_ggml.cu)

// Every GGUF type the CUDA backend reads. Q8_0 and MXFP4 run twice: through their repacked
// fast kernels and, with keep_blocks, through the generic ones.
struct GgufCase {
  GgmlType type;
  bool keep_blocks;
};
std::vector<GgufCase> gguf_cases() {
  const GgmlType types[] = {
      GgmlType::F32,     GgmlType::F16,     GgmlType::BF16,    GgmlType::Q4_0,         GgmlType::Q4_1,
      GgmlType::Q5_0,    GgmlType::Q5_1,    GgmlType::Q8_0,    GgmlType::Q2_K,         GgmlType::Q3_K,
      GgmlType::Q4_K,    GgmlType::Q5_K,    GgmlType::Q6_K,    GgmlType::Q8_K,         GgmlType::IQ2_XXS,
      GgmlType::IQ2_XS,  GgmlType::IQ2_S,   GgmlType::IQ3_XXS, GgmlType::IQ3_S,        GgmlType::IQ1_S,
      GgmlType::IQ1_M,   GgmlType::IQ4_NL,  GgmlType::IQ4_XS,  GgmlType::MXFP4,        GgmlType::Q4_0_ROCMFP4,
      GgmlType::Q4_0_ROCMFP4_FAST,          GgmlType::Q6_0_ROCMFPX, GgmlType::Q8_0_ROCMFPX, GgmlType::Q3_0_ROCMFPX,
      GgmlType::Q2_0_ROCMFP2};
  std::vector<GgufCase> v;
  for (GgmlType t : types) {
    v.push_back({t, false});
    if (t == GgmlType::Q8_0 || t == GgmlType::MXFP4) v.push_back({t, true});
  }
  return v;
}
std::string label(const GgufCase& c) { return std::string(ggml_type_name(c.type)) + (c.keep_blocks ? "/gen" : ""); }

// A random finite f16: wide = any sign, exponent and mantissa (subnormals included);
// otherwise |v| < 0.05, either sign (a realistic weight scale).
uint16_t random_f16(const Rand& r, uint64_t i, bool wide) {
  if (!wide) return f32_to_f16(r.uni(i) * 0.05f);
  uint16_t h = static_cast<uint16_t>(r.bits(i));
  if ((h & 0x7c00) == 0x7c00) h &= 0xbfff;  // no inf / NaN
  return h;
}

// Random bytes for every code, grid index and sign, with the scale fields made finite and
// valid (quant-formats.md §7 "random-bytes blocks"). Plain types get random finite values.
void random_gguf_row(GgmlType t, uint8_t* row, int64_t cols, const Rand& r, uint64_t base, bool wide) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  const int64_t nb = cols / info.block_elems, bb = info.block_bytes;
  auto put16 = [](uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); };
  if (info.block_elems == 1) {
    for (int64_t i = 0; i < cols; ++i) {
      const uint64_t k = base + static_cast<uint64_t>(i);
      if (t == GgmlType::F16) put16(row + 2 * i, random_f16(r, k, wide));
      if (t == GgmlType::BF16) {
        uint16_t h = wide ? static_cast<uint16_t>(r.bits(k)) : f32_to_bf16(r.uni(k));
        if ((h & 0x7f80) == 0x7f80) h &= 0xbfff;
        put16(row + 2 * i, h);
      }
      if (t == GgmlType::F32) {
        uint32_t v = wide ? static_cast<uint32_t>(r.bits(k)) : f32_to_bits(r.uni(k));
        if ((v & 0x7f800000u) == 0x7f800000u) v &= 0xbfffffffu;
        std::memcpy(row + 4 * i, &v, 4);
      }
    }
    return;
  }
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = row + b * bb;
    const uint64_t k = base + static_cast<uint64_t>(b) * 512;
    for (int64_t j = 0; j < bb; ++j) p[j] = static_cast<uint8_t>(r.bits(k + 1 + static_cast<uint64_t>(j)));
    std::vector<int> f16_at;  // offsets of f16 scale fields
    int ue[2] = {-1, -1};     // Lucebox UE4M3 scale bytes
    switch (t) {
      case GgmlType::Q4_1:
      case GgmlType::Q5_1:
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: f16_at = {0, 2}; break;
      case GgmlType::Q2_K: f16_at = {80, 82}; break;
      case GgmlType::Q3_K: f16_at = {108}; break;
      case GgmlType::Q6_K: f16_at = {208}; break;
      case GgmlType::Q8_K: {  // f32 d = +-10^U(-8, 3) (wide) or +-10^U(-5, -2)
        const float e = wide ? -8.0f + 11.0f * (0.5f + 0.5f * r.uni(k)) : -5.0f + 3.0f * (0.5f + 0.5f * r.uni(k));
        const float d = std::pow(10.0f, e) * (r.bits(k + 400) & 1 ? -1.0f : 1.0f);
        std::memcpy(p, &d, 4);
        break;
      }
      case GgmlType::MXFP4:  // e = 0..250 (subnormal scales included; no overflow) or 110..135
        p[0] = static_cast<uint8_t>(wide ? r.bits(k) % 251 : 110 + r.bits(k) % 26);
        break;
      case GgmlType::IQ1_M: {  // the f16 scale is scattered over the top nibbles of 4 u16 words
        const uint16_t d = random_f16(r, k, wide);
        for (int w = 0; w < 4; ++w) p[48 + 2 * w + 1] = static_cast<uint8_t>((p[48 + 2 * w + 1] & 0x0f) | ((d >> (4 * w)) & 15) << 4);
        break;
      }
      case GgmlType::Q4_0_ROCMFP4: ue[0] = 16, ue[1] = 17; break;
      case GgmlType::Q4_0_ROCMFP4_FAST: ue[0] = 16; break;
      case GgmlType::Q6_0_ROCMFPX: ue[0] = 24, ue[1] = 25; break;
      case GgmlType::Q8_0_ROCMFPX: ue[0] = 32; break;
      case GgmlType::Q3_0_ROCMFPX: ue[0] = 12, ue[1] = 13; break;
      case GgmlType::Q2_0_ROCMFP2: ue[0] = 8, ue[1] = 9; break;
      default: f16_at = {0}; break;  // Q4_0, Q5_0, Q8_0, IQ4_NL, and the i-quants: d at 0
    }
    for (size_t i = 0; i < f16_at.size(); ++i) put16(p + f16_at[i], random_f16(r, k + 300 + i, wide));
    for (int o : ue)
      if (o >= 0) p[o] = static_cast<uint8_t>(r.bits(k + 310 + static_cast<uint64_t>(o)) % 0x7f);  // 0x00..0x7E
  }
}

// A [rows, cols] GGUF tensor of random valid blocks and its CPU dequantization.
HostWeight make_gguf_weight(GgmlType t, int64_t rows, int64_t cols, uint64_t stream, bool wide) {
  HostWeight w{hc::WType::GGML_BLOCK, rows, cols, {}, {}, std::vector<float>(static_cast<size_t>(rows * cols))};
  const int64_t rb = ggml_row_bytes(t, cols);
  w.bytes.resize(static_cast<size_t>(rows * rb));
  Rand r(stream);
  pool().parallel_for(rows, 8, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      random_gguf_row(t, w.bytes.data() + o * rb, cols, r, static_cast<uint64_t>(o) << 24, wide);
      dequantize_row(t, w.bytes.data() + o * rb, w.deq.data() + o * cols, cols);
    }
  });
  return w;
}

// Element mismatches of the uint32 bit patterns (NaN payloads included).
int64_t bit_mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return static_cast<int64_t>(std::max(got.size(), want.size()));
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += f32_to_bits(got[i]) != f32_to_bits(want[i]);
  return bad;
}

std::string quant_fixture_dir() {
  if (const char* e = std::getenv("HS_TEST_DATA")) return std::string(e) + "/quants";
#ifdef HS_TEST_DATA
  if (std::filesystem::exists(std::string(HS_TEST_DATA) + "/quants/quants.json")) return std::string(HS_TEST_DATA) + "/quants";
#endif
  return "tests/data/quants";  // the repository root as working directory (the GPU lease)
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// ---- fixture: one context for the whole suite; SKIPPED without a GPU

class BackendOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (hc::device_count() > 0) {
      ctx_ = std::make_unique<hc::DeviceContext>(0);
      std::printf("[backend-ops] device %s\n", ctx_->describe().c_str());
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

}  // namespace

// ---------------------------------------------------------------------------------------

TEST_F(BackendOps, DeviceContextScratchAndErrors) {
  auto& c = ctx();
  EXPECT_GE(hc::device_count(), 1);
  {
    auto a = c.scratch(1000);
    EXPECT_GE(a.bytes(), 1000u);
    EXPECT_THROW(c.scratch(10), Error);  // nested lease on one thread
  }
  {
    auto b = c.scratch(size_t{3} << 20);
    EXPECT_GE(c.scratch_capacity(), size_t{3} << 20);
  }
  // A lease taken on one thread and waited for on another.
  std::atomic<bool> got{false};
  {
    auto a = c.scratch(16);
    std::thread t([&] {
      auto b = c.scratch(16);
      got = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_FALSE(got.load());
    {
      auto moved = std::move(a);
    }  // released here
    t.join();
  }
  EXPECT_TRUE(got.load());
  EXPECT_THROW(hc::DeviceContext(hc::device_count()), Error);
  // A bad launch surfaces as hs::Error with the call in the message.
  try {
    HS_CUDA_CHECK(cudaSetDevice(hc::device_count() + 7));
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_backend_ops.cpp:"), std::string::npos) << e.what();
  }
  (void)cudaGetLastError();
}

// Every weight type at small, odd and Flash shapes, n = 1..8 (weight streaming) and n > 8 (tiled).
TEST_F(BackendOps, MatmulAllTypes) {
  struct Shape {
    int64_t out, in;
    const char* what;
  };
  const Shape shapes[] = {
      {37, 256, "odd"},          {300, 512, "small"},         {1024, 4096, "wq_a"},  {512, 4096, "wkv"},
      {32768, 1024, "wq_b 64x512"}, {4096, 8192, "wo_b"},     {2048, 4096, "w1 2048"}, {4096, 2048, "w2"},
      {256, 4096, "gate 256"},   {8192, 1024, "idx wq_b 64x128"},
  };
  const int64_t ns[] = {1, 2, 3, 5, 8, 17};
  const int64_t nmax = 17;
  uint64_t stream = 100;
  for (hc::WType t : kAllTypes) {
    for (const Shape& s : shapes) {
      const HostWeight hw = make_weight(t, s.out, s.in, ++stream);
      const std::vector<float> x = randv(static_cast<size_t>(nmax * s.in), ++stream);
      const std::vector<float> ref = cpu_matmul(hw, x, nmax);
      hc::DeviceWeight dw = upload(ctx(), hw);
      Dev<float> dx(ctx(), x);
      Dev<float> dy(ctx(), static_cast<size_t>(nmax * s.out));
      for (int64_t n : ns) {
        check_matmul_n(ctx(), dw.view, dx.p(), dy.p(), ref, n, t == hc::WType::F32, "", hc::wtype_name(t),
                       dims({s.out, s.in}), s.what);
        if (n == 1) {
          const std::vector<float> want(ref.begin(), ref.begin() + s.out);
          std::vector<float> got;
          for (int rpw : {1, 2, 4}) {  // every rows-per-warp variant of the decode kernel
            dy.poison();
            hc::matvec_variant(ctx(), dw.view, dx.p(), 1, dy.p(), rpw);
            got = dy.get();
            got.resize(static_cast<size_t>(s.out));
            check("matvec-r" + std::to_string(rpw), hc::wtype_name(t), dims({s.out, s.in}) + " n=1 " + s.what, got,
                  want, 1e-5);
          }
        }
      }
      // Explicit precision modes of the tiled path.
      const hc::GemmMode modes[] = {hc::GemmMode::F32, hc::GemmMode::Bf16};
      for (hc::GemmMode m : modes) {
        if (s.out * s.in > (int64_t{1} << 24)) continue;  // once per type on the smaller shapes is enough
        dy.poison();
        hc::matmul(ctx(), dw.view, dx.p(), nmax, dy.p(), m);
        check(m == hc::GemmMode::F32 ? "matmul-tiled-f32" : "matmul-tiled-bf16", hc::wtype_name(t),
              dims({s.out, s.in}) + " n=17", dy.get(), ref, m == hc::GemmMode::F32 ? 1e-5 : 1e-2);
      }
    }
  }
}

// Strided x / y (leading dimensions), as the engine uses for slices of wider buffers.
TEST_F(BackendOps, MatmulLeadingDimensions) {
  const int64_t out = 300, in = 512, ldx = 640, ldy = 320;
  for (hc::WType t : {hc::WType::BF16, hc::WType::MXFP4}) {
    const HostWeight hw = make_weight(t, out, in, 7001);
    for (int64_t n : {4, 12}) {
      std::vector<float> xs = randv(static_cast<size_t>(n * ldx), 7002);
      std::vector<float> x(static_cast<size_t>(n * in));
      for (int64_t r = 0; r < n; ++r) std::copy_n(xs.begin() + r * ldx, in, x.begin() + r * in);
      const std::vector<float> ref = cpu_matmul(hw, x, n);
      hc::DeviceWeight dw = upload(ctx(), hw);
      Dev<float> dx(ctx(), xs), dy(ctx(), static_cast<size_t>(n * ldy));
      dy.poison();
      hc::matmul(ctx(), dw.view, dx.p(), n, dy.p(), hc::GemmMode::F32, ldx, ldy);
      std::vector<float> full = dy.get(), got(static_cast<size_t>(n * out));
      for (int64_t r = 0; r < n; ++r) std::copy_n(full.begin() + r * ldy, out, got.begin() + r * out);
      check("matmul-ld", hc::wtype_name(t), dims({out, in}) + " n=" + std::to_string(n), got, ref, 1e-5);
    }
  }
}

TEST_F(BackendOps, VocabMatvec) {  // the LM head: 129280 x 4096, batch 1
  const int64_t V = 129280, D = 4096;
  const HostWeight hw = make_weight(hc::WType::BF16, V, D, 9001);
  const std::vector<float> x = randv(static_cast<size_t>(D), 9002);
  const std::vector<float> ref = cpu_matmul(hw, x, 1);
  hc::DeviceWeight dw = upload(ctx(), hw);
  Dev<float> dx(ctx(), x), dy(ctx(), static_cast<size_t>(V));
  dy.poison();
  hc::matmul(ctx(), dw.view, dx.p(), 1, dy.p());
  check("matvec", "BF16", dims({V, D}) + " n=1 lm_head", dy.get(), ref, 1e-5);
}

TEST_F(BackendOps, GroupedMatmulWoA) {  // wo_a: 8 groups of [1024, 4096] over x [n, 8*4096]
  const int groups = 8;
  const int64_t R = 1024, in = 4096;
  for (hc::WType t : {hc::WType::BF16, hc::WType::FP8_B128}) {
    const HostWeight hw = make_weight(t, groups * R, in, 9100 + static_cast<int>(t));
    for (int64_t n : {1, 3, 12}) {
      const std::vector<float> x = randv(static_cast<size_t>(n * groups * in), 9200 + n);
      const std::vector<float> ref = cpu_grouped_matmul(hw, groups, x, n);
      hc::DeviceWeight dw = upload(ctx(), hw);
      Dev<float> dx(ctx(), x), dy(ctx(), ref.size());
      dy.poison();
      hc::grouped_matmul(ctx(), dw.view, groups, dx.p(), n, dy.p());
      check("grouped_matmul", hc::wtype_name(t), "8x" + dims({R, in}) + " n=" + std::to_string(n), dy.get(), ref,
            n > hc::kMatvecMaxCols ? 1e-2 : 1e-5);
    }
  }
}

TEST_F(BackendOps, DequantizeRows) {
  for (hc::WType t : kAllTypes) {
    const HostWeight hw = make_weight(t, 300, 512, 9300 + static_cast<int>(t));
    const std::vector<int32_t> rows = {5, 0, 299, 128, 5};
    std::vector<float> ref;
    for (int32_t r : rows) ref.insert(ref.end(), hw.deq.begin() + r * 512, hw.deq.begin() + (r + 1) * 512);
    hc::DeviceWeight dw = upload(ctx(), hw);
    Dev<int32_t> dr(ctx(), rows);
    Dev<float> out(ctx(), ref.size());
    out.poison();
    hc::dequantize_rows(ctx(), dw.view, dr.p(), 0, static_cast<int64_t>(rows.size()), out.p());
    check("dequantize_rows", hc::wtype_name(t), "300x512 gather 5", out.get(), ref, 0.0);
  }
}

// GGUF block types: the GPU dequantization equals dequantize_row bit for bit, on random valid
// blocks with every code (wide scale ranges, f16 subnormals), by row gather, contiguous rows
// from r0, and through a row slice whose rows start off 16-byte alignment.
TEST_F(BackendOps, GgufDequantizeRandomBitExact) {
  const int64_t rows = 37, cols = 4352;  // 17 super-blocks / 136 blocks: partial last step
  uint64_t stream = 12000;
  for (const GgufCase& c : gguf_cases()) {
    const HostWeight hw = make_gguf_weight(c.type, rows, cols, ++stream, true);
    hc::DeviceWeight dw = hc::upload_gguf_weight(ctx(), c.type, hw.bytes.data(), rows, cols, c.keep_blocks);
    const std::vector<int32_t> idx = {36, 0, 5, 17, 5, 35, 1};
    std::vector<float> want;
    for (int32_t r : idx) want.insert(want.end(), hw.deq.begin() + r * cols, hw.deq.begin() + (r + 1) * cols);
    Dev<int32_t> dr(ctx(), idx);
    Dev<float> out(ctx(), static_cast<size_t>(rows * cols));
    out.poison();
    hc::dequantize_rows(ctx(), dw.view, dr.p(), 0, static_cast<int64_t>(idx.size()), out.p());
    std::vector<float> got = out.get();
    got.resize(want.size());
    check_exact("gguf-dequant", label(c), dims({rows, cols}) + " gather 7", bit_mismatches(got, want));

    out.poison();
    hc::dequantize_rows(ctx(), dw.view, nullptr, 3, rows - 3, out.p());  // rows 3..36
    got = out.get();
    got.resize(static_cast<size_t>((rows - 3) * cols));
    check_exact("gguf-dequant", label(c), dims({rows, cols}) + " rows 3..36",
                bit_mismatches(got, std::vector<float>(hw.deq.begin() + 3 * cols, hw.deq.end())));

    const hc::WeightView sl = dw.view.slice_rows(5, 31);  // rows 5..35
    out.poison();
    hc::dequantize_rows(ctx(), sl, nullptr, 0, 31, out.p());
    got = out.get();
    got.resize(static_cast<size_t>(31 * cols));
    check_exact("gguf-dequant", label(c), dims({rows, cols}) + " slice 5..35",
                bit_mismatches(got, std::vector<float>(hw.deq.begin() + 5 * cols, hw.deq.begin() + 36 * cols)));
  }
}

// The reference fixtures (tests/data/quants/TYPE.bin -> TYPE.f32, and the *.special corner
// cases) through the GPU, bit for bit.
TEST_F(BackendOps, GgufDequantizeFixtures) {
  const std::string dir = quant_fixture_dir();
  ASSERT_TRUE(std::filesystem::exists(dir + "/quants.json")) << "quant fixtures not found in " << dir;
  for (const GgufCase& c : gguf_cases()) {
    if (c.type == GgmlType::F32) continue;  // no fixture (a plain copy)
    for (const char* suffix : {"", ".special"}) {
      const std::string name = std::string(ggml_type_name(c.type)) + suffix;
      const std::vector<uint8_t> bin = read_bytes(dir + "/" + name + ".bin");
      const std::vector<uint8_t> ref = read_bytes(dir + "/" + name + ".f32");
      if (*suffix && bin.empty()) continue;  // only F16, BF16 and MXFP4 have special sets
      ASSERT_FALSE(bin.empty()) << name;
      const GgmlTypeInfo& info = ggml_type_info(c.type);
      const int64_t n_blocks = static_cast<int64_t>(bin.size()) / info.block_bytes;
      const int64_t n = n_blocks * info.block_elems;
      ASSERT_EQ(static_cast<int64_t>(ref.size()), n * 4) << name;
      // Rows of up to 8 blocks (plain types: up to 128 elements, a multiple of 8).
      int64_t bpr = info.block_elems == 1 ? 128 : 8;
      while (n_blocks % bpr) bpr /= 2;
      const int64_t cols = bpr * info.block_elems, rows = n / cols;
      hc::DeviceWeight dw = hc::upload_gguf_weight(ctx(), c.type, bin.data(), rows, cols, c.keep_blocks);
      Dev<float> out(ctx(), static_cast<size_t>(n));
      out.poison();
      hc::dequantize_rows(ctx(), dw.view, nullptr, 0, rows, out.p());
      std::vector<float> want(static_cast<size_t>(n));
      std::memcpy(want.data(), ref.data(), ref.size());
      check_exact("gguf-fixture", label(c) + suffix, dims({rows, cols}), bit_mismatches(out.get(), want));
    }
  }
}

// matmul on GGUF block weights vs dequantize_row + cpu::matmul: n = 1, 3, 8 (weight streaming,
// f32) and 16 (tiled: bf16 tensor cores by default, and GemmMode::F32), at the Flash expert
// shape 2048 x 4096 and an odd row count.
TEST_F(BackendOps, GgufMatmulAllTypes) {
  struct Shape {
    int64_t out, in;
    const char* what;
  };
  const Shape shapes[] = {{2048, 4096, "flash expert w1/w3"}, {37, 4352, "odd"}};
  const int64_t ns[] = {1, 3, 8, 16};
  const int64_t nmax = 16;
  uint64_t stream = 13000;
  for (const GgufCase& c : gguf_cases()) {
    for (const Shape& s : shapes) {
      const HostWeight hw = make_gguf_weight(c.type, s.out, s.in, ++stream, false);
      const std::vector<float> x = randv(static_cast<size_t>(nmax * s.in), ++stream);
      const std::vector<float> ref = cpu_matmul(hw, x, nmax);
      hc::DeviceWeight dw = hc::upload_gguf_weight(ctx(), c.type, hw.bytes.data(), s.out, s.in, c.keep_blocks);
      Dev<float> dx(ctx(), x);
      Dev<float> dy(ctx(), static_cast<size_t>(nmax * s.out));
      for (int64_t n : ns)
        check_matmul_n(ctx(), dw.view, dx.p(), dy.p(), ref, n, c.type == GgmlType::F32, "gguf-", label(c),
                       dims({s.out, s.in}), s.what);
      dy.poison();
      hc::matmul(ctx(), dw.view, dx.p(), nmax, dy.p(), hc::GemmMode::F32);
      check("gguf-matmul-f32", label(c), dims({s.out, s.in}) + " n=16 " + s.what, dy.get(), ref, 1e-5);
    }
  }
}

// The generic kernels' other entry points: grouped_matmul (x groups), strided x / y, and
// matvec_variant (which ignores its rows-per-warp for GGML_BLOCK).
TEST_F(BackendOps, GgufGroupedAndStrided) {
  const int groups = 4;
  const int64_t R = 256, in = 1024;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::IQ2_XXS, GgmlType::Q2_0_ROCMFP2}) {
    const HostWeight hw = make_gguf_weight(t, groups * R, in, 14000 + static_cast<uint64_t>(t), false);
    hc::DeviceWeight dw = hc::upload_gguf_weight(ctx(), t, hw.bytes.data(), groups * R, in);
    for (int64_t n : {1, 3, 12}) {
      const std::vector<float> x = randv(static_cast<size_t>(n * groups * in), 14100 + n);
      const std::vector<float> ref = cpu_grouped_matmul(hw, groups, x, n);
      Dev<float> dx(ctx(), x), dy(ctx(), ref.size());
      dy.poison();
      hc::grouped_matmul(ctx(), dw.view, groups, dx.p(), n, dy.p());
      check("gguf-grouped", ggml_type_name(t), "4x" + dims({R, in}) + " n=" + std::to_string(n), dy.get(), ref,
            n > hc::kMatvecMaxCols ? 1e-2 : 1e-5);
    }
    // Strided x / y.
    const int64_t out = groups * R, ldx = in + 64, ldy = out + 32;
    for (int64_t n : {4, 12}) {
      const std::vector<float> xs = randv(static_cast<size_t>(n * ldx), 14200 + n);
      std::vector<float> x(static_cast<size_t>(n * in));
      for (int64_t r = 0; r < n; ++r) std::copy_n(xs.begin() + r * ldx, in, x.begin() + r * in);
      const std::vector<float> ref = cpu_matmul(hw, x, n);
      Dev<float> dx(ctx(), xs), dy(ctx(), static_cast<size_t>(n * ldy));
      dy.poison();
      hc::matmul(ctx(), dw.view, dx.p(), n, dy.p(), hc::GemmMode::F32, ldx, ldy);
      std::vector<float> full = dy.get(), got(static_cast<size_t>(n * out));
      for (int64_t r = 0; r < n; ++r) std::copy_n(full.begin() + r * ldy, out, got.begin() + r * out);
      check("gguf-matmul-ld", ggml_type_name(t), dims({out, in}) + " n=" + std::to_string(n), got, ref, 1e-5);
    }
    const std::vector<float> x1 = randv(static_cast<size_t>(in), 14300);
    const std::vector<float> ref1 = cpu_matmul(hw, x1, 1);
    Dev<float> dx1(ctx(), x1), dy1(ctx(), ref1.size());
    dy1.poison();
    hc::matvec_variant(ctx(), dw.view, dx1.p(), 1, dy1.p(), 4);
    check("gguf-matvec-r4", ggml_type_name(t), dims({out, in}) + " n=1", dy1.get(), ref1, 1e-5);
  }
}

// The random-block generator itself (host only, runs without a GPU): every block it makes
// decodes to finite values, so the GPU comparisons above never compare NaN with NaN.
TEST(BackendOpsHost, GgufRandomBlocksAreFinite) {
  for (const GgufCase& c : gguf_cases()) {
    if (c.keep_blocks) continue;
    for (bool wide : {true, false}) {
      const HostWeight hw = make_gguf_weight(c.type, 9, 1024, 15000 + static_cast<uint64_t>(c.type), wide);
      int64_t bad = 0;
      for (float v : hw.deq) bad += !std::isfinite(v);
      EXPECT_EQ(bad, 0) << label(c) << (wide ? " wide" : " narrow");
    }
  }
}

TEST_F(BackendOps, GgufUploadRejects) {
  // A Lucebox block with an invalid UE4M3 scale byte (the CPU dequantizer refuses it too).
  std::vector<uint8_t> blk(18 * 4, 0x11);
  blk[18 * 2 + 17] = 0x80;
  EXPECT_THROW(hc::upload_gguf_weight(ctx(), GgmlType::Q4_0_ROCMFP4, blk.data(), 1, 128), Error);
  blk[18 * 2 + 17] = 0x7f;
  EXPECT_THROW(hc::upload_gguf_weight(ctx(), GgmlType::Q4_0_ROCMFP4, blk.data(), 1, 128), Error);
  blk[18 * 2 + 17] = 0x7e;
  EXPECT_NO_THROW(hc::upload_gguf_weight(ctx(), GgmlType::Q4_0_ROCMFP4, blk.data(), 1, 128));
  // Types without a CUDA decoder, and rows that are not whole blocks.
  EXPECT_FALSE(hc::cuda_supports_gguf_type(GgmlType::Q8_1));
  EXPECT_FALSE(hc::cuda_supports_gguf_type(GgmlType::I32));
  EXPECT_THROW(hc::upload_gguf_weight(ctx(), GgmlType::Q8_1, blk.data(), 1, 32), Error);
  EXPECT_THROW(hc::upload_gguf_weight(ctx(), GgmlType::Q4_K, blk.data(), 1, 128), Error);
  for (const GgufCase& c : gguf_cases()) EXPECT_TRUE(hc::cuda_supports_gguf_type(c.type)) << label(c);
}

TEST_F(BackendOps, RmsNorm) {
  struct Case {
    int64_t rows, d;
    bool weighted;
    const char* what;
  };
  const Case cases[] = {{1, 4096, true, "attn_norm"}, {7, 4096, true, "attn_norm"}, {3, 1024, true, "q_norm"},
                        {5, 512, true, "kv_norm"},    {64, 512, false, "q head norm 64x512"},
                        {3 * 64, 512, false, "q head norm"}, {9, 100, true, "odd"}};
  for (const Case& c : cases) {
    const std::vector<float> x = randv(static_cast<size_t>(c.rows * c.d), 200 + c.d + c.rows, 3.0f);
    const std::vector<float> w = randv(static_cast<size_t>(c.d), 300 + c.d);
    std::vector<float> ref = x;
    if (c.weighted) cpu::rmsnorm(x.data(), w.data(), c.rows, c.d, 1e-6f, ref.data());
    else cpu::rmsnorm_unweighted(ref.data(), c.rows, c.d, 1e-6f);
    Dev<float> dx(ctx(), x), dw(ctx(), w), dy(ctx(), x.size());
    if (c.weighted) {
      dy.poison();
      hc::rmsnorm(ctx(), dx.p(), dw.p(), c.rows, c.d, 1e-6f, dy.p());
      check("rmsnorm", "f32", dims({c.rows, c.d}) + " " + c.what, dy.get(), ref, 1e-5);
    } else {
      hc::rmsnorm(ctx(), dx.p(), nullptr, c.rows, c.d, 1e-6f, dx.p());  // in place
      check("rmsnorm-unw", "f32", dims({c.rows, c.d}) + " " + c.what, dx.get(), ref, 1e-5);
    }
  }
}

TEST_F(BackendOps, Rope) {
  struct Case {
    int64_t n, heads, hd;
    int rd;
    bool yarn;
    int sign;
  };
  const Case cases[] = {{1, 64, 512, 64, true, 1},  {5, 64, 512, 64, true, -1}, {3, 1, 512, 64, false, 1},
                        {4, 64, 128, 64, true, 1},  {2, 3, 16, 8, false, -1}};
  int k = 0;
  for (const Case& c : cases) {
    ++k;
    const std::vector<float> inv = c.yarn ? cpu::rope_inv_freq_yarn(c.rd, 160000.0f, 16.0f, 65536.0, 32.0f, 1.0f)
                                          : cpu::rope_inv_freq(c.rd, 10000.0f);
    std::vector<int64_t> pos(static_cast<size_t>(c.n));
    Rand r(400 + k);
    for (int64_t t = 0; t < c.n; ++t) pos[static_cast<size_t>(t)] = static_cast<int64_t>(r.bits(t) % 1048576);
    pos[0] = 0;
    const std::vector<float> x = randv(static_cast<size_t>(c.n * c.heads * c.hd), 500 + k);
    std::vector<float> ref = x;
    cpu::rope(ref.data(), c.n, c.heads, c.hd, c.rd, pos.data(), inv.data(), c.sign);
    Dev<float> dx(ctx(), x), dinv(ctx(), inv);
    Dev<int64_t> dpos(ctx(), pos);
    hc::rope(ctx(), dx.p(), c.n, c.heads, c.hd, c.rd, dpos.p(), dinv.p(), c.sign);
    check("rope", c.yarn ? "yarn" : "plain",
          dims({c.n, c.heads, c.hd}) + " rd=" + std::to_string(c.rd) + (c.sign < 0 ? " inverse" : ""), dx.get(), ref,
          1e-5);
  }
}

TEST_F(BackendOps, HyperConnections) {
  const int hcm = 4;
  for (int64_t D : {4096, 64}) {
    const int mix = (2 + hcm) * hcm;
    const int64_t len = hcm * D;
    const std::vector<float> fn = randv(static_cast<size_t>(mix * len), 600 + D, 2.0f / std::sqrt(static_cast<float>(len)));
    const std::vector<float> base = randv(static_cast<size_t>(mix), 601 + D, 0.5f);
    const std::vector<float> scale = {0.8f, 1.3f, 2.0f};
    const std::vector<float> hfn = randv(static_cast<size_t>(hcm * len), 602 + D, 2.0f / std::sqrt(static_cast<float>(len)));
    const std::vector<float> hbase = randv(static_cast<size_t>(hcm), 603 + D, 0.5f);
    const std::vector<float> hscale = {1.1f};
    Dev<float> dfn(ctx(), fn), dbase(ctx(), base), dscale(ctx(), scale), dhfn(ctx(), hfn), dhbase(ctx(), hbase),
        dhscale(ctx(), hscale);
    for (int64_t n : {1, 3, 37}) {
      const std::vector<float> X = randv(static_cast<size_t>(n * len), 610 + n + D, 2.0f);
      cpu::HcParams cp{fn.data(), base.data(), scale.data(), hcm, D, 20, 1e-6f, 1e-6f};
      std::vector<float> u(static_cast<size_t>(n * D)), post(static_cast<size_t>(n * hcm)),
          comb(static_cast<size_t>(n * hcm * hcm));
      cpu::hc_pre(pool(), cp, X.data(), n, u.data(), post.data(), comb.data());
      hc::HcParams gp;
      gp.fn = dfn.p();
      gp.base = dbase.p();
      gp.scale = dscale.p();
      gp.hc = hcm;
      gp.dim = D;
      Dev<float> dX(ctx(), X), du(ctx(), u.size()), dpost(ctx(), post.size()), dcomb(ctx(), comb.size());
      du.poison();
      dpost.poison();
      dcomb.poison();
      hc::hc_pre(ctx(), gp, dX.p(), n, du.p(), dpost.p(), dcomb.p());
      const std::string shape = dims({n, hcm, D});
      check("hc_pre.u", "f32", shape, du.get(), u, 1e-5);
      check("hc_pre.post", "f32", shape, dpost.get(), post, 1e-5);
      check("hc_pre.comb", "f32", shape, dcomb.get(), comb, 1e-5);

      // hc_post on the CPU's own post/comb, with a fresh sub-layer output y.
      const std::vector<float> y = randv(static_cast<size_t>(n * D), 620 + n + D);
      std::vector<float> Xr = X;
      cpu::hc_post(y.data(), post.data(), comb.data(), n, hcm, D, Xr.data());
      Dev<float> dy(ctx(), y);
      dpost.put(post);
      dcomb.put(comb);
      hc::hc_post(ctx(), dy.p(), dpost.p(), dcomb.p(), n, hcm, D, dX.p());
      check("hc_post", "f32", shape, dX.get(), Xr, 1e-5);

      std::vector<float> h(static_cast<size_t>(n * D));
      cpu::hc_head(hfn.data(), hbase.data(), hscale.data(), hcm, D, 1e-6f, 1e-6f, X.data(), n, h.data());
      dX.put(X);
      Dev<float> dh(ctx(), h.size());
      dh.poison();
      hc::HcParams hp = gp;
      hp.fn = dhfn.p();
      hp.base = dhbase.p();
      hp.scale = dhscale.p();
      hc::hc_head(ctx(), hp, dX.p(), n, dh.p());
      check("hc_head", "f32", shape, dh.get(), h, 1e-5);
    }
  }
}

TEST_F(BackendOps, CompressPool) {
  struct Case {
    int64_t entries;
    int slots;
    int64_t d;
    bool first_window;  // CSA entry 0: the previous-window slots are absent (-inf)
  };
  const Case cases[] = {{1, 8, 512, true}, {5, 8, 512, false}, {3, 128, 512, false}, {4, 8, 128, false},
                        {2, 8, 128, true}};
  int k = 0;
  for (const Case& c : cases) {
    ++k;
    const size_t n = static_cast<size_t>(c.entries * c.slots * c.d);
    const std::vector<float> kv = randv(n, 700 + k, 2.0f);
    std::vector<float> gate = randv(n, 710 + k, 4.0f);
    if (c.first_window)
      for (int64_t e = 0; e < c.entries; ++e)
        for (int s = 0; s < c.slots / 2; ++s)
          for (int64_t ch = 0; ch < c.d; ++ch)
            gate[static_cast<size_t>((e * c.slots + s) * c.d + ch)] = -std::numeric_limits<float>::infinity();
    std::vector<float> ref(static_cast<size_t>(c.entries * c.d));
    for (int64_t e = 0; e < c.entries; ++e)
      cpu::compress_pool(kv.data() + e * c.slots * c.d, gate.data() + e * c.slots * c.d, c.slots, c.d,
                         ref.data() + e * c.d);
    Dev<float> dkv(ctx(), kv), dg(ctx(), gate), dout(ctx(), ref.size());
    dout.poison();
    hc::compress_pool(ctx(), dkv.p(), dg.p(), c.slots, c.d, c.entries, dout.p());
    check("compress_pool", "f32",
          dims({c.entries, c.slots, c.d}) + (c.first_window ? " first window" : ""), dout.get(), ref, 1e-5);
  }
}

TEST_F(BackendOps, IndexerScoresAndTopk) {
  const int ih = 64, ratio = 4, k = 512;
  const int64_t id = 128;
  struct Case {
    int64_t nq, entries;
  };
  for (const Case& c : {Case{1, 65536}, Case{4, 3000}, Case{3, 100}}) {
    const std::vector<float> q = randv(static_cast<size_t>(c.nq * ih * id), 800 + c.entries);
    const std::vector<float> w = randv(static_cast<size_t>(c.nq * ih), 801 + c.entries, 0.011f);
    const std::vector<float> keys = randv(static_cast<size_t>(c.entries * id), 802 + c.entries);
    // Positions: the last query sees everything, others fewer entries (causal visibility).
    std::vector<int64_t> pos(static_cast<size_t>(c.nq));
    for (int64_t t = 0; t < c.nq; ++t) pos[static_cast<size_t>(t)] = (c.entries * ratio - 1) * (t + 1) / c.nq;
    std::vector<float> ref(static_cast<size_t>(c.nq * c.entries), -std::numeric_limits<float>::infinity());
    for (int64_t t = 0; t < c.nq; ++t) {
      const int64_t nv = std::min<int64_t>(c.entries, (pos[static_cast<size_t>(t)] + 1) / ratio);
      pool().parallel_for(nv, 256, [&](int64_t b, int64_t e) {
        cpu::indexer_scores(q.data() + t * ih * id, w.data() + t * ih, ih, id, keys.data() + b * id, e - b,
                            ref.data() + t * c.entries + b);
      });
    }
    Dev<float> dq(ctx(), q), dw(ctx(), w), dk(ctx(), keys), ds(ctx(), ref.size());
    Dev<int64_t> dpos(ctx(), pos);
    ds.poison();
    hc::indexer_scores(ctx(), dq.p(), dw.p(), c.nq, ih, id, dk.p(), c.entries, dpos.p(), ratio, ds.p());
    const std::vector<float> got = ds.get();
    check("indexer_scores", "f32", dims({c.nq, ih, id}) + " entries=" + std::to_string(c.entries), got, ref, 1e-5);

    // Top-k on the GPU's own scores vs cpu::topk_indices on the same numbers (exact).
    Dev<int32_t> dout(ctx(), static_cast<size_t>(c.nq * k));
    dout.poison();
    hc::topk(ctx(), ds.p(), c.nq, c.entries, dpos.p(), ratio, k, dout.p());
    const std::vector<int32_t> idx = dout.get();
    int64_t bad = 0;
    for (int64_t t = 0; t < c.nq; ++t) {
      const int64_t nv = std::min<int64_t>(c.entries, (pos[static_cast<size_t>(t)] + 1) / ratio);
      const std::vector<int32_t> want = cpu::topk_indices(got.data() + t * c.entries, nv, k);
      for (int i = 0; i < k; ++i) {
        const int32_t wv = i < static_cast<int>(want.size()) ? want[static_cast<size_t>(i)] : -1;
        bad += idx[static_cast<size_t>(t * k + i)] != wv;
      }
    }
    check_exact("topk", "f32", dims({c.nq, c.entries}) + " k=512", bad);
  }
}

TEST_F(BackendOps, TopkTiesAndSigns) {
  // Many exact ties (values on a coarse grid, both signs, +0 and -0): order must be
  // (score desc, index asc) exactly as cpu::topk_indices.
  const int64_t n = 20000;
  Rand r(850);
  std::vector<float> s(static_cast<size_t>(2 * n));
  for (size_t i = 0; i < s.size(); ++i) {
    const int v = static_cast<int>(r.bits(i) % 41) - 20;
    s[i] = v == 0 ? ((r.bits(i + 7) & 1) ? -0.0f : 0.0f) : static_cast<float>(v) * 0.25f;
  }
  for (int k : {1, 7, 512, 2048}) {
    Dev<float> ds(ctx(), s);
    Dev<int32_t> dout(ctx(), static_cast<size_t>(2 * k));
    dout.poison();
    hc::topk(ctx(), ds.p(), 2, n, nullptr, 1, k, dout.p());
    const std::vector<int32_t> got = dout.get();
    int64_t bad = 0;
    for (int t = 0; t < 2; ++t) {
      const std::vector<int32_t> want = cpu::topk_indices(s.data() + t * n, n, k);
      for (int i = 0; i < k; ++i) bad += got[static_cast<size_t>(t * k + i)] != want[static_cast<size_t>(i)];
    }
    check_exact("topk-ties", "f32", "2x20000 k=" + std::to_string(k), bad);
  }
}

TEST_F(BackendOps, AttentionSinkDecode) {
  const int64_t H = 64, hd = 512;
  struct Case {
    int64_t nq, pool_rows, rows;
    const char* what;
  };
  const Case cases[] = {{1, 128 + 2048, 128 + 512, "CSA window+top512"},
                        {2, 128 + 8192, 128 + 8192, "HCA 1M ctx"},
                        {3, 500, 37, "short"},
                        {1, 10, 1, "one row"}};
  int k = 0;
  for (const Case& c : cases) {
    ++k;
    const std::vector<float> q = randv(static_cast<size_t>(c.nq * H * hd), 900 + k);
    const std::vector<float> kv = randv(static_cast<size_t>(c.pool_rows * hd), 910 + k);
    const std::vector<float> sinks = randv(static_cast<size_t>(H), 920 + k, 3.0f);
    Rand r(930 + k);
    std::vector<int32_t> rows(static_cast<size_t>(c.nq * c.rows));
    std::vector<int32_t> n_rows(static_cast<size_t>(c.nq));
    for (int64_t t = 0; t < c.nq; ++t) {
      n_rows[static_cast<size_t>(t)] = static_cast<int32_t>(c.rows - (t * c.rows) / (c.nq + 1));  // differ per query
      for (int64_t j = 0; j < c.rows; ++j)
        rows[static_cast<size_t>(t * c.rows + j)] = static_cast<int32_t>(r.bits(t * c.rows + j) % c.pool_rows);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    std::vector<float> ref(static_cast<size_t>(c.nq * H * hd));
    for (int64_t t = 0; t < c.nq; ++t) {
      std::vector<const float*> ptrs;
      for (int32_t j = 0; j < n_rows[static_cast<size_t>(t)]; ++j)
        ptrs.push_back(kv.data() + static_cast<int64_t>(rows[static_cast<size_t>(t * c.rows + j)]) * hd);
      cpu::attention_sink(q.data() + t * H * hd, H, hd, ptrs.data(), static_cast<int64_t>(ptrs.size()), sinks.data(),
                          scale, ref.data() + t * H * hd);
    }
    Dev<float> dq(ctx(), q), dkv(ctx(), kv), ds(ctx(), sinks), dout(ctx(), ref.size());
    Dev<int32_t> drows(ctx(), rows), dn(ctx(), n_rows);
    dout.poison();
    hc::AttnRows ar;
    ar.kv = dkv.p();
    ar.rows = drows.p();
    ar.n_rows = dn.p();
    ar.rows_ld = c.rows;
    hc::attention_sink(ctx(), dq.p(), c.nq, H, hd, ar, ds.p(), scale, dout.p());
    check("attention_sink", "f32", dims({c.nq, H, hd}) + " rows=" + std::to_string(c.rows) + " " + c.what, dout.get(),
          ref, 1e-5);
  }
}

TEST_F(BackendOps, MoeRoute) {
  const int E = 256, K = 6;
  const float route_scale = 1.5f;
  for (int64_t n : {1, 7, 64}) {
    const std::vector<float> logits = randv(static_cast<size_t>(n * E), 1000 + n, 4.0f);
    const std::vector<float> bias = randv(static_cast<size_t>(E), 1001, 0.3f);
    const int V = 1000;
    std::vector<int32_t> tid2eid(static_cast<size_t>(V * K)), tokens(static_cast<size_t>(n));
    Rand r(1002 + n);
    for (size_t i = 0; i < tid2eid.size(); ++i) tid2eid[i] = static_cast<int32_t>(r.bits(i) % E);
    for (int64_t t = 0; t < n; ++t) tokens[static_cast<size_t>(t)] = static_cast<int32_t>(r.bits(100000 + t) % V);
    Dev<float> dl(ctx(), logits), db(ctx(), bias), dw(ctx(), static_cast<size_t>(n * K));
    Dev<int32_t> dt(ctx(), tid2eid), dtok(ctx(), tokens), di(ctx(), static_cast<size_t>(n * K));
    for (bool hash : {false, true}) {
      std::vector<int32_t> ridx(static_cast<size_t>(n * K));
      std::vector<float> rw(static_cast<size_t>(n * K));
      for (int64_t t = 0; t < n; ++t)
        cpu::moe_route(logits.data() + t * E, E, K, hash ? nullptr : bias.data(),
                       hash ? tid2eid.data() + static_cast<int64_t>(tokens[static_cast<size_t>(t)]) * K : nullptr,
                       route_scale, ridx.data() + t * K, rw.data() + t * K);
      di.poison();
      dw.poison();
      hc::moe_route(ctx(), dl.p(), n, E, K, hash ? nullptr : db.p(), hash ? dt.p() : nullptr, dtok.p(), route_scale,
                    di.p(), dw.p());
      const std::vector<int32_t> gi = di.get();
      int64_t bad = 0;
      for (size_t i = 0; i < gi.size(); ++i) bad += gi[i] != ridx[i];
      const std::string shape = dims({n, E}) + " k=6" + (hash ? " hash" : " bias");
      check_exact("moe_route.idx", "f32", shape, bad);
      check("moe_route.weight", "f32", shape, dw.get(), rw, 1e-5);
    }
  }
}

TEST_F(BackendOps, SwigluClamp) {
  const int64_t n = 6 * 2048 + 3;
  const std::vector<float> g = randv(static_cast<size_t>(n), 1100, 20.0f), u = randv(static_cast<size_t>(n), 1101, 20.0f);
  std::vector<float> ref(static_cast<size_t>(n));
  cpu::swiglu_clamp(g.data(), u.data(), n, 10.0f, ref.data());
  Dev<float> dg(ctx(), g), du(ctx(), u), dh(ctx(), ref.size());
  dh.poison();
  hc::swiglu_clamp(ctx(), dg.p(), du.p(), n, 10.0f, dh.p());
  check("swiglu_clamp", "f32", std::to_string(n) + " limit=10", dh.get(), ref, 1e-5);
}

// ---- sampling: a CPU twin with the semantics documented in ops_cuda.h

namespace {
int32_t sample_ref(const float* logits, int64_t V, const hc::SamplingParams& sp, float u) {
  if (sp.temperature <= 0.f || sp.top_k == 1) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[b]) b = i;
    return static_cast<int32_t>(b);
  }
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  const int64_t m = sp.top_k > 0 ? std::min<int64_t>(sp.top_k, V) : V;
  const float inv_t = 1.0f / sp.temperature;
  const float z0 = logits[order[0]] * inv_t;
  std::vector<double> e(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) e[static_cast<size_t>(i)] = std::exp(logits[order[static_cast<size_t>(i)]] * inv_t - z0);
  int64_t m2 = m;
  if (sp.min_p > 0.f) {
    m2 = 0;
    while (m2 < m && e[static_cast<size_t>(m2)] >= sp.min_p) ++m2;
    m2 = std::max<int64_t>(m2, 1);
  }
  double z2 = 0;
  for (int64_t i = 0; i < m2; ++i) z2 += e[static_cast<size_t>(i)];
  int64_t m3 = m2;
  if (sp.top_p < 1.0f) {
    double c = 0;
    for (int64_t i = 0; i < m2; ++i) {
      c += e[static_cast<size_t>(i)];
      if (c >= sp.top_p * z2) {
        m3 = i + 1;
        break;
      }
    }
  }
  double z3 = 0;
  for (int64_t i = 0; i < m3; ++i) z3 += e[static_cast<size_t>(i)];
  double c = 0;
  for (int64_t i = 0; i < m3; ++i) {
    c += e[static_cast<size_t>(i)];
    if (c > u * z3) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(m3 - 1)];
}
}  // namespace

TEST_F(BackendOps, Sampling) {
  const int64_t V = 129280, rows = 2;
  std::vector<float> logits = randv(static_cast<size_t>(rows * V), 1200, 6.0f);
  logits[1234] = logits[77777] = 40.0f;  // a tie for the maximum in row 0: greedy takes the lower id
  Dev<float> dl(ctx(), logits);
  Dev<int32_t> dout(ctx(), static_cast<size_t>(rows));
  struct Conf {
    hc::SamplingParams sp;
    const char* what;
  };
  const Conf confs[] = {
      {{0.0f, 0, 1.0f, 0.0f}, "greedy"},
      {{1.0f, 0, 1.0f, 0.0f}, "temperature 1 (full sort)"},
      {{0.7f, 40, 0.9f, 0.0f}, "T0.7 top_k40 top_p0.9"},
      {{1.3f, 0, 0.95f, 0.05f}, "T1.3 top_p0.95 min_p0.05"},
      {{1.0f, 5000, 1.0f, 0.02f}, "top_k5000 min_p0.02"},
      {{2.0f, 2048, 0.5f, 0.0f}, "T2 top_k2048 top_p0.5"},
  };
  Rand r(1201);
  int64_t draw = 0;
  for (const Conf& c : confs) {
    int64_t bad = 0;
    const int draws = c.sp.temperature <= 0.f ? 1 : 16;
    for (int d = 0; d < draws; ++d) {
      std::vector<float> u(static_cast<size_t>(rows));
      for (auto& v : u) v = static_cast<float>(r.bits(static_cast<uint64_t>(++draw)) >> 40) * 0x1p-24f;
      dout.poison();
      hc::sample(ctx(), dl.p(), rows, V, c.sp, u, dout.p());
      const std::vector<int32_t> got = dout.get();
      for (int64_t t = 0; t < rows; ++t)
        bad += got[static_cast<size_t>(t)] != sample_ref(logits.data() + t * V, V, c.sp, u[static_cast<size_t>(t)]);
    }
    check_exact("sample", "f32", std::string("V=129280 ") + c.what, bad);
  }
}

#else  // !HS_HAVE_CUDA

TEST(BackendOps, Skipped) { GTEST_SKIP() << "built without CUDA (HS_CUDA=OFF)"; }

#endif
