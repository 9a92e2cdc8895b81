// Sampler and continuous-batching scheduler on the CPU engine (tiny fixture model).
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <map>

#include "engine/scheduler.h"
#include "scheduler_util.h"
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

// The filters in cuda::sample's documented order (ops_cuda.h): min-p before top-p, and top-p on
// the survivors' mass. p = (0.3, 0.1, 0.4, 0.2): min_p 0.6 keeps p >= 0.24 (ids 2, 0; mass
// 0.7), and top_p 0.5 of that is reached by id 2 alone (top-p first would keep both: 0.4 < 0.5).
TEST(Sampler, MinPBeforeTopPOnTheSurvivors) {
  auto l = logits_of({std::log(0.3f), std::log(0.1f), std::log(0.4f), std::log(0.2f)});
  SamplingParams p;
  p.seed = 7;
  p.min_p = 0.6f;
  p.top_p = 0.5f;
  Sampler s(p);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.sample(l.data(), 4).token, 2);
  p.top_p = 1.0f;  // min-p alone: ids 2 and 0, 4 : 3
  Sampler both(p);
  std::map<int, int> hist;
  for (int i = 0; i < 2000; ++i) hist[both.sample(l.data(), 4).token]++;
  EXPECT_EQ(hist[1] + hist[3], 0);
  EXPECT_NEAR(hist[2] / 2000.0, 4.0 / 7.0, 0.04);
}

// One uniform number per random token from the request's generator, the same whichever path
// samples: sample() equals next_uniform() then sample(u) (a device request that fell back) and
// pick_token (the host twin of cuda::sample); greedy and top_k == 1 draw none.
TEST(Sampler, OneUniformPerRandomToken) {
  std::vector<float> l(64);
  for (size_t i = 0; i < l.size(); ++i) l[i] = 3.0f * std::sin(0.7f * static_cast<float>(i));
  SamplingParams p;
  p.seed = 11;
  p.temperature = 0.8f;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  Sampler a(p), b(p);
  std::vector<int32_t> idx;
  std::map<int32_t, int> seen;
  for (int i = 0; i < 300; ++i) {
    const float u = b.next_uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    const int32_t t = a.sample(l.data(), 64).token;
    EXPECT_EQ(b.sample(l.data(), 64, u).token, t);
    EXPECT_EQ(pick_token(l.data(), 64, p, u, idx), t);
    seen[t]++;
  }
  EXPECT_GT(seen.size(), 1u);  // (really random)
  SamplingParams g = p;
  g.temperature = 0;
  EXPECT_FALSE(draws_uniform(g));
  g = p;
  g.top_k = 1;
  EXPECT_FALSE(draws_uniform(g));
  EXPECT_EQ(Sampler(g).next_uniform(), 0.0f);
  EXPECT_TRUE(draws_uniform(p));
}

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override { engine_ = std::make_unique<Engine>(std::string(HS_TEST_DATA) + "/tiny", EngineOptions{}); }

  using Outcome = test::Outcome;

  // Submits a greedy request; the future resolves when it finishes.
  std::future<Outcome> go(Scheduler& s, std::vector<int32_t> prompt, int max_tokens, std::vector<int32_t> stops = {},
                          int64_t fail_after = -1) {
    SamplingParams greedy;
    greedy.temperature = 0;
    return test::generate(s, std::move(prompt), max_tokens, greedy, std::move(stops), fail_after);
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

// StepItem::sample on a backend without a sampler (the CPU): sampled = false and the logits
// are written as without the request. Requests the engine cannot serve are refused up front
// (nothing advances): no logits buffer to fall back to, all_positions, bad parameters.
TEST_F(SchedulerTest, DeviceSamplingFallsBackOnTheCpu) {
  ASSERT_FALSE(engine_->can_sample());
  const size_t V = static_cast<size_t>(engine_->config().vocab_size);
  const std::vector<int32_t> prompt = {1, 2, 3, 4};
  auto a = engine_->new_sequence(), b = engine_->new_sequence();
  std::vector<float> la(V), lb(V);
  engine_->step(*a, prompt.data(), 4, la.data(), false);
  StepSample req{{0.7f, 0, 0.9f, 0.0f, 0.5f}, true, 123};
  const StepItem item{b.get(), prompt.data(), 4, lb.data(), false, &req};
  engine_->step_batch({&item, 1});
  EXPECT_FALSE(req.sampled);
  EXPECT_EQ(la, lb);
  StepItem bad = item;
  bad.logits = nullptr;
  EXPECT_THROW(engine_->step_batch({&bad, 1}), Error);
  bad = item;
  bad.all_positions = true;
  EXPECT_THROW(engine_->step_batch({&bad, 1}), Error);
  StepSample wrong = req;
  wrong.spec.top_p = 0.0f;
  bad = item;
  bad.sample = &wrong;
  EXPECT_THROW(engine_->step_batch({&bad, 1}), Error);
  EXPECT_EQ(b->n_past(), 4);
}

// Seeded sampling through the scheduler: batched with device sampling asked for (the default;
// the CPU engine falls back to the host for every token) equals each request alone with it
// off, token for token: the request's own generator decides, one draw per token either way.
TEST_F(SchedulerTest, SeededSamplingFallsBackToTheSameTokens) {
  const std::vector<std::vector<int32_t>> prompts = prompts_of(5, 3, 5, 17);
  std::vector<SamplingParams> params(prompts.size());
  params[0].temperature = 0.8f;
  params[1].top_k = 20;
  params[1].top_p = 0.9f;
  params[1].temperature = 1.2f;
  params[2].min_p = 0.05f;
  params[2].top_p = 0.95f;
  params[3].temperature = 0;
  params[4].presence_penalty = 0.5f;  // (always on the host)
  for (size_t i = 0; i < params.size(); ++i) params[i].seed = 100 + i;
  auto run = [&](bool device, int max_seqs) {
    SchedulerStats st;
    const auto out = test::run_all(*engine_, {.max_seqs = max_seqs, .prefill_chunk = 4, .device_sampling = device},
                                   prompts, 10, params, &st);
    EXPECT_EQ(st.device_sampled_tokens, 0);
    EXPECT_EQ(st.generated_tokens_total, 50);
    return out;
  };
  const std::vector<test::Outcome> on = run(true, 3), off = run(false, 1);
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i;
    EXPECT_EQ(on[i].tokens.size(), 10u) << "request " << i;
  }
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

// A constraint that allows, at step k, only the tokens {10 + 2k, 11 + 2k}, and is finished
// after `len` tokens; it records what it was told.
class StepConstraint : public TokenConstraint {
 public:
  explicit StepConstraint(int len) : len_(len) {}
  void mask(float* logits, int64_t vocab) override {
    ++masks;
    for (int64_t i = 0; i < vocab; ++i)
      if (i != 10 + 2 * step_ && i != 11 + 2 * step_) logits[i] = -INFINITY;
  }
  void allowed(std::vector<uint64_t>& bits, int64_t vocab) override {
    bits.assign(static_cast<size_t>((vocab + 63) / 64), 0);
    for (const int64_t i : {10 + 2 * step_, 11 + 2 * step_}) bits[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
  }
  void accept(int32_t token) override {
    HS_CHECK(token == 10 + 2 * step_ || token == 11 + 2 * step_, "token ", token, " not allowed");
    ++step_;
  }
  bool finished() const override { return step_ >= len_; }
  int masks = 0;

 private:
  int len_, step_ = 0;
};

TEST_F(SchedulerTest, ConstrainedRequestsSampleUnderTheMaskAndEndWhenComplete) {
  Scheduler s(*engine_, SchedulerOptions{});
  for (float temperature : {0.0f, 1.0f}) {
    auto c = std::make_shared<StepConstraint>(5);
    SamplingParams p;
    p.temperature = temperature;
    p.seed = 5;
    const test::Outcome got = test::generate(s, {1, 2, 3}, 50, p, {}, -1, c).get();
    EXPECT_EQ(got.reason, FinishReason::Stop);  // complete: no EOS, no max_tokens
    ASSERT_EQ(got.tokens.size(), 5u);
    for (int k = 0; k < 5; ++k) EXPECT_TRUE(got.tokens[k] == 10 + 2 * k || got.tokens[k] == 11 + 2 * k) << k;
    EXPECT_EQ(c->masks, 5);
  }
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.constrained_tokens, 10);
  EXPECT_EQ(st.device_sampled_tokens, 0);
  // A forced token the constraint refuses fails the request.
  auto prom = std::make_shared<std::promise<std::pair<FinishReason, std::string>>>();
  GenerationRequest r;
  r.prompt = {1};
  r.max_tokens = 4;
  r.constraint = std::make_shared<StepConstraint>(3);
  r.forced_token = [](int64_t) { return int32_t{99}; };
  r.on_done = [prom](FinishReason f, const std::string& e) { prom->set_value({f, e}); };
  s.submit(std::move(r));
  const auto [reason, error] = prom->get_future().get();
  EXPECT_EQ(reason, FinishReason::Error);
  EXPECT_NE(error.find("token 99 not allowed"), std::string::npos);
}

}  // namespace
