// Whole-model parity of the CPU reference engine with the Hugging Face fixtures
// (../shared/fixtures/README.md): every split of the prompt into prefill chunks and decode
// steps must reproduce the HF logits (relative L2 <= 1e-5, identical argmax everywhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "engine/engine.h"
#include "fixture_util.h"
#include "util/error.h"

using namespace hs;
using test::run;
using test::splits_for;

namespace {

class Parity : public ::testing::TestWithParam<std::string> {};

TEST_P(Parity, EverySplitMatchesHF) {
  const std::string dir = std::string(HS_TEST_DATA) + "/" + GetParam();
  test::Expected e = test::load_expected(dir);
  Engine eng(dir, EngineOptions{});
  ASSERT_EQ(eng.config().vocab_size, e.vocab);
  for (const auto& sp : splits_for(e)) {
    std::vector<float> got = run(eng, e, sp.chunks);
    const double rel = test::rel_l2(got.data(), e.logits.data(), got.size());
    const int bad = test::argmax_mismatches(got, e.logits, e.vocab);
    std::printf("[parity] %-14s %-10s rel_l2 %.3e argmax_mismatch %d\n", GetParam().c_str(), sp.name.c_str(), rel, bad);
    EXPECT_LE(rel, 1e-5) << GetParam() << " split " << sp.name;
    EXPECT_EQ(bad, 0) << GetParam() << " split " << sp.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Parity,
                         ::testing::Values("tiny", "tiny-official", "small-bf16", "pro-bf16", "peaked-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// For tiny the fixture also holds the HC state entering each layer: compare layer by layer
// so a failure points at the layer that diverges.
TEST(ParityLayers, TinyHcStatesPerLayer) {
  const std::string dir = std::string(HS_TEST_DATA) + "/tiny";
  test::Expected e = test::load_expected(dir);
  ASSERT_FALSE(e.hc_states.empty());
  Engine eng(dir, EngineOptions{});
  const auto& c = eng.config();
  const int64_t T = static_cast<int64_t>(e.tokens.size()), per = c.hc_mult * c.dim;
  std::vector<float> got(e.hc_states.size());
  eng.shard(0).set_layer_observer([&](int layer, const float* X, int64_t n) {
    ASSERT_EQ(n, T);
    std::copy(X, X + n * per, got.begin() + static_cast<int64_t>(layer) * T * per);
  });
  auto seq = eng.new_sequence();
  std::vector<float> logits(static_cast<size_t>(T * e.vocab));
  eng.step(*seq, e.tokens.data(), T, logits.data());
  for (int l = 0; l < c.n_layers; ++l) {
    const size_t off = static_cast<size_t>(l * T * per);
    const double rel = test::rel_l2(got.data() + off, e.hc_states.data() + off, static_cast<size_t>(T * per));
    EXPECT_LE(rel, 1e-5) << "HC state entering layer " << l;
  }
}

}  // namespace

namespace {

// Model numerics (BF16 storage, FP8/FP4 round trips) is a different rounding of the same
// math. The fixtures are random-weight models whose logits are flat enough that these
// roundings move many argmaxes, so agreement with the f32 oracle is measured and printed,
// not asserted (the per-primitive round trips are tested exactly in test_ops_cpu). What
// must hold exactly: the result does not depend on how the prompt is split, and the round
// trips are really applied.
class ModelNumerics : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelNumerics, SplitInvariantAndDifferentFromReference) {
  const std::string dir = std::string(HS_TEST_DATA) + "/" + GetParam();
  test::Expected e = test::load_expected(dir);
  EngineOptions mo;
  mo.numerics = Numerics::Model;
  Engine model(dir, mo);
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  std::vector<float> one = run(model, e, {T});
  const double rel = test::rel_l2(one.data(), e.logits.data(), one.size());
  const int bad = test::argmax_mismatches(one, e.logits, e.vocab);
  std::printf("[model-numerics] %-14s rel_l2 vs f32 oracle %.3e, argmax agreement %.4f\n", GetParam().c_str(), rel,
              1.0 - static_cast<double>(bad) / static_cast<double>(T));
  EXPECT_GT(rel, 1e-4) << "model numerics gave the f32 result: the round trips are not applied";
  for (const auto& chunks : {std::vector<int64_t>(static_cast<size_t>(T), 1), e.chunk_sizes, test::random_split(T, 5)}) {
    std::vector<float> other = run(model, e, chunks);
    EXPECT_EQ(test::argmax_mismatches(other, one, e.vocab), 0);
    EXPECT_LE(test::rel_l2(other.data(), one.data(), one.size()), 1e-6);
  }
}

// The fair judge of model numerics' greedy argmax: peaked-tiny (scripts/gen_peaked_fixture.py) is
// tiny's shape with an LM head whose logits peak the way a trained model's do (HF's top1-top2
// margin >= 1.5 at every position, median 4.8, top-1 probability ~0.8; the argmax is never the
// input token). Model numerics still move the logits by ~0.2 relative L2, but on every split
// greedy argmax must agree with reference numerics at >= 99% of positions.
TEST(ModelNumericsPeaked, GreedyArgmaxAgreesWithReferenceOnEverySplit) {
  const std::string dir = std::string(HS_TEST_DATA) + "/peaked-tiny";
  test::Expected e = test::load_expected(dir);
  EngineOptions mo;
  mo.numerics = Numerics::Model;
  Engine model(dir, mo);
  Engine ref(dir, EngineOptions{});
  const double rows = static_cast<double>(e.tokens.size());
  double worst_rel = 0, worst_agree = 1;
  for (const auto& sp : splits_for(e)) {
    std::vector<float> m = run(model, e, sp.chunks), r = run(ref, e, sp.chunks);
    const double rel = test::rel_l2(m.data(), r.data(), r.size());
    const double agree = 1.0 - test::argmax_mismatches(m, r, e.vocab) / rows;
    worst_rel = std::max(worst_rel, rel);
    worst_agree = std::min(worst_agree, agree);
    std::printf("[model-vs-ref] peaked-tiny %-10s rel_l2 %.3e argmax agreement %.4f\n", sp.name.c_str(), rel, agree);
    EXPECT_GT(rel, 1e-4) << "model numerics gave the f32 result: the round trips are not applied";
    EXPECT_GE(agree, 0.99) << "split " << sp.name;
  }
  std::printf("[model-vs-ref] peaked-tiny worst rel_l2 %.3e, worst argmax agreement %.4f\n", worst_rel, worst_agree);
}

TEST(ModelNumericsErrors, NonPowerOfTwoIndexerIsRejected) {
  EngineOptions mo;
  mo.numerics = Numerics::Model;
  try {
    Engine model(std::string(HS_TEST_DATA) + "/pro-bf16", mo);
    FAIL() << "expected an error";
  } catch (const hs::Error& err) {
    EXPECT_NE(std::string(err.what()).find("power-of-two index_head_dim"), std::string::npos) << err.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelNumerics, ::testing::Values("tiny", "tiny-official", "small-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace

namespace {

// Later tests compare split and unsplit runs bit for bit, so the CPU engine must give the
// same bits whatever the thread count and however the layers are split into shards.
TEST(Determinism, ThreadCountAndLayerSplitAreBitIdentical) {
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  test::Expected e = test::load_expected(dir);
  EngineOptions one;
  one.threads = 1;
  Engine a(dir, one);
  std::vector<float> ref = run(a, e, e.chunk_sizes);
  EngineOptions three;
  three.threads = 3;
  Engine b(dir, three);
  EXPECT_EQ(run(b, e, e.chunk_sizes), ref);
  for (const std::vector<int>& split : {std::vector<int>{4, 4}, std::vector<int>{1, 6, 1}}) {
    EngineOptions o;
    o.layer_split = split;
    Engine s(dir, o);
    EXPECT_EQ(s.n_shards(), static_cast<int>(split.size()));
    EXPECT_EQ(run(s, e, e.chunk_sizes), ref);
  }
}

// A reset sequence is indistinguishable from a new one: A, then B, then A again on the
// same sequence object gives A's logits both times.
TEST(SequenceReset, ReusedSequenceForgetsThePreviousRequest) {
  const std::string dir = std::string(HS_TEST_DATA) + "/tiny";
  test::Expected e = test::load_expected(dir);
  Engine eng(dir, EngineOptions{});
  auto seq = eng.new_sequence();
  auto go = [&](const std::vector<int32_t>& toks) {
    std::vector<float> out(toks.size() * static_cast<size_t>(e.vocab));
    eng.step(*seq, toks.data(), static_cast<int64_t>(toks.size()), out.data());
    return out;
  };
  std::vector<int32_t> A(e.tokens.begin(), e.tokens.begin() + 40), B(e.tokens.rbegin(), e.tokens.rbegin() + 33);
  auto a1 = go(A);
  seq->reset();
  go(B);
  seq->reset();
  EXPECT_EQ(go(A), a1);
  EXPECT_EQ(seq->n_past(), 40);
}

}  // namespace
