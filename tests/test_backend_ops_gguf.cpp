// CUDA dequantisation and matmul of every GGUF block type vs the CPU twins (format/quants):
// bit-exact dequantisation on random valid blocks and on the fixture blocks, matmul within
// the f32 / bf16 tolerances of test_backend_ops.cpp. Without a GPU every test is SKIPPED.
#include <gtest/gtest.h>

#ifdef HS_HAVE_CUDA
#include "backend_ops_util.h"

namespace {

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

}  // namespace

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
            hc::matmul_path(dw.view, n, hc::GemmMode::Auto) == hc::MatmulPath::Tiled ? 1e-2 : 1e-5);
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

#else  // !HS_HAVE_CUDA

TEST(BackendOpsGguf, Skipped) { GTEST_SKIP() << "built without CUDA (HS_CUDA=OFF)"; }

#endif
