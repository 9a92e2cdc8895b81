// The fused forms of op sequences (one launch where the engine ran several) against the ops one
// by one on the same GPU, bit for bit where they promise it, and against the CPU twins: the
// hand-over between sub-layers (hc_post, hc_pre, the next input norm and its FP8 copy) and a
// sub-layer's projections of one input. Every output is poisoned (NaN) before the run. The
// timing test prints, it does not assert. Without a GPU every test is SKIPPED.
#include <gtest/gtest.h>

#ifdef HS_HAVE_CUDA
#include <algorithm>
#include <cstring>
#include <functional>

#include "backend_ops_util.h"

namespace {

// Elements whose bits differ.
int64_t mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&got[i], &want[i], 4) != 0;
  return bad;
}

}  // namespace

// The hand-over between sub-layers in one launch (hc_post, hc_pre, the next input norm and its
// FP8 copy: hc::hc_post_pre_norm) against those ops one by one on the same GPU: the same bits in
// every output (X, u, post, comb, xn, xq), for both numerics, at Flash's width, a narrow one and
// one whose last FP8 block is partial, 1..16 tokens, with post/comb written over their inputs as
// the layers do; in reference numerics also against the CPU twins of the sequence.
TEST_F(BackendOps, FusedHcHandover) {
  const int hcm = 4, mix = (2 + hcm) * hcm;
  for (const int64_t D : {int64_t{4096}, int64_t{1024}, int64_t{200}}) {
    const int64_t len = hcm * D;
    const std::vector<float> fn = randv(static_cast<size_t>(mix * len), 1470 + D, 2.0f / std::sqrt(static_cast<float>(len)));
    const std::vector<float> base = randv(static_cast<size_t>(mix), 1471 + D, 0.5f);
    const std::vector<float> scale = {0.8f, 1.3f, 2.0f};
    const std::vector<float> w = randv(static_cast<size_t>(D), 1472 + D);
    Dev<float> dfn(ctx(), fn), dbase(ctx(), base), dscale(ctx(), scale), dw(ctx(), w);
    const hc::HcParams p = hc_params(dfn.p(), dbase.p(), dscale.p(), hcm, D);
    for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{7}, int64_t{16}}) {
      // (Rows past the clusters the device runs at once take the three ops: the engine's rule.)
      if (n > 1 && !hc::hc_post_pre_norm_fits(ctx(), hcm, D, n)) {
        std::printf("[backend-ops] hc_post_pre_norm n=%lld D=%lld: not fused on this device\n",
                    static_cast<long long>(n), static_cast<long long>(D));
        continue;
      }
      ASSERT_TRUE(hc::hc_post_pre_norm_fits(ctx(), hcm, D, n)) << "D " << D << ", n " << n;
      const std::vector<float> X = randv(static_cast<size_t>(n * len), 1480 + n + D, 2.0f);
      const std::vector<float> y = randv(static_cast<size_t>(n * D), 1481 + n + D, 3.0f);
      const std::vector<float> post = randv(static_cast<size_t>(n * hcm), 1482 + n, 1.0f);
      std::vector<float> comb = randv(static_cast<size_t>(n * hcm * hcm), 1483 + n, 0.5f);
      for (float& v : comb) v = std::fabs(v);  // (a doubly-stochastic-like mix, as hc_pre makes)
      for (const bool model : {true, false}) {
        const hc::Bf16Round r = model ? hc::Bf16Round{true, true} : hc::Bf16Round{};
        const std::string shape = dims({n, hcm, D}) + (model ? " model" : " reference");
        // One by one.
        Dev<float> Xa(ctx(), X), ya(ctx(), y), pa(ctx(), post), ca(ctx(), comb), ua(ctx(), n * D), xna(ctx(), n * D),
            xqa(ctx(), n * D);
        ua.poison();
        xna.poison();
        xqa.poison();
        hc::hc_post(ctx(), ya.p(), pa.p(), ca.p(), n, hcm, D, Xa.p(), model);
        hc::hc_pre(ctx(), p, Xa.p(), n, ua.p(), pa.p(), ca.p());
        hc::rmsnorm_bf16(ctx(), ua.p(), dw.p(), n, D, 1e-6f, xna.p(), r, model ? xqa.p() : nullptr);
        // In one launch.
        Dev<float> Xb(ctx(), X), yb(ctx(), y), pb(ctx(), post), cb(ctx(), comb), ub(ctx(), n * D), xnb(ctx(), n * D),
            xqb(ctx(), n * D);
        ub.poison();
        xnb.poison();
        xqb.poison();
        hc::hc_post_pre_norm(ctx(), p, yb.p(), pb.p(), cb.p(), model, Xb.p(), n, ub.p(), pb.p(), cb.p(), dw.p(), 1e-6f,
                             r, xnb.p(), model ? xqb.p() : nullptr);
        const std::vector<float> Xg = Xa.get(), ug = ua.get(), xng = xna.get();
        auto same = [&](const char* what, const std::vector<float>& want, const std::vector<float>& got) {
          check_exact("hc_post_pre_norm", what, shape, mismatches(got, want));
        };
        same("X", Xg, Xb.get());
        same("u", ug, ub.get());
        same("post", pa.get(), pb.get());
        same("comb", ca.get(), cb.get());
        same("xn", xng, xnb.get());
        if (model) same("xq", xqa.get(), xqb.get());
        else EXPECT_EQ(mismatches(xqb.get(), xqa.get()), 0) << "xq written without an FP8 copy asked for";
        if (model) continue;
        // The CPU twins of the sequence (reference numerics).
        std::vector<float> Xc = X, uc(static_cast<size_t>(n * D)), pc = post, cc = comb, xnc(static_cast<size_t>(n * D));
        cpu::hc_post(y.data(), post.data(), comb.data(), n, hcm, D, Xc.data());
        const cpu::HcParams cp{fn.data(), base.data(), scale.data(), hcm, D, 20, 1e-6f, 1e-6f};
        cpu::hc_pre(pool(), cp, Xc.data(), n, uc.data(), pc.data(), cc.data());
        cpu::rmsnorm(uc.data(), w.data(), n, D, 1e-6f, xnc.data());
        check("hc_post_pre.X", "f32", shape, Xg, Xc, 1e-6);
        check("hc_post_pre.u", "f32", shape, ug, uc, 1e-5);
        check("hc_post_pre.xn", "f32", shape, xng, xnc, 1e-5);
      }
    }
  }
}

// Decode-time cost of the hand-over at V4-Flash width (D 4096, model numerics: X rounded, the
// norm's FP8 copy) as the three ops and as one launch: GPU time per call from events around 20
// back-to-back calls, median of 15 repetitions after a warm-up. Printed, not asserted.
TEST_F(BackendOps, FusedHcHandoverTiming) {
  const int hcm = 4, mix = (2 + hcm) * hcm;
  const int64_t D = 4096, len = hcm * D;
  Dev<float> fn(ctx(), randv(static_cast<size_t>(mix * len), 700, 2.0f / std::sqrt(static_cast<float>(len))));
  Dev<float> base(ctx(), randv(static_cast<size_t>(mix), 701, 0.5f)), scale(ctx(), std::vector<float>{0.8f, 1.3f, 2.0f});
  const hc::HcParams p = hc_params(fn.p(), base.p(), scale.p(), hcm, D);
  for (int64_t n : {1, 2, 4, 7, 8, 16}) {
    Dev<float> X(ctx(), randv(static_cast<size_t>(n * len), 702, 2.0f)), u(ctx(), static_cast<size_t>(n * D)),
        post(ctx(), randv(static_cast<size_t>(n * hcm), 705)), comb(ctx(), std::vector<float>(static_cast<size_t>(n * 16), 0.25f));
    Dev<float> y(ctx(), randv(static_cast<size_t>(n * D), 703)), w(ctx(), randv(static_cast<size_t>(D), 704)),
        xn(ctx(), static_cast<size_t>(n * D)), xq(ctx(), static_cast<size_t>(n * D));
    auto time_us = [&](const std::function<void()>& f) { return event_median_ms(ctx(), f, 20, 15) * 1e3 / 20; };
    const hc::Bf16Round r{true, true};
    const double three = time_us([&] {
      hc::hc_post(ctx(), y.p(), post.p(), comb.p(), n, hcm, D, X.p(), true);
      hc::hc_pre(ctx(), p, X.p(), n, u.p(), post.p(), comb.p());
      hc::rmsnorm_bf16(ctx(), u.p(), w.p(), n, D, 1e-6f, xn.p(), r, xq.p());
    });
    if (!hc::hc_post_pre_norm_fits(ctx(), hcm, D, n)) {
      std::printf("[hc-timing] n=%lld D=%lld: hand-over as hc_post + hc_pre + rmsnorm_bf16_fp8 %.2f us, not fused here\n",
                  static_cast<long long>(n), static_cast<long long>(D), three);
      continue;
    }
    const double one = time_us([&] {
      hc::hc_post_pre_norm(ctx(), p, y.p(), post.p(), comb.p(), true, X.p(), n, u.p(), post.p(), comb.p(), w.p(), 1e-6f,
                           r, xn.p(), xq.p());
    });
    std::printf("[hc-timing] n=%lld D=%lld: hand-over as hc_post + hc_pre + rmsnorm_bf16_fp8 %.2f us, one launch %.2f us\n",
                static_cast<long long>(n), static_cast<long long>(D), three, one);
  }
}

// Several matrices on one input row in one launch (a sub-layer's projections of the same x: the
// compressors' and the indexer's at Flash shapes, wq_a + wkv), every type the n == 1 register
// kernel takes: against the CPU twin, and bit for bit against matmul where matmul takes that
// kernel alone (small native matrices); MXFP4 and mixed types are refused.
TEST_F(BackendOps, MatmulSameInput) {
  const std::vector<std::vector<int64_t>> sets = {{1024, 1024, 256, 256, 64}, {1024, 512}};
  uint64_t stream = 7100;
  for (hc::WType t : kAllTypes)
    for (const std::vector<int64_t>& rows : sets) {
      const int count = static_cast<int>(rows.size());
      std::vector<HostWeight> hw;
      std::vector<hc::DeviceWeight> dw;
      std::vector<hc::WeightView> v;
      for (int64_t r : rows) hw.push_back(make_weight(t, r, 4096, ++stream));
      for (const HostWeight& h : hw) dw.push_back(upload(ctx(), h));
      for (const hc::DeviceWeight& d : dw) v.push_back(d.view);
      const bool ok = hc::matvec_same_input_ok(v.data(), count);
      int64_t bytes = 0;
      for (const hc::WeightView& m : v) bytes += m.data_bytes() + m.scale_bytes();
      EXPECT_EQ(ok, t != hc::WType::MXFP4 && bytes <= (int64_t{32} << 20)) << hc::wtype_name(t) << " " << bytes;
      if (!ok) continue;
      const std::vector<float> x = randv(4096, ++stream);
      Dev<float> dx(ctx(), x);
      std::vector<Dev<float>> dy;
      std::vector<float*> y;
      for (int64_t r : rows) dy.emplace_back(ctx(), static_cast<size_t>(r));
      for (Dev<float>& d : dy) d.poison(), y.push_back(d.p());
      hc::matvec_same_input(ctx(), v.data(), y.data(), count, dx.p());
      for (int i = 0; i < count; ++i) {
        const std::string shape = dims({rows[i], 4096}) + " of " + std::to_string(count);
        const std::vector<float> got = dy[i].get();
        check("matvec-same-x", hc::wtype_name(t), shape, got, cpu_matmul(hw[i], x, 1), 1e-5);
        if (t != hc::WType::Q8_0 && t != hc::WType::FP8_B128) continue;  // (the others: matmul takes mv1 by size)
        Dev<float> one(ctx(), static_cast<size_t>(rows[i]));
        one.poison();
        hc::matmul(ctx(), v[i], dx.p(), 1, one.p());
        check_exact("matvec-same-x", "vs matmul", hc::wtype_name(t) + shape, mismatches(one.get(), got));
      }
    }
  const hc::DeviceWeight f16 = upload(ctx(), make_weight(hc::WType::F16, 64, 4096, 7190)),
                         bf16 = upload(ctx(), make_weight(hc::WType::BF16, 64, 4096, 7191));
  const hc::WeightView mixed[2] = {f16.view, bf16.view};
  EXPECT_FALSE(hc::matvec_same_input_ok(mixed, 2));
}

#else  // !HS_HAVE_CUDA

TEST(BackendOpsFused, Skipped) { GTEST_SKIP() << "built without CUDA (HS_CUDA=OFF)"; }

#endif
