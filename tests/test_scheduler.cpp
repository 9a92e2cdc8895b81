// Sampler and continuous-batching scheduler on the CPU engine (tiny fixture model).
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <map>

#include "engine/scheduler.h"
#include "util/error.h"

using namespace hs;

namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(Sampler, GreedyTopKAndLogprobs) {
  auto l = logits_of({0.1f, 2.0f, -1.0f, 1.9f});
  SamplingParams p;
  p.temperature = 0;
  p.top_logprobs = 2;
  Sampler s(p);
  auto r = s.sample(l.data(), 4);
  EXPECT_EQ(r.token, 1);
  double z = 0;
  for (float x : l) z += std::exp(x);
  EXPECT_NEAR(r.logprob, 2.0 - std::log(z), 1e-6);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].token, 1);
  EXPECT_EQ(r.top[1].token, 3);
  SamplingParams k1;
  k1.top_k = 1;
  k1.temperature = 5;
  Sampler s1(k1);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s1.sample(l.data(), 4).token, 1);
}

TEST(Sampler, SeededAndDistributed) {
  auto l = logits_of({0.0f, 0.0f, std::log(2.0f), -30.0f});
  SamplingParams p;
  p.seed = 42;
  Sampler a(p), b(p);
  std::map<int, int> hist;
  for (int i = 0; i < 4000; ++i) {
    int t = a.sample(l.data(), 4).token;
    EXPECT_EQ(t, b.sample(l.data(), 4).token);  // same seed, same stream
    hist[t]++;
  }
  EXPECT_NEAR(hist[2] / 4000.0, 0.5, 0.04);  // p = 2/4
  EXPECT_NEAR(hist[0] / 4000.0, 0.25, 0.04);
  EXPECT_LT(hist[3], 3);
  SamplingParams tp = p;
  tp.top_p = 0.4f;  // only the 0.5-mass token survives
  Sampler c(tp);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(c.sample(l.data(), 4).token, 2);
  SamplingParams mp = p;
  mp.min_p = 0.6f;  // tokens below 0.6 * p_max = 0.3 are cut
  Sampler d(mp);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(d.sample(l.data(), 4).token, 2);
}

TEST(Sampler, PenaltiesDiscourageRepeats) {
  auto l = logits_of({1.0f, 1.2f});
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 0.5f;
  Sampler s(p);
  EXPECT_EQ(s.sample(l.data(), 2).token, 1);
  s.accept(1);
  EXPECT_EQ(s.sample(l.data(), 2).token, 0);
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = std::make_unique<Engine>(std::string(HS_TEST_DATA) + "/tiny", EngineOptions{}); }

  struct Outcome {
    std::vector<int32_t> tokens;
    FinishReason reason = FinishReason::Error;
  };

  // Submits a greedy request; the future resolves when it finishes.
  std::future<Outcome> go(Scheduler& s, std::vector<int32_t> prompt, int max_tokens, std::vector<int32_t> stops = {},
                          int64_t fail_after = -1) {
    auto prom = std::make_shared<std::promise<Outcome>>();
    auto out = std::make_shared<Outcome>();
    GenerationRequest r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0;
    r.stop_tokens = std::move(stops);
    r.test_fail_after = fail_after;
    r.on_token = [out](const SampleResult& x) {
      out->tokens.push_back(x.token);
      return true;
    };
    r.on_done = [out, prom](FinishReason f, const std::string&) {
      out->reason = f;
      prom->set_value(*out);
    };
    s.submit(std::move(r));
    return prom->get_future();
  }

  // `count` prompts, prompt i of first + grow * i tokens (a pattern seeded by `seed`).
  static std::vector<std::vector<int32_t>> prompts_of(int count, int first, int grow, int seed) {
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < count; ++i) {
      std::vector<int32_t> p;
      for (int j = 0; j < first + grow * i; ++j) p.push_back((seed * i + 7 * j + 3) % 320);
      prompts.push_back(p);
    }
    return prompts;
  }

  // Each prompt run alone (one slot) on the unsplit engine.
  std::vector<Outcome> solo_runs(const std::vector<std::vector<int32_t>>& prompts, int max_tokens) {
    SchedulerOptions o;
    o.max_seqs = 1;
    Scheduler s(*engine_, o);
    std::vector<Outcome> out;
    for (auto& p : prompts) out.push_back(go(s, p, max_tokens).get());
    return out;
  }

  std::unique_ptr<Engine> engine_;
};

TEST_F(SchedulerTest, ConcurrentRequestsEqualTheirSoloRuns) {
  const std::vector<std::vector<int32_t>> prompts = prompts_of(6, 5, 7, 13);
  const std::vector<Outcome> solo = solo_runs(prompts, 12);
  SchedulerOptions o;
  o.max_seqs = 4;  // fewer slots than requests: slots are reused (and reset) mid-run
  o.prefill_chunk = 3;
  Scheduler s(*engine_, o);
  std::vector<std::future<Outcome>> fs;
  for (auto& p : prompts) fs.push_back(go(s, p, 12));
  for (size_t i = 0; i < fs.size(); ++i) {
    Outcome got = fs[i].get();
    EXPECT_EQ(got.tokens, solo[i].tokens) << "request " << i;
    EXPECT_EQ(got.reason, FinishReason::Length);
    EXPECT_EQ(got.tokens.size(), 12u);
  }
  auto st = s.stats();
  EXPECT_EQ(st.requests_total, 6);
  EXPECT_EQ(st.requests_active, 0);
  EXPECT_EQ(st.generated_tokens_total, 72);
}

TEST_F(SchedulerTest, StopTokenCancelAndAdmission) {
  SchedulerOptions o;
  o.max_seqs = 2;
  o.ctx_size = 64;
  Scheduler s(*engine_, o);
  Outcome ref = go(s, {1, 2, 3}, 8).get();
  ASSERT_EQ(ref.tokens.size(), 8u);
  // Stop on the third generated token.
  Outcome stopped = go(s, {1, 2, 3}, 8, {ref.tokens[2]}).get();
  EXPECT_EQ(stopped.reason, FinishReason::Stop);
  EXPECT_LE(stopped.tokens.size(), 3u);
  EXPECT_EQ(stopped.tokens.back(), ref.tokens[2]);
  // Too long for the context: rejected with the numbers.
  try {
    go(s, std::vector<int32_t>(60, 1), 10);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("70 tokens do not fit the context size of 64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(go(s, {1, 400}, 4), Error);
  EXPECT_THROW(go(s, {}, 4), Error);
  // A callback returning false ends the request.
  auto prom = std::make_shared<std::promise<FinishReason>>();
  GenerationRequest r;
  r.prompt = {5, 6};
  r.max_tokens = 50;
  r.on_token = [](const SampleResult&) { return false; };
  r.on_done = [prom](FinishReason f, const std::string&) { prom->set_value(f); };
  s.submit(std::move(r));
  EXPECT_EQ(prom->get_future().get(), FinishReason::Stop);
  // cancel() ends a long request within a step.
  auto p2 = std::make_shared<std::promise<FinishReason>>();
  GenerationRequest r2;
  r2.prompt = {5, 6};
  r2.max_tokens = 60;
  r2.on_done = [p2](FinishReason f, const std::string&) { p2->set_value(f); };
  uint64_t id = s.submit(std::move(r2));
  s.cancel(id);
  EXPECT_EQ(p2->get_future().get(), FinishReason::Cancelled);
  EXPECT_EQ(s.stats().requests_active, 0);
}

// The engine-failure test hook: the request ends with Error (with the message) after the
// tokens it had, its slot is freed, and the other request in flight is not disturbed.
TEST_F(SchedulerTest, EngineFailureEndsTheRequestOnly) {
  SchedulerOptions o;
  o.max_seqs = 1;  // a leaked slot would block the next request
  o.prefill_chunk = 2;
  Scheduler s(*engine_, o);
  const Outcome ref = go(s, {1, 2, 3, 4, 5}, 6).get();
  for (int64_t after : {0, 4}) {
    auto prom = std::make_shared<std::promise<std::pair<FinishReason, std::string>>>();
    auto got = std::make_shared<std::vector<int32_t>>();
    GenerationRequest r;
    r.prompt = {1, 2, 3, 4, 5};
    r.max_tokens = 6;
    r.sampling.temperature = 0;
    r.test_fail_after = after;
    r.on_token = [got](const SampleResult& x) {
      got->push_back(x.token);
      return true;
    };
    r.on_done = [prom](FinishReason f, const std::string& e) { prom->set_value({f, e}); };
    s.submit(std::move(r));
    const auto [reason, error] = prom->get_future().get();
    EXPECT_EQ(reason, FinishReason::Error);
    EXPECT_NE(error.find("test hook"), std::string::npos) << error;
    EXPECT_EQ(*got, std::vector<int32_t>(ref.tokens.begin(), ref.tokens.begin() + after));
    EXPECT_EQ(s.stats().requests_active, 0);
    EXPECT_EQ(go(s, {1, 2, 3, 4, 5}, 6).get().tokens, ref.tokens);  // the slot works (and was reset)
  }
}

// Every step is one batched engine step: over a cpu,cpu split run as a pipeline of 2
// micro-batches, with a row budget that forces prompt chunks and decode tokens to share steps,
// concurrent greedy requests each get exactly what they get alone; a request whose test hook
// fires ends alone with Error (taken out before the step) while the others in its batches go on.
TEST_F(SchedulerTest, BatchedPipelinedStepsEqualSoloRuns) {
  EngineOptions eo;
  eo.devices = {"cpu", "cpu"};
  eo.layer_split = {2, 4};
  eo.pipeline_micro_batches = 2;
  Engine piped(std::string(HS_TEST_DATA) + "/tiny", eo);
  const std::vector<std::vector<int32_t>> prompts = prompts_of(7, 3, 9, 31);
  const std::vector<Outcome> solo = solo_runs(prompts, 10);
  SchedulerOptions o;
  o.max_seqs = 5;
  o.prefill_chunk = 7;
  o.max_step_tokens = 9;
  Scheduler s(piped, o);
  std::vector<std::future<Outcome>> fs;
  for (size_t i = 0; i < prompts.size(); ++i) fs.push_back(go(s, prompts[i], 10, {}, i == 2 ? 4 : -1));
  for (size_t i = 0; i < fs.size(); ++i) {
    const Outcome got = fs[i].get();
    if (i == 2) {
      EXPECT_EQ(got.reason, FinishReason::Error);
      EXPECT_EQ(got.tokens, std::vector<int32_t>(solo[i].tokens.begin(), solo[i].tokens.begin() + 4));
    } else {
      EXPECT_EQ(got.reason, FinishReason::Length) << "request " << i;
      EXPECT_EQ(got.tokens, solo[i].tokens) << "request " << i;
    }
  }
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.requests_active, 0);
  EXPECT_EQ(st.generated_tokens_total, 6 * 10 + 4);
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) prompt_tokens += static_cast<int64_t>(p.size());
  EXPECT_EQ(st.prefill_tokens, prompt_tokens);
  // Every generated token but each request's last is fed back as a decode row (the failing
  // one fails before its 4th is fed back).
  EXPECT_EQ(st.decode_tokens, 6 * 9 + 3);
  EXPECT_GT(st.prefill_seconds, 0.0);
  EXPECT_GT(st.decode_seconds, 0.0);
}

TEST_F(SchedulerTest, ForcedTokensAndShutdown) {
  Scheduler s(*engine_, SchedulerOptions{});
  auto prom = std::make_shared<std::promise<std::vector<int32_t>>>();
  auto got = std::make_shared<std::vector<int32_t>>();
  GenerationRequest r;
  r.prompt = {1};
  r.max_tokens = 4;
  r.forced_token = [](int64_t step) { return static_cast<int32_t>(100 + step); };
  r.on_token = [got](const SampleResult& x) {
    got->push_back(x.token);
    return true;
  };
  r.on_done = [got, prom](FinishReason, const std::string&) { prom->set_value(*got); };
  s.submit(std::move(r));
  EXPECT_EQ(prom->get_future().get(), (std::vector<int32_t>{100, 101, 102, 103}));
  s.shutdown(true);
  EXPECT_THROW(go(s, {1}, 2), Error);
}

}  // namespace
