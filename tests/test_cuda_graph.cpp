// Decode steps replayed as captured CUDA graphs (engine/step_graphs.h) against the same step
// launched op by op (--cuda-graphs off): the logits must be identical bit for bit at every
// step, through window closes of both compressors, entry-capacity growth (a new capture), a
// batch of sequences at different positions, sequences reset and reused mid-run, and a layer
// split over two devices. The HF parity tests (test_parity_cuda) run their decode splits
// through the graphs too. The *_pdl cases run the graphs (and, for one sequence, the op-by-op
// steps too) with programmatic dependent launch (--pdl on): kernels that overlap their
// predecessor's tail must still give the plain launches' bits. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <ostream>
#include <random>

#include "engine/engine.h"
#include "fixture_util.h"

using namespace hs;

namespace {

bool have_gpu() { return gpu_count() > 0; }

EngineOptions options(const std::vector<std::string>& devices, Numerics num, bool graphs, bool pdl = false) {
  EngineOptions o;
  o.devices = devices;
  o.numerics = num;
  o.cuda_graphs = graphs;
  o.pdl = pdl;
  return o;
}

int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int32_t>(best);
}

// One sequence: a 9-token prompt, then `steps` greedy decode steps; every step's logits.
std::vector<std::vector<float>> generate(Engine& eng, const std::vector<int32_t>& prompt, int steps) {
  const int64_t V = eng.config().vocab_size;
  auto seq = eng.new_sequence();
  std::vector<std::vector<float>> out;
  std::vector<float> logits(prompt.size() * static_cast<size_t>(V));
  eng.step(*seq, prompt.data(), static_cast<int64_t>(prompt.size()), logits.data());
  int32_t tok = argmax(logits.data() + (prompt.size() - 1) * V, V);
  std::vector<float> one(static_cast<size_t>(V));
  for (int i = 0; i < steps; ++i) {
    eng.step(*seq, &tok, 1, one.data());
    out.push_back(one);
    tok = argmax(one.data(), V);
  }
  return out;
}

struct Case {
  const char* fixture;
  Numerics numerics;
  bool pdl = false;  // the graphs' engine launches with PDL
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << c.fixture << (c.numerics == Numerics::Model ? " model" : " reference") << (c.pdl ? " pdl" : "");
  }
};

class CudaGraph : public ::testing::TestWithParam<Case> {};

// 300 steps of tiny (window 8, ratios 4 and 8) close thousands of windows and grow the
// ratio-4 entries past their first capacity of 64 (a new shape: captured again). The same steps
// with the fused hand-over between sub-layers give the same bits.
TEST_P(CudaGraph, OneSequenceMatchesOpByOp) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(HS_TEST_DATA) + "/" + GetParam().fixture;
  test::Expected e = test::load_expected(dir);
  const std::vector<int32_t> prompt(e.tokens.begin(), e.tokens.begin() + 9);
  Engine on(dir, options({"cuda:0"}, GetParam().numerics, true, GetParam().pdl));
  Engine off(dir, options({"cuda:0"}, GetParam().numerics, false));
  const int steps = 300;
  auto a = generate(on, prompt, steps);
  auto b = generate(off, prompt, steps);
  auto first_diff = [&](const std::vector<std::vector<float>>& x) {
    for (int i = 0; i < steps; ++i)
      if (x[static_cast<size_t>(i)] != b[static_cast<size_t>(i)]) return i;
    return -1;
  };
  EXPECT_EQ(first_diff(a), -1) << "graph and op-by-op logits differ from step " << first_diff(a);
  if (GetParam().pdl) {  // op by op with PDL: the same bits as without
    Engine eager(dir, options({"cuda:0"}, GetParam().numerics, false, true));
    EXPECT_EQ(first_diff(generate(eager, prompt, steps)), -1) << "op by op with PDL differs";
  }
  {  // the hand-over between sub-layers as one launch (EngineOptions::fused_handover): the same bits
    EngineOptions o = options({"cuda:0"}, GetParam().numerics, true, GetParam().pdl);
    o.fused_handover = true;
    Engine fused(dir, o);
    EXPECT_EQ(first_diff(generate(fused, prompt, steps)), -1) << "the fused hand-over differs";
  }
  const StepGraphStats s = on.graph_stats(), t = off.graph_stats();
  std::printf("[cuda-graph] %s %s: %d steps: %lld captured, %lld replayed, %lld op by op, %lld failed\n",
              GetParam().fixture, GetParam().numerics == Numerics::Model ? "model" : "reference", steps,
              static_cast<long long>(s.captured), static_cast<long long>(s.replayed), static_cast<long long>(s.eager),
              static_cast<long long>(s.failed));
  EXPECT_EQ(s.failed, 0);
  EXPECT_GE(s.replayed, steps - 40);  // most steps replay
  EXPECT_LE(s.captured, 20);           // a handful of shapes
  EXPECT_EQ(t.replayed + t.captured, 0);
  EXPECT_EQ(t.eager, steps);
}

// Five sequences at different positions decode together; two of them finish, are reset and
// take new prompts mid-run (their slots then hold other data at the same addresses), and a
// sixth sequence joins late. Graphs on and off must agree at every step.
TEST_P(CudaGraph, StaggeredBatchMatchesOpByOp) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(HS_TEST_DATA) + "/" + GetParam().fixture;
  std::vector<std::string> devices{"cuda:0"};
  if (gpu_count() >= 2) devices = {"cuda:0", "cuda:1"};
  Engine on(dir, options(devices, GetParam().numerics, true, GetParam().pdl));
  Engine off(dir, options(devices, GetParam().numerics, false));
  const int64_t V = on.config().vocab_size;
  std::mt19937 rng(12345);
  auto prompt = [&](int len) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(V));
    return p;
  };
  struct Slot {
    std::unique_ptr<Sequence> a, b;
    std::vector<int32_t> pending;  // the next step's tokens (a prompt, or one decoded token)
    bool live = false;
  };
  std::vector<Slot> slots(6);
  const int lens[] = {1, 5, 9, 17, 30, 3};
  for (int i = 0; i < 6; ++i) {
    slots[static_cast<size_t>(i)].a = on.new_sequence();
    slots[static_cast<size_t>(i)].b = off.new_sequence();
  }
  int compared = 0, mismatched = 0;
  for (int step = 0; step < 160; ++step) {
    for (int i = 0; i < 6; ++i) {
      Slot& s = slots[static_cast<size_t>(i)];
      const bool join = (i < 5 && step == 0) || (i == 5 && step == 70);
      const bool restart = (i == 1 || i == 3) && step == 90;  // reset, reuse with a new prompt
      if (restart) {
        s.a->reset();
        s.b->reset();
      }
      if (join || restart) {
        s.pending = prompt(lens[i] + (restart ? 4 : 0));
        s.live = true;
      }
    }
    std::vector<StepItem> ia, ib;
    std::vector<std::vector<float>> la, lb;
    std::vector<int> who;
    for (int i = 0; i < 6; ++i)
      if (slots[static_cast<size_t>(i)].live) who.push_back(i);
    la.assign(who.size(), std::vector<float>(static_cast<size_t>(V)));
    lb = la;
    for (size_t j = 0; j < who.size(); ++j) {
      Slot& s = slots[static_cast<size_t>(who[j])];
      const int64_t n = static_cast<int64_t>(s.pending.size());
      ia.push_back(StepItem{s.a.get(), s.pending.data(), n, la[j].data()});
      ib.push_back(StepItem{s.b.get(), s.pending.data(), n, lb[j].data()});
    }
    on.step_batch(ia);
    off.step_batch(ib);
    for (size_t j = 0; j < who.size(); ++j) {
      ++compared;
      if (la[j] != lb[j]) ++mismatched;
      slots[static_cast<size_t>(who[j])].pending = {argmax(la[j].data(), V)};
    }
  }
  const StepGraphStats s = on.graph_stats();
  std::printf("[cuda-graph] %s batch over %zu device(s): %d rows compared, %d differ; %lld captured, %lld "
              "replayed, %lld op by op\n",
              GetParam().fixture, devices.size(), compared, mismatched, static_cast<long long>(s.captured),
              static_cast<long long>(s.replayed), static_cast<long long>(s.eager));
  EXPECT_EQ(mismatched, 0);
  EXPECT_EQ(s.failed, 0);
  EXPECT_GT(s.replayed, 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaGraph,
                         ::testing::Values(Case{"tiny", Numerics::Reference}, Case{"tiny", Numerics::Model},
                                           Case{"small-bf16", Numerics::Reference},
                                           Case{"small-bf16", Numerics::Model},
                                           Case{"tiny", Numerics::Model, true},
                                           Case{"small-bf16", Numerics::Reference, true},
                                           Case{"small-bf16", Numerics::Model, true}),
                         [](const auto& info) {
                           std::string n = info.param.fixture;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n + (info.param.numerics == Numerics::Model ? "_model" : "_reference") +
                                  (info.param.pdl ? "_pdl" : "");
                         });

}  // namespace
