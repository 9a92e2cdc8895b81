// Speculative decoding with the DSpark drafter end to end (issue 16; docs/speculative.md) on the
// synthetic tiny model with a DSpark drafter (random weights: its drafts are mostly rejected, so
// this checks losslessness and the plumbing, not speed): greedy output equals plain greedy decode
// bit for bit under continuous batching (prompt chunks, plain decode steps and verify steps of
// different requests in one engine step) at every draft length and confidence threshold; a
// threshold nothing passes drafts nothing; sampled output is reproducible per seed; a model
// without the drafter is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/dspark.h"
#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "model/synthetic.h"
#include "scheduler_util.h"
#include "util/error.h"

namespace hs {
namespace {

SyntheticSpec dspark_model() {
  SyntheticSpec s;
  s.layers = 4;  // SWA, SWA, CSA (ratio 4), HCA (ratio 8): every state kind rolls back
  s.seed = 5;
  s.draft = "dspark";
  return s;
}

EngineOptions dspark_options(const std::string& draft = "dspark") {
  EngineOptions o;
  o.draft = draft;
  o.max_seqs = 4;
  o.threads = 2;
  return o;
}

std::unique_ptr<Engine> dspark_engine(const std::string& draft = "dspark") {
  return std::make_unique<Engine>(make_synthetic_source(dspark_model()), dspark_options(draft));
}

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 29 + salt * 13 + 7) % 300 + 3));
  return p;
}

SchedulerOptions options(int draft_max, float confidence) {
  SchedulerOptions o;
  o.max_seqs = 4;
  o.prefill_chunk = 5;
  o.draft_max = draft_max;
  o.draft_confidence = confidence;
  return o;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

TEST(SpecDspark, AutoPicksTheDsparkDrafter) {
  auto e = dspark_engine("auto");
  EXPECT_NE(e->dspark(), nullptr);
  EXPECT_EQ(e->drafter(), nullptr);
  EXPECT_EQ(e->dspark()->block(), 5);
}

TEST(SpecDspark, GreedyEqualsPlainDecodeUnderBatching) {
  auto e = dspark_engine();
  ASSERT_NE(e->dspark(), nullptr);
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(3, 1), prompt_of(9, 2), prompt_of(17, 3),
                                                     prompt_of(30, 4)};
  std::vector<SamplingParams> sp(4, greedy());
  sp[2].presence_penalty = 0.5f;  // does not draft, in the same steps as those that do
  SchedulerStats plain_stats, st;
  const auto plain = test::run_all(*e, options(0, 0.0f), prompts, 24, sp, &plain_stats);
  EXPECT_EQ(plain_stats.drafted_tokens, 0);
  for (const float conf : {0.0f, 0.5f})
    for (const int k : {1, 3, 5}) {
      const auto spec = test::run_all(*e, options(k, conf), prompts, 24, sp, &st);
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "k = " << k << ", confidence " << conf << ", request " << i;
        EXPECT_EQ(spec[i].reason, plain[i].reason);
      }
      if (conf == 0.0f) {  // the whole block (capped by k) every decode step
        EXPECT_GT(st.drafted_tokens, 0) << "k = " << k;
        EXPECT_GT(st.verify_steps, 0);
      }
      EXPECT_LE(st.accepted_tokens, st.drafted_tokens);
    }
}

TEST(SpecDspark, AThresholdNothingPassesDraftsNothing) {
  auto e = dspark_engine();
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(12, 5)};
  SchedulerStats st;
  const auto plain = test::run_all(*e, options(0, 0.0f), prompts, 16, {greedy()}, &st);
  const auto spec = test::run_all(*e, options(5, 1.0f), prompts, 16, {greedy()}, &st);
  EXPECT_EQ(spec[0].tokens, plain[0].tokens);
  EXPECT_EQ(st.drafted_tokens, 0);
  EXPECT_EQ(st.verify_steps, 0);
  // A head that doubts every first draft backs the request off like failing drafts: over a
  // longer generation only shadow probes remain (at most one per kProbeMin steps), checked against the
  // step's own token.
  const int n = 96;
  const auto plain_long = test::run_all(*e, options(0, 0.0f), prompts, n, {greedy()}, &st);
  const auto spec_long = test::run_all(*e, options(5, 1.0f), prompts, n, {greedy()}, &st);
  EXPECT_EQ(spec_long[0].tokens, plain_long[0].tokens);
  EXPECT_EQ(st.drafted_tokens, 0);
  EXPECT_GE(st.draft_probes, 3);
  EXPECT_LE(st.draft_probes, n / DraftLength::kProbeMin + 1);
}

TEST(SpecDspark, SampledOutputIsReproduciblePerSeed) {
  auto e = dspark_engine();
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 40;
  p.seed = 1234;
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(10, 6), prompt_of(6, 7)};
  SchedulerStats st;
  const auto a = test::run_all(*e, options(5, 0.0f), prompts, 20, {p, p}, &st);
  EXPECT_GT(st.verify_steps, 0);
  const auto b = test::run_all(*e, options(5, 0.0f), prompts, 20, {p, p}, &st);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << "request " << i;
    EXPECT_EQ(a[i].tokens.size(), 20u);
  }
}

// The drafter's context after a verify step that kept a prefix (the rows of a k + 1-row step,
// rolled back to the accepted ones) equals the context of single decode steps over the same
// tokens: the engine's taps of a multi-row step are per row, and the bookkeeping of the accepted
// rows (scheduler_dspark.cpp) is what these calls do.
TEST(SpecDspark, ContextAfterAVerifyStepEqualsSingleSteps) {
  auto e = dspark_engine();
  DsparkDrafter& d = *e->dspark();
  const int64_t Tw = d.tap_width(), V = e->config().vocab_size, hd = e->config().head_dim;
  const std::vector<int32_t> toks = prompt_of(14, 9);  // a prompt of 10, then 4 tokens
  std::vector<float> taps, logits;
  auto step = [&](Sequence& s, int64_t at, int64_t n) {
    taps.assign(static_cast<size_t>(n * Tw), 0.0f);
    logits.assign(static_cast<size_t>(n * V), 0.0f);
    StepItem it{&s, toks.data() + at, n, logits.data(), true};
    it.taps = taps.data();
    e->step_batch({&it, 1});
  };
  auto a = e->new_sequence(), b = e->new_sequence();
  step(*a, 0, 10);
  d.add_context(*a->dspark, 0, taps.data(), 10);
  for (int64_t p = 10; p < 14; ++p) {
    step(*a, p, 1);
    d.add_context(*a->dspark, p, taps.data(), 1);
  }
  step(*b, 0, 10);
  d.add_context(*b->dspark, 0, taps.data(), 10);
  step(*b, 10, 4);  // a verify step: the last token and 3 drafts, of which 2 are accepted
  e->truncate(*b, 13);
  d.add_context(*b->dspark, 10, taps.data(), 3);
  step(*b, 13, 1);
  d.add_context(*b->dspark, 13, taps.data(), 1);
  ASSERT_EQ(a->dspark->next, 14);
  ASSERT_EQ(b->dspark->next, 14);
  EXPECT_EQ(a->dspark->ring_pos, b->dspark->ring_pos);
  for (size_t st = 0; st < a->dspark->ring.size(); ++st) {
    const auto &x = a->dspark->ring[st], &y = b->dspark->ring[st];
    ASSERT_EQ(x.size(), y.size());
    double diff = 0, mag = 1;
    for (size_t i = 0; i < x.size(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(x[i]) - y[i]));
      mag = std::max(mag, std::fabs(static_cast<double>(x[i])));
    }
    EXPECT_LE(diff / mag, 1e-5) << "stage " << st << " (" << x.size() / static_cast<size_t>(hd) << " rows)";
  }
  const DsparkBlock ba = d.draft_block(*a->dspark, 42), bb = d.draft_block(*b->dspark, 42);
  double diff = 0, mag = 1;
  for (size_t i = 0; i < ba.base.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(ba.base[i]) - bb.base[i]));
    mag = std::max(mag, std::fabs(static_cast<double>(ba.base[i])));
  }
  EXPECT_LE(diff / mag, 1e-5);
}

// Rejection sampling with the DSpark drafts (q: the distribution each draft is drawn from,
// Markov bias included): the second token's histogram over many seeds equals plain sampling's.
TEST(SpecDspark, SampledOutputKeepsTheDistribution) {
  auto e = dspark_engine();
  const std::vector<int32_t> prompt = prompt_of(6, 5);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 6;
  const int runs = 800;
  std::vector<std::vector<int32_t>> prompts(runs, prompt);
  std::vector<SamplingParams> sp(runs, p);
  for (int i = 0; i < runs; ++i) sp[static_cast<size_t>(i)].seed = 2000 + static_cast<uint64_t>(i);
  SchedulerStats st;
  const auto plain = test::run_all(*e, options(0, 0.0f), prompts, 3, sp, &st);
  const auto spec = test::run_all(*e, options(2, 0.0f), prompts, 3, sp, &st);
  EXPECT_GT(st.drafted_tokens, runs / 2);
  EXPECT_GT(st.accepted_tokens, 0) << "no draft accepted: the acceptance branch went untested";
  ASSERT_NO_FATAL_FAILURE(test::expect_same_token_distribution(plain, spec, 1));  // the second token
}

// The taps over a layer split (cpu,cpu, pipelined micro-batches: the target layers on both
// shards), a pool so small that drafting requests are preempted and recompute, and a prompt
// restored from the prefix cache (the context restarts where the restored state ends): still
// plain greedy's tokens.
TEST(SpecDspark, GreedyEqualsPlainOverASplitUnderPreemptionAndFromTheCache) {
  auto e = dspark_engine();
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(13, 1), prompt_of(21, 2), prompt_of(9, 3),
                                                     prompt_of(17, 4)};
  const std::vector<SamplingParams> sp(4, greedy());
  const auto plain = test::run_all(*e, options(0, 0.0f), prompts, 40, sp);
  EngineOptions so = dspark_options();
  so.devices = {"cpu", "cpu"};
  so.layer_split = {2, 2};
  so.pipeline_micro_batches = 2;
  Engine split(make_synthetic_source(dspark_model()), so);
  ASSERT_NE(split.dspark(), nullptr);
  SchedulerStats st;
  const auto got = test::run_all(split, options(3, 0.0f), prompts, 40, sp, &st);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, plain[i].tokens) << "split, request " << i;
  EXPECT_GT(st.drafted_tokens, 0);
  EngineOptions po = dspark_options();
  {
    const StateLayout& L = e->state_layout(0);
    po.state_memory = 4 * L.slot_bytes + L.swa_blocks * L.swa_page_bytes + 14 * L.cmp_page_bytes;
  }
  Engine small(make_synthetic_source(dspark_model()), po);
  const auto pre = test::run_all(small, options(4, 0.0f), prompts, 40, sp, &st);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(pre[i].tokens, plain[i].tokens) << "preempted, request " << i;
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(st.drafted_tokens, 0);
  // From the prefix cache.
  const std::vector<int32_t> first = prompt_of(19, 6);
  std::vector<int32_t> second = first;
  for (int i = 0; i < 7; ++i) second.push_back(static_cast<int32_t>(40 + i));
  const auto want = test::run_all(*e, options(0, 0.0f), {second}, 20, {greedy()});
  PrefixCache cache(*e, PrefixCacheOptions{});
  SchedulerOptions o = options(3, 0.0f);
  o.cache = &cache;
  Scheduler s(*e, o);
  test::generate(s, first, 5, greedy()).get();
  const auto from_cache = test::generate(s, second, 20, greedy()).get();
  EXPECT_EQ(from_cache.tokens, want[0].tokens);
  EXPECT_GT(s.stats().cached_prompt_tokens, 0);
  EXPECT_GT(s.stats().drafted_tokens, 0);
}

TEST(SpecDspark, AModelWithoutTheDrafterIsRefused) {
  SyntheticSpec s = dspark_model();
  s.draft.clear();
  EngineOptions o;
  o.draft = "dspark";
  o.threads = 2;
  try {
    Engine e(make_synthetic_source(s), o);
    ADD_FAILURE() << "--draft dspark accepted a model without the drafter";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("cannot draft with --draft dspark"), std::string::npos) << err.what();
  }
  EXPECT_EQ(parse_draft_kind("dspark"), "dspark");
  EXPECT_THROW(parse_draft_kind("dflash"), Error);
}

}  // namespace
}  // namespace hs
