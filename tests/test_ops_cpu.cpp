// CPU reference ops against hand-computed or independently derived values.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "engine/cpu_ops.h"
#include "kernels/cpu/ops.h"
#include "model/config.h"
#include "util/fp.h"

using namespace hs;

namespace {
std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
}  // namespace

TEST(Sinkhorn, DoublyStochasticWithinEps) {
  // Columns are exact after the final column step; rows converge geometrically, which for
  // logits of the size the mixing produces (scale ~1) is well inside 1e-3 after 20 steps.
  for (uint32_t seed = 0; seed < 50; ++seed) {
    auto A = randv(16, seed, 1.0f);
    cpu::sinkhorn(A.data(), 4, 20, 1e-6f);
    for (int i = 0; i < 4; ++i) {
      float r = 0, c = 0;
      for (int j = 0; j < 4; ++j) {
        r += A[i * 4 + j];
        c += A[j * 4 + i];
        EXPECT_GT(A[i * 4 + j], 0.0f);
      }
      EXPECT_NEAR(c, 1.0f, 1e-5f);  // the last step is a column normalisation
      EXPECT_NEAR(r, 1.0f, 1e-3f);
    }
  }
}

TEST(Sinkhorn, FirstStepIsRowSoftmaxThenColumnNorm) {
  // One iteration = row softmax + eps, then column normalisation (spec §4.1 step 4).
  std::vector<float> A = {0, 1, 2, 3, 1, 1, 1, 1, -1, 0, 1, 0, 2, 2, 0, 0};
  std::vector<double> ref(16);
  for (int j = 0; j < 4; ++j) {
    double s = 0;
    for (int k = 0; k < 4; ++k) s += std::exp(static_cast<double>(A[j * 4 + k]));
    for (int k = 0; k < 4; ++k) ref[j * 4 + k] = std::exp(static_cast<double>(A[j * 4 + k])) / s + 1e-6;
  }
  for (int k = 0; k < 4; ++k) {
    double s = 0;
    for (int j = 0; j < 4; ++j) s += ref[j * 4 + k];
    for (int j = 0; j < 4; ++j) ref[j * 4 + k] /= (s + 1e-6);
  }
  cpu::sinkhorn(A.data(), 4, 1, 1e-6f);
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(A[i], ref[i], 1e-6);
}

TEST(Yarn, FlashFrequencyTable) {
  // V4-Flash: theta 160000, factor 16, original 65536, beta 32/1 -> lo = 15, hi = 25 (spec §3.6):
  // i <= 15 keep theta^(-2i/64), i >= 25 are divided by 16, in between a linear blend.
  auto f = cpu::rope_inv_freq_yarn(64, 160000.0f, 16.0f, 65536.0, 32.0f, 1.0f);
  auto plain = cpu::rope_inv_freq(64, 160000.0f);
  ASSERT_EQ(f.size(), 32u);
  for (int i = 0; i <= 15; ++i) EXPECT_FLOAT_EQ(f[i], plain[i]) << i;
  for (int i = 25; i < 32; ++i) EXPECT_FLOAT_EQ(f[i], plain[i] / 16.0f) << i;
  for (int i = 16; i < 25; ++i) {
    const double ramp = (i - 15) / 10.0;
    const double want = plain[i] / 16.0 * ramp + plain[i] * (1 - ramp);
    EXPECT_NEAR(f[i], want, 1e-6 * plain[i]) << i;
  }
  EXPECT_NEAR(plain[1], std::pow(160000.0, -2.0 / 64), 1e-6 * plain[1]);  // f32: a few ulp
}

TEST(Rope, InterleavedPairsOnTheTailAndInverse) {
  const int64_t hd = 16, rd = 8;
  auto x = randv(2 * 3 * hd, 7);
  auto orig = x;
  const int64_t pos[2] = {5, 1000};
  auto inv = cpu::rope_inv_freq(static_cast<int>(rd), 10000.0f);
  cpu::rope(x.data(), 2, 3, hd, static_cast<int>(rd), pos, inv.data(), +1);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 3; ++h) {
      const float* a = orig.data() + (t * 3 + h) * hd;
      const float* b = x.data() + (t * 3 + h) * hd;
      for (int c = 0; c < hd - rd; ++c) EXPECT_EQ(a[c], b[c]);  // non-rope channels untouched
      for (int i = 0; i < rd / 2; ++i) {
        const double ang = static_cast<double>(pos[t]) * inv[i];
        const float* pa = a + hd - rd + 2 * i;
        const float* pb = b + hd - rd + 2 * i;
        EXPECT_NEAR(pb[0], pa[0] * std::cos(ang) - pa[1] * std::sin(ang), 2e-4);
        EXPECT_NEAR(pb[1], pa[1] * std::cos(ang) + pa[0] * std::sin(ang), 2e-4);
      }
    }
  cpu::rope(x.data(), 2, 3, hd, static_cast<int>(rd), pos, inv.data(), -1);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], orig[i], 1e-5);
}

TEST(CompressorPool, ChannelwiseSoftmaxAndAbsentSlots) {
  // 3 slots x 2 channels; slot 0 absent (gate -inf) must get weight 0.
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> kv = {100, 100, 1, 2, 3, 4};
  std::vector<float> gate = {ninf, ninf, 0, std::log(3.0f), std::log(3.0f), 0};
  float out[2];
  cpu::compress_pool(kv.data(), gate.data(), 3, 2, out);
  EXPECT_NEAR(out[0], (1 * 1 + 3 * 3) / 4.0, 1e-6);
  EXPECT_NEAR(out[1], (2 * 3 + 4 * 1) / 4.0, 1e-6);
}

TEST(Indexer, CausalVisibilityAndTopK) {
  // Layer 2 of the tiny fixture is a CSA layer (ratio 4); its pool holds the indexer keys.
  const ModelConfig c = config_from_hf_dir(std::string(HS_TEST_DATA) + "/tiny");
  ASSERT_EQ(c.ratio(2), 4);
  ThreadPool pool(2);
  CpuOps ops(pool);
  StatePool sp(c, 2, 3, ops, StatePoolOptions{});
  auto seq = sp.acquire();
  ASSERT_TRUE(sp.reserve(*seq, 20));
  sp.sync_tables();
  // Keys 0..4 (complete after positions 3, 7, 11, 15, 19), written straight into the pages.
  const PagedRows& keys = sp.storage(0).keys;
  const int64_t id = keys.fmt.d;
  std::vector<float> k = randv(static_cast<size_t>(5 * id), 3);
  // Entry 4 gets a huge score for every query: it must still never be picked before it exists.
  for (int64_t ch = 0; ch < id; ++ch) k[static_cast<size_t>(4 * id + ch)] = 50.0f;
  for (int e = 0; e < 5; ++e)
    cpu::encode_row(keys.fmt, k.data() + e * id,
                    keys.row(seq->cmp_pages()[static_cast<size_t>(e / keys.rows_per_block)], e % keys.rows_per_block));
  // Queries at positions pos[0], pos[0]+1, ... of the sequence (one step's rows).
  auto top2 = [&](int64_t p0, int n) {
    std::vector<int64_t> pos;
    std::vector<int32_t> tok(static_cast<size_t>(n), 0), slot(static_cast<size_t>(n), seq->slot()),
        row0(static_cast<size_t>(n), 0), row_end(static_cast<size_t>(n), n);
    for (int i = 0; i < n; ++i) pos.push_back(p0 + i);
    ops.begin_rows(sp, StepRows{n, pos.data(), tok.data(), slot.data(), row0.data(), row_end.data(), n == 1, p0 + n});
    std::vector<float> q(static_cast<size_t>(n * 2 * id), 1.0f), w(static_cast<size_t>(n * 2), 1.0f);
    std::vector<int32_t> sel(static_cast<size_t>(2 * n), 99);
    ops.indexer_topk(sp, 0, q.data(), w.data(), 2, id, 2, sel.data());
    return sel;
  };
  auto s6 = top2(6, 1);  // position 6: only entry 0 is visible ((6+1)/4 = 1); the rest is -1
  EXPECT_EQ(s6[0], 0);
  EXPECT_EQ(s6[1], -1);
  auto s15 = top2(15, 1);  // position 15: entries 0..3 visible, top-2 of them
  for (int i : s15) EXPECT_TRUE(i >= 0 && i < 4) << i;
  EXPECT_EQ(top2(19, 1)[0], 4);  // position 19 closes window 4: it is visible and wins
  // Two queries at consecutive positions 18, 19 in one call: entry 4 only for the second.
  auto sel = top2(18, 2);
  EXPECT_NE(sel[0], 4);
  EXPECT_NE(sel[1], 4);
  EXPECT_EQ(sel[2], 4);
}

TEST(Attention, SinkEqualsSoftmaxWithExtraColumnDropped) {
  const int64_t H = 3, hd = 8, n_rows = 5;
  auto q = randv(H * hd, 1);
  auto rows_data = randv(n_rows * hd, 2);
  std::vector<const float*> rows;
  for (int j = 0; j < n_rows; ++j) rows.push_back(rows_data.data() + j * hd);
  std::vector<float> sinks = {0.5f, -1.0f, 3.0f};
  std::vector<float> out(H * hd);
  const float scale = 0.35f;
  cpu::attention_sink(q.data(), H, hd, rows.data(), n_rows, sinks.data(), scale, out.data());
  for (int h = 0; h < H; ++h) {
    std::vector<double> l(n_rows + 1);
    for (int j = 0; j < n_rows; ++j) {
      double d = 0;
      for (int c = 0; c < hd; ++c) d += static_cast<double>(q[h * hd + c]) * rows[j][c];
      l[j] = d * scale;
    }
    l[n_rows] = sinks[h];
    double den = 0;
    for (double v : l) den += std::exp(v);
    for (int c = 0; c < hd; ++c) {
      double s = 0;
      for (int j = 0; j < n_rows; ++j) s += std::exp(l[j]) / den * rows[j][c];
      EXPECT_NEAR(out[h * hd + c], s, 1e-6);
    }
  }
}

TEST(Moe, RouteScoresBiasAndHash) {
  const float logits[4] = {0.0f, 2.0f, -1.0f, 1.0f};
  auto sp = [](float x) { return std::sqrt(std::log1p(std::exp(x))); };
  int32_t idx[2];
  float w[2];
  const float bias[4] = {5.0f, 0.0f, 0.0f, 0.0f};  // bias changes the choice, not the weights
  cpu::moe_route(logits, 4, 2, bias, nullptr, 1.5f, idx, w);
  EXPECT_EQ(idx[0], 0);
  EXPECT_EQ(idx[1], 1);
  EXPECT_NEAR(w[0], sp(0) / (sp(0) + sp(2)) * 1.5, 1e-6);
  const int32_t row[2] = {2, 3};
  cpu::moe_route(logits, 4, 2, nullptr, row, 2.0f, idx, w);
  EXPECT_EQ(idx[0], 2);
  EXPECT_EQ(idx[1], 3);
  EXPECT_NEAR(w[0] + w[1], 2.0, 1e-6);  // hash layers still normalise and scale
  EXPECT_NEAR(w[0], sp(-1) / (sp(-1) + sp(1)) * 2.0, 1e-6);
}

TEST(Moe, SwigluClamps) {
  const float g[3] = {20.0f, -3.0f, 1.0f}, u[3] = {-30.0f, 30.0f, 2.0f};
  float h[3];
  cpu::swiglu_clamp(g, u, 3, 10.0f, h);
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  EXPECT_NEAR(h[0], silu(10.0) * -10.0, 1e-4);  // gate clamped above, up clamped below
  EXPECT_NEAR(h[1], silu(-3.0) * 10.0, 1e-5);   // gate has no lower clamp
  EXPECT_NEAR(h[2], silu(1.0) * 2.0, 1e-6);
}

TEST(QuantSim, Fp8RoundTripIsOnTheGridAndIdempotent) {
  auto x = randv(256, 9, 3.0f);
  cpu::fp8_round_trip(x.data(), 2, 128, 128, 64);
  for (int b = 0; b < 4; ++b) {
    float amax = 0;
    for (int i = 0; i < 64; ++i) amax = std::max(amax, std::fabs(x[b * 64 + i]));
    // scale = 2^ceil(log2(amax/448)); every value is an e4m3 code times that scale
    const float s = std::ldexp(1.0f, static_cast<int>(std::ceil(std::log2(amax / 448.0f))));
    for (int i = 0; i < 64; ++i) {
      const float v = x[b * 64 + i] / s;
      EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(v)), v);
    }
  }
  auto y = x;
  cpu::fp8_round_trip(y.data(), 2, 128, 128, 64);
  EXPECT_EQ(x, y);
}

TEST(QuantSim, HadamardIsOrthonormalAndSelfInverse) {
  auto x = randv(128, 4);
  auto y = x;
  cpu::hadamard(y.data(), 1, 128);
  double nx = 0, ny = 0;
  for (int i = 0; i < 128; ++i) {
    nx += x[i] * x[i];
    ny += y[i] * y[i];
  }
  EXPECT_NEAR(nx, ny, 1e-4 * nx);
  // Row 3 of the Sylvester matrix: (-1)^popcount(3 & j)
  double want = 0;
  for (int j = 0; j < 128; ++j) want += (__builtin_popcount(3 & j) % 2 ? -1.0 : 1.0) * x[j];
  EXPECT_NEAR(y[3], want / std::sqrt(128.0), 1e-5);
  cpu::hadamard(y.data(), 1, 128);
  for (int i = 0; i < 128; ++i) EXPECT_NEAR(y[i], x[i], 1e-5);
}

TEST(QuantSim, Fp4RoundTripValues) {
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;   // amax 6 -> scale 1
  x[1] = 5.0f;   // tie between 4 and 6 -> 4 (even)
  x[2] = -0.3f;  // -> -0.5
  x[3] = 2.6f;   // -> 3
  cpu::fp4_round_trip(x.data(), 1, 32);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 4.0f);
  EXPECT_EQ(x[2], -0.5f);
  EXPECT_EQ(x[3], 3.0f);
}

TEST(Matmul, MatchesDoubleReferenceAndThreadCountInvariant) {
  const int64_t out = 37, in = 301, n = 3;
  auto W = randv(out * in, 1), x = randv(n * in, 2);
  std::vector<float> y1(n * out), y4(n * out);
  ThreadPool p1(1), p4(4);
  cpu::matmul(p1, W.data(), out, in, x.data(), n, y1.data());
  cpu::matmul(p4, W.data(), out, in, x.data(), n, y4.data());
  EXPECT_EQ(y1, y4);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(W[o * in + i]) * x[t * in + i];
      EXPECT_NEAR(y1[t * out + o], s, 1e-4);
    }
}
