// The DSpark drafter and speculative decoding with it on a GPU (issue 16; skipped without one):
// the drafter's block (hc_head rows, draft logits with the Markov bias, confidence) on cuda:0
// against the CPU reference (relative 1e-4, reference numerics), on the synthetic model and on
// the outside oracle's fixture (tests/data/dspark-tiny, when generated), and speculative greedy
// decoding on cuda:0 against plain greedy decoding on cuda:0; the taps (the drafter's context) of
// decode steps replayed as CUDA graphs against op by op and the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "engine/dspark.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "format/safetensors.h"
#include "model/synthetic.h"
#include "scheduler_util.h"
#include "util/thread_pool.h"

namespace hs {
namespace {

SyntheticSpec model() {
  SyntheticSpec s;
  s.layers = 4;
  s.seed = 5;
  s.draft = "dspark";
  return s;
}

std::unique_ptr<Engine> engine(const std::string& device, bool graphs = true,
                               const std::string& draft_device = "") {
  EngineOptions o;
  o.device = device;
  o.draft_device = draft_device;
  o.cuda_graphs = graphs;
  o.draft = "dspark";
  o.max_seqs = 4;
  o.max_context = 256;
  o.numerics = Numerics::Reference;
  return std::make_unique<Engine>(make_synthetic_source(model()), o);
}

// One block of each drafter after the same context, compared (gpu against cpu).
void expect_same_block(DsparkDrafter& cpu, DsparkDrafter& gpu, const std::vector<float>& taps, int64_t rows,
                       int32_t anchor, const std::vector<int32_t>& chain, const std::string& what) {
  auto a = cpu.new_sequence(), b = gpu.new_sequence();
  cpu.add_context(*a, 0, taps.data(), rows);
  gpu.add_context(*b, 0, taps.data(), rows);
  const DsparkBlock ba = cpu.draft_block(*a, anchor), bb = gpu.draft_block(*b, anchor);
  EXPECT_LE(test::max_rel(bb.h.data(), ba.h.data(), ba.h.size()), 1e-4) << what << ": h";
  const int64_t V = cpu.config().vocab_size;
  std::vector<float> la(static_cast<size_t>(V)), lb(la);
  for (int j = 0; j < cpu.block(); ++j) {
    const int32_t prev = j == 0 ? anchor : chain[static_cast<size_t>(j - 1)];
    float ca = 0, cb = 0;
    cpu.step(ba, j, prev, la.data(), &ca);
    gpu.step(bb, j, prev, lb.data(), &cb);
    EXPECT_LE(test::max_rel(lb.data(), la.data(), la.size()), 1e-4) << what << ": logits of draft " << j;
    EXPECT_LE(test::max_rel(&cb, &ca, 1), 1e-4) << what << ": confidence of draft " << j;
  }
}

TEST(DsparkCuda, DrafterMatchesTheCpu) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto cpu = engine("cpu"), gpu = engine("cuda:0");
  const int64_t Tw = cpu->dspark()->tap_width();
  std::vector<float> taps(static_cast<size_t>(20 * Tw));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = std::sin(0.13f * static_cast<float>(i % 977));
  for (int64_t rows : {int64_t{5}, int64_t{20}})
    expect_same_block(*cpu->dspark(), *gpu->dspark(), taps, rows, 42, {7, 8, 9, 10}, "synthetic, context " +
                      std::to_string(rows));
  // Three sequences' context rows and blocks in one pass on the device against the CPU's one by one.
  std::vector<std::unique_ptr<DsparkSequence>> a, b;
  std::vector<DsparkContextRows> rows;
  for (int64_t k = 0; k < 3; ++k) {
    a.push_back(cpu->dspark()->new_sequence());
    b.push_back(gpu->dspark()->new_sequence());
    cpu->dspark()->add_context(*a.back(), 3 * k, taps.data() + k * Tw, 4 + 5 * k);
    rows.push_back({b.back().get(), 3 * k, taps.data() + k * Tw, 4 + 5 * k});
  }
  gpu->dspark()->add_context(rows);
  const std::vector<int32_t> anchors = {42, 5, 77};
  const std::vector<const DsparkSequence*> bs = {b[0].get(), b[1].get(), b[2].get()};
  const std::vector<DsparkBlock> bl = gpu->dspark()->draft_blocks(bs, anchors);
  for (size_t k = 0; k < 3; ++k) {
    const DsparkBlock want = cpu->dspark()->draft_block(*a[k], anchors[k]);
    EXPECT_LE(test::max_rel(bl[k].h.data(), want.h.data(), want.h.size()), 1e-4) << "block " << k << " of 3: h";
    EXPECT_LE(test::max_rel(bl[k].base.data(), want.base.data(), want.base.size()), 1e-4) << "block " << k << " of 3";
  }
}

TEST(DsparkCuda, FixtureOnTheDevice) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(HS_TEST_DATA) + "/dspark-tiny";
  if (!std::filesystem::exists(dir + "/expected.safetensors")) GTEST_SKIP() << "no DSpark fixture at " << dir;
  const auto src = ModelSource::open(dir);
  const ModelConfig& c = src->config();
  ThreadPool pool(2);
  auto ops = make_ops("cuda:0", pool, Numerics::Reference);
  auto mat = [&](const std::string& name) {
    Mat m;
    for (const TensorSpec& t : model_tensor_specs(c, 0, 1, true, true))
      if (t.name == name) {
        m.rows = t.shape[0];
        m.cols = t.shape[1];
        if (ops->weight_form() == WeightForm::Native) m.native = src->native(t);
        if (!m.native) m.w = src->read_f32(t);
        ops->adopt_weight(m);
      }
    return m;
  };
  const Mat embed = mat("token_embd"), head = mat("output");
  DsparkDrafter d(c, load_dspark_weights(*src, ops->weight_form(), [&](Mat& m) { ops->adopt_weight(m); }), *ops,
                  embed, head, Numerics::Reference);
  const st::File ex(dir + "/expected.safetensors");
  auto f32 = [&](const std::string& n) { return test::tensor_values<float>(ex, n); };
  auto i32 = [&](const std::string& n) { return test::tensor_values<int32_t>(ex, n); };
  const std::vector<float> taps = f32("taps");
  const int64_t V = c.vocab_size;
  for (int k = 0; ex.tensors().count("anchor_" + std::to_string(k)); ++k) {
    const std::string K = std::to_string(k);
    const int32_t anchor = i32("anchor_" + K).at(0);
    const auto drafts = i32("tokens_" + K);
    const auto logits = f32("logits_" + K), conf = f32("confidence_" + K);
    auto s = d.new_sequence();
    d.add_context(*s, 0, taps.data(), i32("context_" + K).at(0));
    const DsparkBlock b = d.draft_block(*s, anchor);
    std::vector<float> lg(static_cast<size_t>(V));
    for (int j = 0; j < d.block(); ++j) {
      float cf = 0;
      d.step(b, j, j == 0 ? anchor : drafts[static_cast<size_t>(j - 1)], lg.data(), &cf);
      EXPECT_LE(test::max_rel(lg.data(), logits.data() + j * V, lg.size()), 1e-4) << "case " << k << ", draft " << j;
      EXPECT_LE(test::max_rel(&cf, conf.data() + j, 1), 1e-4) << "case " << k << ", confidence " << j;
    }
  }
}

TEST(DsparkCuda, SpeculativeGreedyEqualsPlainOnTheDevice) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto gpu = engine("cuda:0");
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 3; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 9 + 7 * r; ++i) p.push_back(static_cast<int32_t>((i * 31 + r * 17 + 2) % 300 + 3));
    prompts.push_back(p);
  }
  SamplingParams g;
  g.temperature = 0;
  const std::vector<SamplingParams> sp(prompts.size(), g);
  SchedulerOptions o;
  o.max_seqs = 4;
  o.prefill_chunk = 8;
  const auto plain = test::run_all(*gpu, o, prompts, 32, sp);
  o.draft_max = 5;
  o.draft_confidence = 0.0f;
  SchedulerStats st;
  const auto spec = test::run_all(*gpu, o, prompts, 32, sp, &st);
  // As for MTP on the device: a verify step's batched matmuls may flip a near-tie; report it.
  int same = 0;
  for (size_t i = 0; i < prompts.size(); ++i) same += spec[i].tokens == plain[i].tokens;
  std::printf("[dspark-cuda] %d of %zu greedy requests identical with drafting; %lld drafted, %lld accepted\n", same,
              prompts.size(), static_cast<long long>(st.drafted_tokens), static_cast<long long>(st.accepted_tokens));
  EXPECT_GT(st.drafted_tokens, 0);
  EXPECT_GE(same, static_cast<int>(prompts.size()) - 1);
}

// Decode steps with taps run as captured graphs (the taps are an op of the step, Shard::set_taps):
// every step's taps equal the same step's op by op (graphs off) bit for bit, most steps replay,
// and the taps match the CPU's (relative 1e-4, reference numerics).
TEST(DsparkCuda, TapsOfGraphStepsEqualOpByOp) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto on = engine("cuda:0", true), off = engine("cuda:0", false), cpu = engine("cpu");
  const int64_t V = on->config().vocab_size, Tw = on->dspark()->tap_width();
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (Engine* e : {on.get(), off.get(), cpu.get()}) seqs.push_back(e->new_sequence());
  const std::vector<int32_t> prompt = {3, 14, 15, 92, 65, 35};
  const int steps = 40;
  int same = 0;
  double worst = 0;
  for (int i = -1; i < steps; ++i) {
    const std::vector<int32_t> toks = i < 0 ? prompt : std::vector<int32_t>{static_cast<int32_t>((i * 37 + 11) % V)};
    const int64_t n = static_cast<int64_t>(toks.size());
    std::vector<std::vector<float>> taps;
    for (size_t k = 0; k < 3; ++k) {
      Engine* e = k == 0 ? on.get() : k == 1 ? off.get() : cpu.get();
      std::vector<float> logits(static_cast<size_t>(n * V));
      taps.emplace_back(static_cast<size_t>(n * Tw), std::nanf(""));
      StepItem it{seqs[k].get(), toks.data(), n, logits.data(), true};
      it.taps = taps.back().data();
      e->step_batch({&it, 1});
    }
    same += std::memcmp(taps[0].data(), taps[1].data(), taps[0].size() * sizeof(float)) == 0;
    worst = std::max(worst, test::max_rel(taps[0].data(), taps[2].data(), taps[2].size()));
  }
  const StepGraphStats st = on->graph_stats();
  std::printf("[dspark-cuda] taps: %d of %d steps identical to op by op; %lld replayed, %lld captured; vs cpu %.2e\n",
              same, steps + 1, static_cast<long long>(st.replayed), static_cast<long long>(st.captured), worst);
  EXPECT_EQ(same, steps + 1);
  EXPECT_GE(st.replayed, steps - 8) << "decode steps with taps should replay as graphs";
  EXPECT_EQ(st.failed, 0);
  EXPECT_LE(worst, 1e-4);
}

// --draft-device: the drafter on another backend than the model (its embedding and head copied
// there; its inputs come through host memory). Greedy speculative decoding gives plain greedy's
// tokens (the model verifies them), and drafts are made: the model on cuda:0 with the drafter on
// the CPU, and the other way round.
TEST(DsparkCuda, TheDrafterOnAnotherDevice) {
  if (gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < 2; ++r) {
    std::vector<int32_t> p;
    for (int i = 0; i < 9 + 5 * r; ++i) p.push_back(static_cast<int32_t>((i * 29 + r * 13 + 4) % 300 + 3));
    prompts.push_back(p);
  }
  SamplingParams g;
  g.temperature = 0;
  const std::vector<SamplingParams> sp(prompts.size(), g);
  for (const bool model_on_gpu : {true, false}) {
    auto e = model_on_gpu ? engine("cuda:0", true, "cpu") : engine("cpu", true, "cuda:0");
    ASSERT_NE(e->dspark(), nullptr);
    SchedulerOptions o;
    o.max_seqs = 4;
    o.prefill_chunk = 8;
    const auto plain = test::run_all(*e, o, prompts, 24, sp);
    o.draft_max = 3;
    o.draft_confidence = 0.0f;
    SchedulerStats st;
    const auto spec = test::run_all(*e, o, prompts, 24, sp, &st);
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(spec[i].tokens, plain[i].tokens) << (model_on_gpu ? "model on cuda:0" : "model on the cpu")
                                                 << ", request " << i;
    EXPECT_GT(st.drafted_tokens, 0);
  }
}

}  // namespace
}  // namespace hs
