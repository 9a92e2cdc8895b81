// CUDA ops vs their CPU twins (kernels/cpu) on fresh random inputs, in the spirit of
// llama.cpp's test-backend-ops. Shapes include the DeepSeek-V4-Flash widths. Every GPU output
// is poisoned (NaN) before the run, so an element the kernel never writes fails the check.
// Tolerances: relative L2 <= 1e-5 for f32 paths, <= 1e-2 for bf16 tensor-core paths; NaN or
// inf where the reference is finite always fails. Each check prints one line
//   [backend-ops] <op> <type> <shape> rel=<err> tol=<tol> PASS|FAIL
// which scripts/device_test.sh collects into a summary. Without a GPU every test is SKIPPED.
#include <gtest/gtest.h>

#ifdef HS_HAVE_CUDA
#include <cstring>
#include <functional>

#include "backend_ops_util.h"
#include "kernels/state_rows.h"


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
      // x of exactly 48 KB in shared memory at 1, 2 and 8 columns (next to the kernels' static
      // buffers: the launch needs the raised limit; DSpark's main_proj is 4096 x 12288)
      {512, 12288, "dspark main_proj"}, {256, 6144, "48 KB at n=2"}, {256, 1536, "48 KB at n=8"},
  };
  const int64_t ns[] = {1, 2, 3, 5, 8, 17, 40};  // 17: the tensor-core matvec for its types; 40: tiled for all
  const int64_t nmax = 40;
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
              dims({s.out, s.in}) + " n=40", dy.get(), ref, m == hc::GemmMode::F32 ? 1e-5 : 1e-2);
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

// Q8_0, FP8_B128, F16 and BF16 at n <= 32 on tensor cores (matvec_mma.cu) against the CPU twin and
// against the f32 kernel, with f32 inputs (three bf16 terms), bf16-exact inputs as model
// numerics' FP8-quantised or BF16-rounded ones (one term), and a mix of both in one launch;
// repeated launches bit-identical.
TEST_F(BackendOps, MatmulTensorCores) {
  struct Shape {
    int64_t out, in;
    const char* what;
  };
  const Shape shapes[] = {{37, 256, "odd"},   {300, 512, "small"},     {1024, 4096, "wq_a"},
                          {4096, 8192, "wo_b"}, {32768, 1024, "wq_b"}, {129, 96, "3 blocks per row"}};
  const int64_t nmax = hc::kMatvecMmaMaxCols;
  uint64_t stream = 4100;
  for (hc::WType wt : {hc::WType::Q8_0, hc::WType::FP8_B128, hc::WType::F16, hc::WType::BF16}) {
    for (const Shape& s : shapes) {
      if (wt != hc::WType::Q8_0 && s.out * s.in > (int64_t{1} << 24)) continue;  // Flash-sized: Q8_0 only
      const char* type = hc::wtype_name(wt);
      const HostWeight hw = make_weight(wt, s.out, s.in, ++stream);
      hc::DeviceWeight dw = upload(ctx(), hw);
      std::vector<float> x = randv(static_cast<size_t>(nmax * s.in), ++stream);
      for (const char* input : {"f32", "bf16", "mixed"}) {
        std::vector<float> xi = x;
        const std::string in(input);
        for (size_t i = 0; i < xi.size(); ++i)  // "mixed": column 3 keeps its f32 values
          if (in == "bf16" || (in == "mixed" && static_cast<int64_t>(i) / s.in != 3)) xi[i] = round_bf16(xi[i]);
        const std::vector<float> ref = cpu_matmul(hw, xi, nmax);
        Dev<float> dx(ctx(), xi), dy(ctx(), static_cast<size_t>(nmax * s.out));
        for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 24, 31, 32}) {
          const std::string shape = dims({s.out, s.in}) + " n=" + std::to_string(n) + " x " + in + " " + s.what;
          const std::vector<float> want(ref.begin(), ref.begin() + n * s.out);
          std::vector<float> got[2];
          for (int k = 0; k < 2; ++k) {
            dy.poison();
            hc::matvec_variant(ctx(), dw.view, dx.p(), n, dy.p(), hc::kMatvecTensorCores);
            got[k] = dy.get();
            got[k].resize(static_cast<size_t>(n * s.out));
          }
          check("matvec-mma", type, shape, got[0], want, 1e-5);
          int64_t diff = 0;
          for (size_t i = 0; i < got[0].size(); ++i) diff += std::memcmp(&got[0][i], &got[1][i], 4) != 0;
          check_exact("matvec-mma-rerun", type, shape, diff);
          if (n > hc::kMatvecMaxCols) continue;
          dy.poison();
          hc::matvec_variant(ctx(), dw.view, dx.p(), n, dy.p(), 4);  // the f32 kernel, kept for R != 0
          std::vector<float> f32 = dy.get();
          f32.resize(static_cast<size_t>(n * s.out));
          check("matvec-f32", type, shape, f32, want, 1e-5);
        }
      }
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
  for (hc::WType t : {hc::WType::BF16, hc::WType::FP8_B128, hc::WType::Q8_0}) {
    const HostWeight hw = make_weight(t, groups * R, in, 9100 + static_cast<int>(t));
    for (int64_t n : {1, 3, 8, 12, 40}) {
      const std::vector<float> x = randv(static_cast<size_t>(n * groups * in), 9200 + n);
      const std::vector<float> ref = cpu_grouped_matmul(hw, groups, x, n);
      hc::DeviceWeight dw = upload(ctx(), hw);
      Dev<float> dx(ctx(), x), dy(ctx(), ref.size());
      dy.poison();
      hc::grouped_matmul(ctx(), dw.view, groups, dx.p(), n, dy.p());
      check("grouped_matmul", hc::wtype_name(t), "8x" + dims({R, in}) + " n=" + std::to_string(n), dy.get(), ref,
            hc::matmul_path(dw.view, n, hc::GemmMode::Auto) == hc::MatmulPath::Tiled ? 1e-2 : 1e-5);
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

TEST_F(BackendOps, RmsNorm) {
  struct Case {
    int64_t rows, d;
    bool weighted;
    const char* what;
  };
  const Case cases[] = {{1, 4096, true, "attn_norm"}, {7, 4096, true, "attn_norm"}, {3, 1024, true, "q_norm"},
                        {5, 512, true, "kv_norm"},    {64, 512, false, "q head norm 64x512"},
                        {3 * 64, 512, false, "q head norm"}, {9, 100, true, "odd"},
                        // Pro's width (14 of a thread's 16 register slots), past the register cache
                        {2, 7168, true, "Pro attn_norm"},   {2, 10000, true, "wide"}, {2, 10000, false, "wide"},
                        // enough rows for one slot per thread (prefill)
                        {300, 4096, true, "prefill attn_norm"}};
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
  // A row's bits do not depend on how many rows run with it (the register slots differ: 8 for one
  // row of 4096, 1 for 300 rows; the sum order does not).
  const int64_t rows = 300, d = 4096;
  const std::vector<float> x = randv(static_cast<size_t>(rows * d), 260, 3.0f), w = randv(static_cast<size_t>(d), 261);
  Dev<float> dx(ctx(), x), dw(ctx(), w), all(ctx(), x.size()), one(ctx(), x.size());
  all.poison(), one.poison();
  hc::rmsnorm(ctx(), dx.p(), dw.p(), rows, d, 1e-6f, all.p());
  for (int64_t r : {int64_t{0}, int64_t{123}, rows - 1})
    hc::rmsnorm(ctx(), dx.p() + r * d, dw.p(), 1, d, 1e-6f, one.p() + r * d);
  const std::vector<float> a = all.get(), o = one.get();
  int64_t differ = 0;
  for (int64_t r : {int64_t{0}, int64_t{123}, rows - 1})
    for (int64_t i = 0; i < d; ++i) differ += f32_to_bits(a[r * d + i]) != f32_to_bits(o[r * d + i]);
  check_exact("rmsnorm-batch", "f32", "1 row vs 300 rows of 4096", differ);
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
    for (int64_t n : {1, 3, 7, 37}) {  // <= 16: one cluster launch per call; 37: the two-kernel path
      const std::vector<float> X = randv(static_cast<size_t>(n * len), 610 + n + D, 2.0f);
      cpu::HcParams cp{fn.data(), base.data(), scale.data(), hcm, D, 20, 1e-6f, 1e-6f};
      std::vector<float> u(static_cast<size_t>(n * D)), post(static_cast<size_t>(n * hcm)),
          comb(static_cast<size_t>(n * hcm * hcm));
      cpu::hc_pre(pool(), cp, X.data(), n, u.data(), post.data(), comb.data());
      const hc::HcParams gp = hc_params(dfn.p(), dbase.p(), dscale.p(), hcm, D);
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
      const hc::HcParams hp = hc_params(dhfn.p(), dhbase.p(), dhscale.p(), hcm, D);
      hc::hc_head(ctx(), hp, dX.p(), n, dh.p());
      check("hc_head", "f32", shape, dh.get(), h, 1e-5);

      // hc_stream_mean (the DSpark taps) into tap 1 of 3: bit-identical to the CPU twin (both sum
      // in f64), and taps 0 and 2 untouched (they keep the sentinel).
      const int64_t T = 3;
      std::vector<float> taps(static_cast<size_t>(n * T * D), 7.0f);
      cpu::hc_stream_mean(X.data(), n, hcm, D, taps.data() + D, T * D);
      Dev<float> dtaps(ctx(), std::vector<float>(taps.size(), 7.0f));
      hc::hc_stream_mean(ctx(), dX.p(), n, hcm, D, dtaps.p() + D, T * D);
      const std::vector<float> got = dtaps.get();
      int64_t diff = 0;
      for (size_t i = 0; i < got.size(); ++i) diff += std::memcmp(&got[i], &taps[i], sizeof(float)) != 0;
      check_exact("hc_stream_mean", "f32", shape, diff);
    }
  }
}

// Decode-time cost of the hyper-connection ops at V4-Flash width (D 4096, hc 4): GPU time per
// call from events around 20 back-to-back calls, median of 15 repetitions after a warm-up.
// Printed, not asserted.
TEST_F(BackendOps, HyperConnectionsTiming) {
  const int hcm = 4, mix = (2 + hcm) * hcm;
  const int64_t D = 4096, len = hcm * D;
  Dev<float> fn(ctx(), randv(static_cast<size_t>(mix * len), 700, 2.0f / std::sqrt(static_cast<float>(len))));
  Dev<float> base(ctx(), randv(static_cast<size_t>(mix), 701, 0.5f)), scale(ctx(), std::vector<float>{0.8f, 1.3f, 2.0f});
  const hc::HcParams gp = hc_params(fn.p(), base.p(), scale.p(), hcm, D);
  for (int64_t n : {1, 7}) {
    Dev<float> X(ctx(), randv(static_cast<size_t>(n * len), 702, 2.0f)), u(ctx(), static_cast<size_t>(n * D)),
        post(ctx(), static_cast<size_t>(n * hcm)), comb(ctx(), static_cast<size_t>(n * hcm * hcm));
    // us per call: events around 20 back-to-back calls, median of 15 repetitions
    auto time_us = [&](const std::function<void()>& f) { return event_median_ms(ctx(), f, 20, 15) * 1e3 / 20; };
    const double pre = time_us([&] { hc::hc_pre(ctx(), gp, X.p(), n, u.p(), post.p(), comb.p()); });
    const double head = time_us([&] { hc::hc_head(ctx(), gp, X.p(), n, u.p()); });
    const double hpost = time_us([&] { hc::hc_post(ctx(), u.p(), post.p(), comb.p(), n, hcm, D, X.p()); });
    std::printf("[hc-timing] n=%lld D=%lld: hc_pre %.2f us, hc_head %.2f us, hc_post %.2f us per call\n",
                static_cast<long long>(n), static_cast<long long>(D), pre, head, hpost);
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
    const hc::KeySource ks{dk.p(), RowFormat::make(RowForm::F32, static_cast<int32_t>(id), 0), 0, nullptr, 0, nullptr};
    hc::indexer_scores(ctx(), dq.p(), dw.p(), c.nq, ih, id, ks, c.entries, dpos.p(), ratio, ds.p());
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
  // Long rows (radix select), then rows no longer than k (every entry picked: the kernel only
  // sorts them; -1 padding after).
  const std::pair<int64_t, int> cases[] = {{n, 1},     {n, 7},     {n, 512}, {n, 2048},
                                           {300, 512}, {300, 300}, {1, 4},   {2047, 2048}};
  for (const auto& [len, k] : cases) {
    Dev<float> ds(ctx(), std::vector<float>(s.begin(), s.begin() + 2 * len));
    Dev<int32_t> dout(ctx(), static_cast<size_t>(2 * k));
    dout.poison();
    hc::topk(ctx(), ds.p(), 2, len, nullptr, 1, k, dout.p());
    const std::vector<int32_t> got = dout.get();
    int64_t bad = 0;
    for (int t = 0; t < 2; ++t) {
      std::vector<int32_t> want = cpu::topk_indices(s.data() + t * len, len, k);
      want.resize(static_cast<size_t>(k), -1);
      for (int i = 0; i < k; ++i) bad += got[static_cast<size_t>(t * k + i)] != want[static_cast<size_t>(i)];
    }
    check_exact("topk-ties", "f32",
                "2x" + std::to_string(len) + " k=" + std::to_string(k) + (len <= k ? " (all picked)" : ""), bad);
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

// RoPE at positions read from device memory plus an offset (what a captured step runs), against
// the CPU at the same positions.
TEST_F(BackendOps, RopeAtDevicePositions) {
  const int64_t d = 512;
  const int rd = 64, r = 4;
  const std::vector<float> inv = cpu::rope_inv_freq_yarn(rd, 160000.0f, 16.0f, 65536.0, 32.0f, 1.0f);
  Dev<float> dinv(ctx(), inv);
  for (const int64_t p : {int64_t{3}, int64_t{127}, int64_t{128}, int64_t{1001}, int64_t{65535}, int64_t{262143}}) {
    Dev<int64_t> dp(ctx(), std::vector<int64_t>{p});
    const std::vector<float> x = randv(static_cast<size_t>(d), 1200 + p);
    std::vector<float> ref = x;
    const int64_t first = p + 1 - r;
    cpu::rope(ref.data(), 1, 1, d, rd, &first, inv.data(), +1);
    Dev<float> dx(ctx(), x);
    hc::rope_affine(ctx(), dx.p(), 1, 1, d, rd, dp.p(), 1 - r, 0, dinv.p(), +1);
    check("rope", "step", "pos=" + std::to_string(p) + "+1-r", dx.get(), ref, 1e-5);
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
// The ids a correct sampler may return for u: greedy is exact; otherwise every kept id whose
// cumulative-mass interval [c - e, c] meets u * z3 +- delta * z3. The device sums in float with a
// parallel scan, this twin in double; where tens of thousands of ids share the mass (T 1.3 with
// min_p 0.05 keeps ~40k of 129,280) the two CDFs differ by ~1e-5 relative, so an exact-id check
// fails on a few percent of draws for no fault. delta = 1e-4 keeps the window to a handful of ids.
std::vector<int32_t> sample_ref(const float* logits, int64_t V, const hc::SamplingParams& sp, float u,
                                double delta = 1e-4) {
  if (sp.temperature <= 0.f || sp.top_k == 1) {
    int64_t b = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[b]) b = i;
    return {static_cast<int32_t>(b)};
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
  // (The cuts themselves may move by an id or two the same way: the last kept ids count too.)
  const double lo = (u - delta) * z3, hi = (u + delta) * z3;
  std::vector<int32_t> ok;
  double c = 0;
  for (int64_t i = 0; i < std::min<int64_t>(m3 + 2, m); ++i) {
    const double prev = c;
    c += e[static_cast<size_t>(i)];
    if (c >= lo && prev <= hi) ok.push_back(order[static_cast<size_t>(i)]);
  }
  if (ok.empty()) ok.push_back(order[static_cast<size_t>(m3 - 1)]);
  return ok;
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
    size_t window = 0;  // the most ids a draw's window allowed (1: exact)
    const int draws = c.sp.temperature <= 0.f ? 1 : 16;
    for (int d = 0; d < draws; ++d) {
      std::vector<float> u(static_cast<size_t>(rows));
      for (auto& v : u) v = static_cast<float>(r.bits(static_cast<uint64_t>(++draw)) >> 40) * 0x1p-24f;
      dout.poison();
      hc::sample(ctx(), dl.p(), rows, V, c.sp, u, dout.p());
      const std::vector<int32_t> got = dout.get();
      for (int64_t t = 0; t < rows; ++t) {
        const std::vector<int32_t> ok = sample_ref(logits.data() + t * V, V, c.sp, u[static_cast<size_t>(t)]);
        bad += std::find(ok.begin(), ok.end(), got[static_cast<size_t>(t)]) == ok.end();
        window = std::max(window, ok.size());
      }
    }
    check_exact("sample", "f32", std::string("V=129280 ") + c.what + " window<=" + std::to_string(window), bad);
  }
}

// A constrained request's token mask: the CUDA op against cpu::mask_tokens on the same bits,
// rows of every density (nearly empty, half, nearly full, a vocabulary not a multiple of 64).
TEST_F(BackendOps, MaskTokens) {
  for (const int64_t V : {int64_t{129280}, int64_t{1000}}) {
    const int64_t rows = 3, words = (V + 63) / 64;
    const std::vector<float> logits = randv(static_cast<size_t>(rows * V), 1300, 6.0f);
    std::vector<uint64_t> bits(static_cast<size_t>(rows * words), 0);
    Rand r(1301);
    const uint64_t keep_below[] = {uint64_t{1} << 54, uint64_t{1} << 63, ~uint64_t{0} - (uint64_t{1} << 58)};
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t i = 0; i < V; ++i)
        if ((r.bits(static_cast<uint64_t>(t * V + i)) >> 1) < (keep_below[t] >> 1))
          bits[static_cast<size_t>(t * words + (i >> 6))] |= uint64_t{1} << (i & 63);
    std::vector<float> ref = logits;
    for (int64_t t = 0; t < rows; ++t) cpu::mask_tokens(ref.data() + t * V, V, bits.data() + t * words);
    Dev<float> dl(ctx(), logits);
    Dev<uint64_t> db(ctx(), bits);
    hc::mask_tokens(ctx(), dl.p(), rows, V, db.p());
    const std::vector<float> got = dl.get();
    int64_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &ref[i], sizeof(float)) != 0;
    check_exact("mask_tokens", "f32", dims({rows, V}) + " 1/1024, 1/2, ~1 kept", bad);
  }
}

#else  // !HS_HAVE_CUDA

TEST(BackendOps, Skipped) { GTEST_SKIP() << "built without CUDA (HS_CUDA=OFF)"; }

#endif
