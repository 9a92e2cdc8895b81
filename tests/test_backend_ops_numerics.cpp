// The model-numerics round trips on the GPU (kernels/cuda/quant_sim_cuda.h) vs their CPU twins
// (CpuOps::round_bf16 / act_quant_fp8 / kv_fp8_sim / indexer_fp4_sim), which must agree bit for
// bit on fresh random inputs full of zeros of both signs, denormals, huge values, values on and
// between the e4m3/e2m1 grids (ties), and blocks or rows whose amax is 0 or below the floor; and
// the synthetic weights made in device memory (kernels/cuda/synth_fill_cuda.h): every row one of
// the pool's rows, seeds that differ, no NaN/Inf, and the fill rate of a Flash expert stack.
// The ops run in place; the elements past the end of each buffer are poisoned and must stay so.
// Without a GPU every test is SKIPPED.
#include <gtest/gtest.h>

#ifdef HS_HAVE_CUDA
#include "backend_ops_util.h"
#include "engine/cpu_ops.h"
#include "kernels/cuda/quant_sim_cuda.h"
#include "kernels/cuda/synth_fill_cuda.h"

namespace {

// ---- inputs

enum class Range { Full, Moderate };  // Moderate: |x| < 2^74, so Hadamard sums stay finite

// Per element: 0, -0, denormals, huge and tiny normals, values with 4 mantissa bits (exact
// ties of the e4m3 grid after a power-of-two scale), and plain values over 2^-12..2^12. Then
// per row: whole 128-chunks at 0 or far below the FP8 floor; every 7th row all zeros, every
// 11th all denormals or -0, every 13th below the floor.
std::vector<float> special_inputs(int64_t rows, int64_t cols, uint64_t stream, Range range) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  Rand r(stream);
  const uint32_t huge_top = range == Range::Full ? 254 : 200;
  pool().parallel_for(rows, 4, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      float* x = v.data() + row * cols;
      for (int64_t i = 0; i < cols; ++i) {
        const uint64_t h = r.bits(static_cast<uint64_t>(row * cols + i));
        const uint32_t sign = static_cast<uint32_t>(h >> 63) << 31;
        const uint32_t man = static_cast<uint32_t>(h >> 8) & 0x7fffffu;
        const uint32_t pick = static_cast<uint32_t>((h >> 40) & 0xff);
        uint32_t bits;
        switch (h % 16) {
          case 0: bits = 0; break;
          case 1: bits = 0x80000000u; break;
          case 2: bits = sign | man; break;                                  // denormal
          case 3: bits = sign | ((huge_top - pick % 24) << 23) | man; break;  // huge
          case 4: bits = sign | ((1 + pick % 24) << 23) | man; break;         // tiny normal
          case 5:
          case 6:
          case 7: bits = sign | ((115 + pick % 24) << 23) | (man & 0x780000u); break;  // 4 mantissa bits
          default: bits = sign | ((115 + pick % 24) << 23) | man; break;
        }
        x[i] = bits_to_f32(bits);
      }
      for (int64_t c0 = 0; c0 < cols; c0 += 128) {
        const uint64_t h = r.bits(~static_cast<uint64_t>(row * cols + c0));
        const int64_t c1 = std::min<int64_t>(cols, c0 + 128);
        if (h % 10 == 0) std::fill(x + c0, x + c1, 0.0f);
        if (h % 10 == 1)
          for (int64_t i = c0; i < c1; ++i) x[i] *= 0x1p-40f;
      }
      if (row % 7 == 3) std::fill(x, x + cols, 0.0f);
      if (row % 11 == 5)
        for (int64_t i = 0; i < cols; ++i) x[i] = i % 3 ? bits_to_f32(static_cast<uint32_t>(r.bits(i) & 0x807fffffu)) : -0.0f;
      if (row % 13 == 7)
        for (int64_t i = 0; i < cols; ++i) x[i] = r.uni(static_cast<uint64_t>(row * cols + i)) * 1e-6f;
    }
  });
  return v;
}

// ---- running an in-place op on a poisoned buffer

struct Out {
  std::vector<float> v;
  int64_t guard_bad = 0;  // poisoned elements past the end that were overwritten
};

template <typename Op>
Out run_in_place(hc::DeviceContext& c, const std::vector<float>& in, Op op) {
  constexpr size_t kGuard = 256;
  Dev<float> d(c, in.size() + kGuard);
  d.poison();
  c.upload(d.p(), in.data(), in.size() * sizeof(float));
  op(d.p());
  Out o;
  o.v = d.get();
  for (size_t i = in.size(); i < o.v.size(); ++i) o.guard_bad += f32_to_bits(o.v[i]) != 0xffffffffu;
  o.v.resize(in.size());
  return o;
}

// Elements whose bits differ; nan_equal: two NaNs count as equal (their payloads may differ).
int64_t mismatches(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& in,
                   bool nan_equal = false) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (f32_to_bits(got[i]) == f32_to_bits(want[i])) continue;
    if (nan_equal && std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (bad++ < 3)
      std::printf("[backend-ops]   first mismatches: [%zu] in=%a (0x%08x) got=%a (0x%08x) want=%a (0x%08x)\n", i,
                  in[i], f32_to_bits(in[i]), got[i], f32_to_bits(got[i]), want[i], f32_to_bits(want[i]));
  }
  return bad;
}

void expect_exact(const std::string& op, const std::string& shape, const Out& got, const std::vector<float>& want,
                  const std::vector<float>& in, bool nan_equal = false) {
  const int64_t bad = mismatches(got.v, want, in, nan_equal);
  EXPECT_EQ(got.guard_bad, 0) << op << " " << shape << " wrote past the end";
  check_exact(op, nan_equal ? "f32+nonfin" : "f32", shape, bad + got.guard_bad);
}

// Median time of `reps` runs of fn, in seconds.
template <typename Fn>
double time_it(hc::DeviceContext& c, int reps, Fn fn) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    c.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    c.synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Round trips: bit-exact with the CPU twins.

TEST_F(BackendOps, NumericsRoundBf16) {
  CpuOps cpu(pool());
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{600} * 4096 + 3}) {
    std::vector<float> in = special_inputs(1, n, 1300 + n, Range::Full);
    in[0] = bits_to_f32(0x7f7fffffu);  // rounds to +inf
    if (n > 2) in[1] = bits_to_f32(0x3f808000u), in[2] = bits_to_f32(0x3f818000u);  // ties to even, both ways
    std::vector<float> want = in;
    cpu.round_bf16(want.data(), n);
    const Out got = run_in_place(ctx(), in, [&](float* p) { hc::round_bf16(ctx(), p, n); });
    expect_exact("round_bf16", "n=" + std::to_string(n), got, want, in);
  }
}

// The BF16 rounding points folded into rmsnorm, RoPE, scale and hc_post (one launch each in
// model numerics) against the unfused sequence round_bf16 -> op -> round_bf16 on the same GPU:
// the values must be the same bits (same kernels' arithmetic, the rounding exact), for every
// combination of in/out, at the Flash widths.
TEST_F(BackendOps, NumericsFusedRounding) {
  auto fetch = [&](const hc::DeviceBuffer& b, int64_t n) {
    std::vector<float> h(static_cast<size_t>(n));
    ctx().synchronize();
    ctx().download(h.data(), b.data(), h.size() * 4);
    return h;
  };
  auto put = [&](const std::vector<float>& v) {
    hc::DeviceBuffer b = ctx().alloc(v.size() * 4);
    ctx().upload(b.data(), v.data(), v.size() * 4);
    return b;
  };
  auto differ = [](const std::vector<float>& a, const std::vector<float>& b) {
    int64_t m = 0;
    for (size_t i = 0; i < a.size(); ++i) m += std::memcmp(&a[i], &b[i], 4) != 0;
    return m;
  };
  const std::vector<float> inv = cpu::rope_inv_freq_yarn(64, 160000.0f, 16.0f, 65536.0, 32.0f, 1.0f);
  hc::DeviceBuffer dinv = put(inv);
  for (const hc::Bf16Round r : {hc::Bf16Round{true, false}, hc::Bf16Round{false, true}, hc::Bf16Round{true, true}}) {
    const std::string tag = std::string(r.in ? "in" : "") + (r.out ? "out" : "");
    // rmsnorm over 3 rows of 4096 (weighted, out of place) and 64 heads of 512 (unweighted, in place)
    for (const bool weighted : {true, false}) {
      const int64_t rows = weighted ? 3 : 64, d = weighted ? 4096 : 512;
      const std::vector<float> x = randv(static_cast<size_t>(rows * d), 1400 + weighted, 3.0f);
      const std::vector<float> w = randv(static_cast<size_t>(d), 1410);
      hc::DeviceBuffer dw = put(w), xa = put(x), xb = put(x), ya = ctx().alloc(x.size() * 4), yb = ctx().alloc(x.size() * 4);
      float* ya_p = weighted ? ya.as<float>() : xa.as<float>();
      float* yb_p = weighted ? yb.as<float>() : xb.as<float>();
      const float* wp = weighted ? dw.as<float>() : nullptr;
      if (r.in) hc::round_bf16(ctx(), xa.as<float>(), rows * d);
      hc::rmsnorm(ctx(), xa.as<float>(), wp, rows, d, 1e-6f, ya_p);
      if (r.out) hc::round_bf16(ctx(), ya_p, rows * d);
      hc::rmsnorm_bf16(ctx(), xb.as<float>(), wp, rows, d, 1e-6f, yb_p, r);
      const int64_t m = differ(fetch(xa, rows * d), fetch(xb, rows * d)) +
                        (weighted ? differ(fetch(ya, rows * d), fetch(yb, rows * d)) : 0);
      check_exact("rmsnorm_bf16", tag, dims({rows, d}) + (weighted ? " weighted" : " unweighted"), m);
    }
    // rmsnorm with the FP8 copy of its output (the FP8 linears' input) folded in, out of place
    // and in place (y = fp8_out): against rmsnorm_bf16, then act_quant_fp8 out of place
    for (const int64_t d : {int64_t{4096}, int64_t{1024}, int64_t{200}}) {
      const int64_t rows = 5;
      const std::vector<float> x = randv(static_cast<size_t>(rows * d), 1450 + d, 3.0f);
      const std::vector<float> w = randv(static_cast<size_t>(d), 1451);
      hc::DeviceBuffer dw = put(w), xa = put(x), xb = put(x), xc = put(x);
      hc::DeviceBuffer ya = ctx().alloc(x.size() * 4), qa = ctx().alloc(x.size() * 4), yb = ctx().alloc(x.size() * 4),
                       qb = put(std::vector<float>(x.size(), std::nanf("")));
      hc::rmsnorm_bf16(ctx(), xa.as<float>(), dw.as<float>(), rows, d, 1e-6f, ya.as<float>(), r);
      hc::act_quant_fp8(ctx(), qa.as<float>(), ya.as<float>(), rows, d);
      hc::rmsnorm_bf16(ctx(), xb.as<float>(), dw.as<float>(), rows, d, 1e-6f, yb.as<float>(), r, qb.as<float>());
      hc::rmsnorm_bf16(ctx(), xc.as<float>(), dw.as<float>(), rows, d, 1e-6f, xc.as<float>(), r, xc.as<float>());
      const std::vector<float> qwant = fetch(qa, rows * d);
      const int64_t m = differ(fetch(xa, rows * d), fetch(xb, rows * d)) + differ(fetch(ya, rows * d), fetch(yb, rows * d)) +
                        differ(qwant, fetch(qb, rows * d));
      check_exact("rmsnorm_bf16 fp8_out", tag, dims({rows, d}), m);
      check_exact("rmsnorm_bf16 fp8_out", tag, dims({rows, d}) + " in place", differ(qwant, fetch(xc, rows * d)));
    }
    // RoPE on [2, 64, 512] with rope_dim 64 at positions 5, 6 (forward and inverse)
    for (const int sign : {1, -1}) {
      const std::vector<float> x = randv(size_t{2} * 64 * 512, 1420, 2.0f);
      hc::DeviceBuffer xa = put(x), xb = put(x);
      if (r.in) hc::round_bf16(ctx(), xa.as<float>(), 2 * 64 * 512);
      hc::rope_affine(ctx(), xa.as<float>(), 2, 64, 512, 64, 5, 1, dinv.as<float>(), sign);
      if (r.out) hc::round_bf16(ctx(), xa.as<float>(), 2 * 64 * 512);
      hc::rope_bf16(ctx(), xb.as<float>(), 2, 64, 512, 64, nullptr, 5, 1, dinv.as<float>(), sign, r);
      check_exact("rope_bf16", tag, sign > 0 ? "[2, 64, 512] rd=64" : "[2, 64, 512] rd=64 inverse",
                  differ(fetch(xa, 2 * 64 * 512), fetch(xb, 2 * 64 * 512)));
    }
    {  // scale of 64 indexer head weights
      const std::vector<float> x = randv(64, 1430, 5.0f);
      hc::DeviceBuffer xa = put(x), xb = put(x);
      if (r.in) hc::round_bf16(ctx(), xa.as<float>(), 64);
      hc::scale(ctx(), xa.as<float>(), 64, 0.125f);
      if (r.out) hc::round_bf16(ctx(), xa.as<float>(), 64);
      hc::scale_bf16(ctx(), xb.as<float>(), 64, 0.125f, r);
      check_exact("scale_bf16", tag, "64", differ(fetch(xa, 64), fetch(xb, 64)));
    }
  }
  // rmsnorm + RoPE in one launch against rmsnorm_bf16 then rope_bf16 / rope_affine: the query
  // ([3, 64, 512], unweighted, positions 7, 9, 4 from a device array) and the KV row ([3, 1, 512],
  // weighted, positions 5, 6, 7 affine) with model numerics' rounding points, and both unrounded.
  for (const bool kv : {false, true})
    for (const bool model : {true, false}) {
      const int64_t n = 3, heads = kv ? 1 : 64, hd = 512, rows = n * heads;
      const hc::Bf16Round nr = !model ? hc::Bf16Round{} : kv ? hc::Bf16Round{true, true} : hc::Bf16Round{true, false};
      const hc::Bf16Round rr = !model || kv ? hc::Bf16Round{} : hc::Bf16Round{false, true};
      const std::vector<float> x = randv(static_cast<size_t>(rows * hd), 1460 + kv, 3.0f);
      const std::vector<float> w = randv(static_cast<size_t>(hd), 1461);
      const std::vector<int64_t> pos = {7, 9, 4};
      hc::DeviceBuffer dw = put(w), xa = put(x), xb = put(x), dpos = ctx().alloc(pos.size() * 8);
      ctx().upload(dpos.data(), pos.data(), pos.size() * 8);
      const int64_t* pp = kv ? nullptr : dpos.as<int64_t>();
      const int64_t p0 = kv ? 5 : 0, stride = kv ? 1 : 0;
      const float* wp = kv ? dw.as<float>() : nullptr;
      hc::rmsnorm_bf16(ctx(), xa.as<float>(), wp, rows, hd, 1e-6f, xa.as<float>(), nr);
      if (rr.in || rr.out)
        hc::rope_bf16(ctx(), xa.as<float>(), n, heads, hd, 64, pp, p0, stride, dinv.as<float>(), 1, rr);
      else
        hc::rope_affine(ctx(), xa.as<float>(), n, heads, hd, 64, pp, p0, stride, dinv.as<float>(), 1);
      hc::rmsnorm_rope(ctx(), xb.as<float>(), wp, n, heads, hd, 1e-6f, nr, 64, pp, p0, stride, dinv.as<float>(), rr);
      check_exact("rmsnorm_rope", model ? "model" : "reference", dims({n, heads, hd}),
                  differ(fetch(xa, rows * hd), fetch(xb, rows * hd)));
    }
  {  // hc_post with the output rounded: X [2, 4, 4096]
    const int64_t n = 2, hcm = 4, D = 4096;
    const std::vector<float> X = randv(static_cast<size_t>(n * hcm * D), 1440), y = randv(static_cast<size_t>(n * D), 1441);
    const std::vector<float> post = randv(static_cast<size_t>(n * hcm), 1442), comb = randv(static_cast<size_t>(n * hcm * hcm), 1443);
    hc::DeviceBuffer xa = put(X), xb = put(X), dy = put(y), dp = put(post), dc = put(comb);
    hc::hc_post(ctx(), dy.as<float>(), dp.as<float>(), dc.as<float>(), n, hcm, D, xa.as<float>());
    hc::round_bf16(ctx(), xa.as<float>(), n * hcm * D);
    hc::hc_post(ctx(), dy.as<float>(), dp.as<float>(), dc.as<float>(), n, hcm, D, xb.as<float>(), true);
    check_exact("hc_post_bf16", "out", "[2, 4, 4096]", differ(fetch(xa, n * hcm * D), fetch(xb, n * hcm * D)));
  }
}

TEST_F(BackendOps, NumericsActQuantFp8) {
  CpuOps cpu(pool());
  struct Case {
    int64_t rows, cols;
  };
  std::vector<Case> cases;
  for (int64_t cols : {4096, 1024, 8192})
    for (int64_t rows : {1, 3, 64, 600}) cases.push_back({rows, cols});
  cases.push_back({5, 200});  // a partial last block
  cases.push_back({7, 96});   // one block narrower than 128
  for (const Case& k : cases) {
    const std::vector<float> in = special_inputs(k.rows, k.cols, 1400 + k.rows * 7 + k.cols, Range::Full);
    std::vector<float> want = in;
    cpu.act_quant_fp8(want.data(), k.rows, k.cols);
    const Out got = run_in_place(ctx(), in, [&](float* p) { hc::act_quant_fp8(ctx(), p, k.rows, k.cols); });
    expect_exact("act_quant_fp8", dims({k.rows, k.cols}), got, want, in);
    // Out of place (one launch instead of copy + in place): dst gets the same bits, src stays.
    Dev<float> src(ctx(), in), dst(ctx(), in.size());
    dst.poison();
    hc::act_quant_fp8(ctx(), dst.p(), src.p(), k.rows, k.cols);
    Out oop;
    oop.v = dst.get();
    expect_exact("act_quant_fp8", dims({k.rows, k.cols}) + " out of place", oop, want, in);
    check_exact("act_quant_fp8", "source kept", dims({k.rows, k.cols}), mismatches(src.get(), in, in, true));
    // With the BF16 rounding of its input folded in (model numerics' r = bf16(wo_a x), then FP8).
    std::vector<float> want_r = in;
    cpu.round_bf16(want_r.data(), k.rows * k.cols);
    cpu.act_quant_fp8(want_r.data(), k.rows, k.cols);
    const Out got_r = run_in_place(ctx(), in, [&](float* p) { hc::act_quant_fp8(ctx(), p, p, k.rows, k.cols, true); });
    // (The rounding turns the largest finite inputs into inf, whose FP8 blocks become NaN: the
    // NaN positions must match, their payloads differ between the CPU's and the GPU's NaN.)
    expect_exact("act_quant_fp8", dims({k.rows, k.cols}) + " bf16 in", got_r, want_r, in, true);
  }
}

TEST_F(BackendOps, NumericsKvFp8Sim) {
  CpuOps cpu(pool());
  struct Case {
    int64_t rows, head_dim, channels;
  };
  const Case cases[] = {{1, 512, 448}, {7, 512, 448}, {128, 512, 448}, {600, 512, 448},
                        {3, 100, 70},  {4, 512, 0},   {4, 512, 512},   {2, 128, 64}};
  for (const Case& k : cases) {
    const std::vector<float> in = special_inputs(k.rows, k.head_dim, 1500 + k.rows * 3 + k.channels, Range::Full);
    std::vector<float> want = in;
    cpu.kv_fp8_sim(want.data(), k.rows, k.head_dim, k.channels);
    const Out got =
        run_in_place(ctx(), in, [&](float* p) { hc::kv_fp8_sim(ctx(), p, k.rows, k.head_dim, k.channels); });
    expect_exact("kv_fp8_sim", dims({k.rows, k.head_dim}) + " ch=" + std::to_string(k.channels), got, want, in);
  }
}

TEST_F(BackendOps, NumericsIndexerFp4Sim) {
  CpuOps cpu(pool());
  struct Case {
    int64_t rows, d;
  };
  // d = 128 is Flash (q: n x 64 heads, keys: one row per entry); the rest cover the other
  // warp kernels and the one-thread-per-row fallback (d < 32 or > 1024).
  const Case cases[] = {{1, 128},  {64, 128}, {600, 128}, {600 * 64, 128}, {5, 32},  {9, 64},
                        {33, 256}, {3, 512},  {2, 1024},  {3, 2048},       {17, 16}, {4, 8}, {3, 1}};
  for (const Case& k : cases) {
    const std::vector<float> in = special_inputs(k.rows, k.d, 1600 + k.rows + k.d, Range::Moderate);
    std::vector<float> want = in;
    cpu.indexer_fp4_sim(want.data(), k.rows, k.d);
    const Out got = run_in_place(ctx(), in, [&](float* p) { hc::indexer_fp4_sim(ctx(), p, k.rows, k.d); });
    expect_exact("indexer_fp4_sim", dims({k.rows, k.d}), got, want, in);
  }
  float* none = nullptr;
  EXPECT_THROW(hc::indexer_fp4_sim(ctx(), none, 1, 96), Error);  // not a power of two
}

// Infinities and NaNs: NaN exactly where the CPU has NaN, the same bits everywhere else.
TEST_F(BackendOps, NumericsNonFinite) {
  CpuOps cpu(pool());
  const int64_t rows = 40;
  for (int64_t cols : {512, 4096}) {
    std::vector<float> in = special_inputs(rows, cols, 1700 + cols, Range::Full);
    Rand r(1701);
    for (size_t i = 0; i < in.size(); ++i) {
      const uint64_t h = r.bits(i) % 997;
      if (h == 0) in[i] = std::numeric_limits<float>::infinity();
      if (h == 1) in[i] = -std::numeric_limits<float>::infinity();
      if (h == 2) in[i] = std::numeric_limits<float>::quiet_NaN();
      if (h == 3) in[i] = -std::numeric_limits<float>::quiet_NaN();
    }
    const std::string shape = dims({rows, cols});
    {
      std::vector<float> want = in;
      cpu.round_bf16(want.data(), rows * cols);
      expect_exact("round_bf16", shape, run_in_place(ctx(), in, [&](float* p) { hc::round_bf16(ctx(), p, rows * cols); }),
                   want, in, true);
    }
    {
      std::vector<float> want = in;
      cpu.act_quant_fp8(want.data(), rows, cols);
      expect_exact("act_quant_fp8", shape,
                   run_in_place(ctx(), in, [&](float* p) { hc::act_quant_fp8(ctx(), p, rows, cols); }), want, in, true);
    }
    {
      std::vector<float> want = in;
      cpu.kv_fp8_sim(want.data(), rows * cols / 512, 512, 448);
      expect_exact("kv_fp8_sim", shape,
                   run_in_place(ctx(), in, [&](float* p) { hc::kv_fp8_sim(ctx(), p, rows * cols / 512, 512, 448); }),
                   want, in, true);
    }
    {
      std::vector<float> want = in;
      cpu.indexer_fp4_sim(want.data(), rows * cols / 128, 128);
      expect_exact("indexer_fp4_sim", shape,
                   run_in_place(ctx(), in, [&](float* p) { hc::indexer_fp4_sim(ctx(), p, rows * cols / 128, 128); }),
                   want, in, true);
    }
  }
}

TEST_F(BackendOps, NumericsThroughput) {  // informational: Flash shapes, 600 tokens
  const std::vector<float> in = special_inputs(600, 8192, 1800, Range::Moderate);
  Dev<float> d(ctx(), in);
  struct Op {
    const char* what;
    int64_t n;
    std::function<void()> run;
  };
  const Op ops[] = {
      {"round_bf16 600x4096", 600 * 4096, [&] { hc::round_bf16(ctx(), d.p(), 600 * 4096); }},
      {"act_quant_fp8 600x8192", 600 * 8192, [&] { hc::act_quant_fp8(ctx(), d.p(), 600, 8192); }},
      {"act_quant_fp8 600x4096", 600 * 4096, [&] { hc::act_quant_fp8(ctx(), d.p(), 600, 4096); }},
      {"kv_fp8_sim 600x512", 600 * 512, [&] { hc::kv_fp8_sim(ctx(), d.p(), 600, 512, 448); }},
      {"indexer_fp4_sim 38400x128", 600 * 64 * 128, [&] { hc::indexer_fp4_sim(ctx(), d.p(), 600 * 64, 128); }},
  };
  for (const Op& op : ops) {
    op.run();
    const double s = time_it(ctx(), 9, op.run);
    std::printf("[backend-ops] %-28s %8.1f us  %7.1f GB/s (read + write)\n", op.what, s * 1e6,
                2.0 * 4.0 * static_cast<double>(op.n) / s * 1e-9);
  }
}

// ---------------------------------------------------------------------------------------
// Synthetic weights in device memory.

namespace {

// Row r of the pool, dequantised on the host by the CPU codecs.
std::vector<float> pool_row(const hc::SynthPool::Entry& e, int64_t r) {
  std::vector<float> out(static_cast<size_t>(e.cols));
  if (e.type.fp8_b128) {
    for (int64_t c = 0; c < e.cols; ++c)
      out[static_cast<size_t>(c)] = e4m3_to_f32(e.bytes[static_cast<size_t>(r * e.cols + c)]) *
                                    e8m0_to_f32(e.fp8_scales[static_cast<size_t>(c / 128)]);
  } else {
    const int64_t rb = ggml_row_bytes(e.type.ggml, e.cols);
    dequantize_row(e.type.ggml, e.bytes.data() + r * rb, out.data(), e.cols);
  }
  return out;
}

std::vector<float> dequant_all(hc::DeviceContext& c, const hc::WeightView& v) {
  Dev<float> out(c, static_cast<size_t>(v.rows * v.cols));
  out.poison();
  hc::dequantize_rows(c, v, nullptr, 0, v.rows, out.p());
  return out.get();
}

std::vector<uint8_t> download_bytes(hc::DeviceContext& c, const hc::DeviceBuffer& b) {
  std::vector<uint8_t> h(b.bytes());
  c.synchronize();
  if (!h.empty()) c.download(h.data(), b.data(), h.size());
  return h;
}

const hc::SynthType kSynthTypes[] = {
    hc::SynthType::gguf(GgmlType::MXFP4), hc::SynthType::gguf(GgmlType::Q2_K), hc::SynthType::fp8(),
    hc::SynthType::gguf(GgmlType::Q8_0),  hc::SynthType::gguf(GgmlType::BF16), hc::SynthType::gguf(GgmlType::Q4_K),
    hc::SynthType::gguf(GgmlType::F32),   hc::SynthType::gguf(GgmlType::Q8_0, true),
    hc::SynthType::gguf(GgmlType::MXFP4, true)};

}  // namespace

// Each row of a made weight decodes (on the GPU) to exactly the pool row the hash names (decoded
// on the CPU); the whole 2048 x 4096 tensor is finite with the generator's spread.
TEST_F(BackendOps, SynthFillRowsFromPool) {
  hc::SynthPool sp(ctx(), 512, 77, &pool());
  struct Shape {
    int64_t rows, cols;
  };
  for (const hc::SynthType& t : kSynthTypes) {
    for (const Shape s : {Shape{2048, 4096}, Shape{300, 1024}}) {
      const uint64_t seed = hc::synth_tensor_seed(base_seed(), static_cast<uint64_t>(s.rows * 31 + s.cols));
      const hc::DeviceWeight w = hc::make_random_weight(ctx(), sp, t, s.rows, s.cols, seed);
      const hc::SynthPool::Entry& e = sp.get(t, s.cols);
      const std::string shape = dims({s.rows, s.cols});
      EXPECT_EQ(w.view.type, hc::synth_layout(t, s.rows, s.cols).type);
      // A few rows (block edges included) plus a random sample, gathered on the GPU.
      std::vector<int32_t> rows = {0, 1, 127, 128, 129, static_cast<int32_t>(s.rows - 1)};
      Rand r(1900);
      for (int i = 0; i < 58; ++i) rows.push_back(static_cast<int32_t>(r.bits(i) % static_cast<uint64_t>(s.rows)));
      std::vector<float> want;
      for (int32_t row : rows) {
        const std::vector<float> pr = pool_row(e, sp.source_row(seed, row));
        want.insert(want.end(), pr.begin(), pr.end());
      }
      Dev<int32_t> drows(ctx(), rows);
      Dev<float> got(ctx(), want.size());
      got.poison();
      hc::dequantize_rows(ctx(), w.view, drows.p(), 0, static_cast<int64_t>(rows.size()), got.p());
      const std::vector<float> g = got.get();
      int64_t bad = 0;
      for (size_t i = 0; i < g.size(); ++i) bad += f32_to_bits(g[i]) != f32_to_bits(want[i]);
      check_exact("synth rows=pool", t.name(), shape + " 64 rows", bad);
      // The full tensor: finite, mean ~0, rms ~1/sqrt(cols).
      const std::vector<float> all = dequant_all(ctx(), w.view);
      int64_t nonfinite = 0;
      double sum = 0, sq = 0;
      for (float v : all) {
        if (!std::isfinite(v)) {
          ++nonfinite;
          continue;
        }
        sum += v;
        sq += static_cast<double>(v) * v;
      }
      const double n = static_cast<double>(all.size());
      const double rms = std::sqrt(sq / n) * std::sqrt(static_cast<double>(s.cols));
      std::printf("[backend-ops] synth %-13s %-10s mean=%+.2e rms*sqrt(cols)=%.3f nonfinite=%lld\n", t.name().c_str(),
                  shape.c_str(), sum / n, rms, static_cast<long long>(nonfinite));
      check_exact("synth finite", t.name(), shape + " full dequant", nonfinite);
      EXPECT_GT(rms, 0.5) << t.name();
      EXPECT_LT(rms, 1.5) << t.name();
      EXPECT_LT(std::fabs(sum / n), 0.2 / std::sqrt(static_cast<double>(s.cols))) << t.name();
    }
  }
}

// The same seed gives the same bytes, another seed other rows; and filling caller-owned planes.
TEST_F(BackendOps, SynthFillSeeds) {
  hc::SynthPool sp(ctx(), 256, 78, &pool());
  const int64_t rows = 2048, cols = 4096;
  for (const hc::SynthType& t : {hc::SynthType::gguf(GgmlType::MXFP4), hc::SynthType::gguf(GgmlType::Q2_K),
                                 hc::SynthType::fp8(), hc::SynthType::gguf(GgmlType::Q8_0)}) {
    const hc::DeviceWeight a = hc::make_random_weight(ctx(), sp, t, rows, cols, 1);
    const hc::DeviceWeight b = hc::make_random_weight(ctx(), sp, t, rows, cols, 2);
    // Caller-owned planes (a bench arena) with seed 1 again.
    const hc::WeightView layout = hc::synth_layout(t, rows, cols);
    hc::DeviceBuffer data = ctx().alloc(static_cast<size_t>(layout.data_bytes()));
    hc::DeviceBuffer scales = ctx().alloc(static_cast<size_t>(std::max<int64_t>(layout.scale_bytes(), 1)));
    hc::WeightView v = layout;
    v.data = data.data();
    v.scales = layout.scale_bytes() > 0 ? scales.data() : nullptr;
    hc::fill_random_weight(ctx(), sp, t, v, 1);
    const std::vector<uint8_t> da = download_bytes(ctx(), a.data), db = download_bytes(ctx(), b.data),
                               dc = download_bytes(ctx(), data);
    EXPECT_TRUE(da == dc) << t.name() << ": the same seed must give the same weight";
    if (layout.scale_bytes() > 0) {
      std::vector<uint8_t> sc = download_bytes(ctx(), scales);
      sc.resize(static_cast<size_t>(layout.scale_bytes()));
      EXPECT_TRUE(download_bytes(ctx(), a.scales) == sc) << t.name();
    }
    const int64_t rb = layout.data_bytes() / rows;
    int64_t differ = 0;
    for (int64_t r = 0; r < rows; ++r)
      differ += std::memcmp(da.data() + r * rb, db.data() + r * rb, static_cast<size_t>(rb)) != 0;
    std::printf("[backend-ops] synth %-13s seeds 1 vs 2: %lld of %lld rows differ\n", t.name().c_str(),
                static_cast<long long>(differ), static_cast<long long>(rows));
    EXPECT_GT(differ, rows * 95 / 100) << t.name();
  }
  // Mismatched destinations and unsupported types are refused.
  const hc::DeviceWeight q8 = hc::make_random_weight(ctx(), sp, hc::SynthType::gguf(GgmlType::Q8_0), 128, 256, 3);
  EXPECT_THROW(hc::fill_random_weight(ctx(), sp, hc::SynthType::gguf(GgmlType::MXFP4), q8.view, 3), Error);
  EXPECT_THROW(hc::synth_layout(hc::SynthType::gguf(GgmlType::I32), 128, 256), Error);
  EXPECT_THROW(hc::synth_layout(hc::SynthType::gguf(GgmlType::Q2_K), 128, 100), Error);
}

// A Flash routed-expert stack: 256 experts x [2048, 4096] in one weight (1 GiB of MXFP4).
TEST_F(BackendOps, SynthFillFlashExpertStack) {
  hc::SynthPool sp(ctx(), 512, 79, &pool());
  const int64_t experts = 256, rows = 2048, cols = 4096;
  for (const hc::SynthType& t : {hc::SynthType::gguf(GgmlType::MXFP4), hc::SynthType::gguf(GgmlType::Q2_K)}) {
    sp.get(t, cols);  // the pool is made once per device; not part of the fill
    const auto t0 = std::chrono::steady_clock::now();
    hc::DeviceWeight w = hc::make_random_weight(ctx(), sp, t, experts * rows, cols, 11);
    ctx().synchronize();
    const double first = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double bytes = static_cast<double>(w.view.data_bytes() + w.view.scale_bytes());
    uint64_t seed = 12;
    const double s = time_it(ctx(), 5, [&] { hc::fill_random_weight(ctx(), sp, t, w.view, ++seed); });
    std::printf("[backend-ops] synth fill %-6s %lldx%lldx%lld: %.2f GB, first (alloc + fill) %.1f ms, refill %.2f ms = "
                "%.0f GB/s\n",
                t.name().c_str(), static_cast<long long>(experts), static_cast<long long>(rows),
                static_cast<long long>(cols), bytes * 1e-9, first * 1e3, s * 1e3, bytes / s * 1e-9);
    // The last expert's last rows decode to pool rows.
    const hc::SynthPool::Entry& e = sp.get(t, cols);
    const int64_t r0 = experts * rows - 4;
    Dev<float> got(ctx(), static_cast<size_t>(4 * cols));
    got.poison();
    hc::dequantize_rows(ctx(), w.view, nullptr, r0, 4, got.p());
    const std::vector<float> g = got.get();
    int64_t bad = 0;
    for (int64_t i = 0; i < 4; ++i) {
      const std::vector<float> want = pool_row(e, sp.source_row(seed, r0 + i));
      for (int64_t c = 0; c < cols; ++c)
        bad += f32_to_bits(g[static_cast<size_t>(i * cols + c)]) != f32_to_bits(want[static_cast<size_t>(c)]);
    }
    check_exact("synth stack rows", t.name(), "256x2048x4096 last rows", bad);
  }
}

#else  // !HS_HAVE_CUDA

TEST(BackendOpsNumerics, Skipped) { GTEST_SKIP() << "built without CUDA (HS_CUDA=OFF)"; }

#endif
