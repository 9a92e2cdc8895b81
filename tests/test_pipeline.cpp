// Layer split over several shards (and devices) in one process: the HC state is the only
// thing handed over, and the result equals the unsplit run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "fixture_util.h"
#include "util/error.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

using namespace hs;

namespace {

EngineOptions on(std::vector<std::string> devices, std::vector<int> split = {}) {
  EngineOptions o;
  o.devices = std::move(devices);
  o.layer_split = std::move(split);
  return o;
}

class CpuSplit : public ::testing::TestWithParam<std::string> {};

// Splits at several boundaries over cpu,cpu and cpu,cpu,cpu: bit-identical logits on every
// prompt split of the parity tests.
TEST_P(CpuSplit, BitIdenticalToUnsplit) {
  const std::string dir = std::string(HS_TEST_DATA) + "/" + GetParam();
  test::Expected e = test::load_expected(dir);
  Engine one(dir, EngineOptions{});
  const int L = one.config().n_layers;
  std::vector<std::vector<int>> splits = {{1, L - 1}, {L / 2, L - L / 2}, {L - 1, 1}, {1, 1, L - 2}, {2, L - 3, 1}};
  for (const auto& split : splits) {
    std::vector<std::string> devs(split.size(), "cpu");
    Engine sh(dir, on(devs, split));
    ASSERT_EQ(sh.n_shards(), static_cast<int>(split.size()));
    for (const auto& sp : test::splits_for(e))
      EXPECT_EQ(test::run(sh, e, sp.chunks), test::run(one, e, sp.chunks))
          << GetParam() << " split " << split.size() << " shards, prompt " << sp.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CpuSplit, ::testing::Values("tiny", "tiny-official", "small-bf16", "pro-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(Pipeline, BoundaryStateIsCheckedNeverResized) {
  const std::string dir = std::string(HS_TEST_DATA) + "/tiny";
  Engine eng(dir, on({"cpu", "cpu"}, {3, 3}));
  const auto& c = eng.config();
  const int64_t width = c.hc_mult * c.dim;
  auto seq = eng.new_sequence();
  std::vector<int32_t> toks = {1, 2, 3};
  std::vector<float> X(static_cast<size_t>(3 * width), 0.5f);
  Shard& second = eng.shard(1);
  auto expect_error = [&](const HcState& s, const std::string& needle) {
    try {
      second.forward(*seq->shards[1], toks.data(), 3, s);
      FAIL() << "accepted a bad boundary state";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  expect_error(HcState{nullptr, 3, width, &second.ops()}, "no HC state was handed over");
  expect_error(HcState{X.data(), 2, width, &second.ops()}, "HC state of 2 x 256 floats handed over, expected 3 x 256");
  expect_error(HcState{X.data(), 3, c.dim, &second.ops()}, "expected 3 x 256");
  EXPECT_EQ(seq->shards[1]->n_past(), 0);  // nothing was consumed
  second.forward(*seq->shards[1], toks.data(), 3, HcState{X.data(), 3, width, &second.ops()});
  EXPECT_EQ(seq->shards[1]->n_past(), 3);
}

TEST(Pipeline, ResetOnEveryShard) {
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  test::Expected e = test::load_expected(dir);
  Engine eng(dir, on({"cpu", "cpu", "cpu"}, {2, 3, 3}));
  auto seq = eng.new_sequence();
  auto go = [&](const std::vector<int32_t>& t) {
    std::vector<float> out(t.size() * static_cast<size_t>(e.vocab));
    eng.step(*seq, t.data(), static_cast<int64_t>(t.size()), out.data());
    return out;
  };
  std::vector<int32_t> A(e.tokens.begin(), e.tokens.begin() + 70), B(e.tokens.begin() + 70, e.tokens.end());
  auto a1 = go(A);
  seq->reset();
  go(B);
  seq->reset();
  EXPECT_EQ(go(A), a1);
  for (const auto& s : seq->shards) EXPECT_EQ(s->n_past(), 70);
}

// Scratch capacity on one device: a small shape (token by token), then a large one (the whole
// prompt in one chunk), then the small one again, on the same split engine; each run equals a
// fresh unsplit engine's run of the same shape (so grown, reused scratch changes nothing).
TEST(Pipeline, ScratchSmallLargeSmall) {
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  test::Expected e = test::load_expected(dir);
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  const std::vector<int64_t> small(static_cast<size_t>(T), 1), large = {T};
  Engine split(dir, on({"cpu", "cpu"}, {3, 5}));
  for (const auto* chunks : {&small, &large, &small}) {
    Engine fresh(dir, EngineOptions{});
    EXPECT_EQ(test::run(split, e, *chunks), test::run(fresh, e, *chunks)) << chunks->size() << " chunks";
  }
}

TEST(Pipeline, OptionErrors) {
  const std::string dir = std::string(HS_TEST_DATA) + "/tiny";
  EXPECT_THROW(Engine(dir, on({"cpu", "cpu"}, {3, 2, 1})), Error);
  EXPECT_THROW(Engine(dir, on({"cpu", "cpu"}, {6, 0})), Error);
  // Values that do not sum to the layer count are relative shares: 3:2 of 6 layers is 3.6 : 2.4.
  Engine shares(dir, on({"cpu", "cpu"}, {3, 2}));
  EXPECT_EQ(shares.shard(0).layer_end(), 4);
  EXPECT_EQ(shares.shard(1).layer_end(), 6);
  EXPECT_THROW(Engine(dir, on(std::vector<std::string>(7, "cpu"))), Error);
  EXPECT_THROW(Engine(dir, on({"cpu", "gpu:0"})), Error);
  Engine even(dir, on({"cpu", "cpu", "cpu", "cpu"}));  // default: an even split
  EXPECT_EQ(even.n_shards(), 4);
  EXPECT_EQ(even.shard(0).layer_end() - even.shard(0).layer_begin(), 1);
  EngineOptions bad_peer = on({"cpu", "cpu"});
  bad_peer.peer_access = "maybe";
  EXPECT_THROW(Engine(dir, bad_peer), Error);
  bad_peer.peer_access = "on";  // no GPU pair to check: nothing to refuse
  EXPECT_NO_THROW(Engine(dir, bad_peer));
}

// GPU splits (skipped without enough GPUs): the same model over cuda:0,cuda:1, a virtual split
// cuda:0,cuda:0, cuda:0 -> cuda:1 -> cuda:0, and cpu,cuda:0 all equal the single-device run.
// --expert-top-k: the model's own k changes nothing; a smaller k changes the logits (it is an
// approximation) but is applied identically in every shard, so a split still equals the
// unsplit run bit for bit; a k above the model's is refused. small-bf16 has hash layers (their
// tid2eid rows are cut to the first k experts) and score layers.
TEST(Pipeline, ExpertTopKIsTheSameInEveryShard) {
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  test::Expected e = test::load_expected(dir);
  const std::vector<int64_t> chunks = {static_cast<int64_t>(e.tokens.size())};
  EngineOptions base;
  Engine model_k(dir, base);
  const int k = model_k.config().n_active_experts;
  ASSERT_GE(k, 2);
  ASSERT_GT(model_k.config().n_hash_layers, 0);
  const std::vector<float> ref = test::run(model_k, e, chunks);
  EngineOptions same = base;
  same.expert_top_k = k;
  Engine same_k(dir, same);
  EXPECT_EQ(test::run(same_k, e, chunks), ref);

  EngineOptions fewer = base;
  fewer.expert_top_k = k - 1;
  Engine one(dir, fewer);
  EXPECT_EQ(one.config().n_active_experts, k - 1);
  const std::vector<float> approx = test::run(one, e, chunks);
  EXPECT_GT(test::rel_l2(approx.data(), ref.data(), ref.size()), 1e-3) << "k - 1 experts changed nothing";
  fewer.devices = {"cpu", "cpu"};
  fewer.layer_split = {3, one.config().n_layers - 3};
  Engine split(dir, fewer);
  EXPECT_EQ(test::run(split, e, {5, 11, 1, static_cast<int64_t>(e.tokens.size()) - 17}), approx);

  EngineOptions too_many = base;
  too_many.expert_top_k = k + 1;
  try {
    Engine bad(dir, too_many);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("--expert-top-k"), std::string::npos) << err.what();
  }
}

TEST(PipelineGpu, SplitsEqualOneDevice) {
  const int gpus = gpu_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  test::Expected e = test::load_expected(dir);
  EngineOptions single;
  single.device = "cuda:0";
  Engine one(dir, single);
  std::vector<std::vector<std::string>> cases = {{"cuda:0", "cuda:0"}, {"cpu", "cuda:0"}};
  if (gpus >= 2) {
    cases.push_back({"cuda:0", "cuda:1"});
    cases.push_back({"cuda:0", "cuda:1", "cuda:0"});
  }
  for (const auto& devs : cases) {
    // Two GPUs: every way of handing the state over (--peer-access); "on" is refused where the
    // pair has no peer access.
    const bool pair = std::find(devs.begin(), devs.end(), "cuda:1") != devs.end();
    for (const std::string peer : {"auto", "off", "on"}) {
      if (!pair && peer != "auto") continue;
      EngineOptions o = on(devs);
      o.peer_access = peer;
#ifdef HS_HAVE_CUDA
      if (peer == "on" && !(cuda::can_access_peer(0, 1) && cuda::can_access_peer(1, 0))) {
        EXPECT_THROW(Engine(dir, o), Error);
        continue;
      }
#endif
      Engine sh(dir, o);
      for (const auto& sp : test::splits_for(e)) {
        std::vector<float> a = test::run(sh, e, sp.chunks), b = test::run(one, e, sp.chunks);
        const double rel = test::rel_l2(a.data(), b.data(), a.size());
        std::string name;
        for (const auto& d : devs) name += (name.empty() ? "" : ",") + d;
        if (pair) name += " peer " + peer;
        std::printf("[pipeline-gpu] %-22s %-10s rel_l2 vs cuda:0 %.3e\n", name.c_str(), sp.name.c_str(), rel);
        EXPECT_LE(rel, 1e-6) << name << " " << sp.name;
        EXPECT_EQ(test::argmax_mismatches(a, b, e.vocab), 0) << name << " " << sp.name;
      }
    }
  }
  if (gpus < 2) GTEST_SKIP() << "one GPU: cuda:0,cuda:1 cases not run";
}

}  // namespace
