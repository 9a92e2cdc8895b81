// Sampling on the device (Ops::sample through StepItem::sample, and the scheduler's default)
// against the host Sampler on the same logits: greedy and seeded temperature / top-k / top-p /
// min-p give the same tokens. Skipped without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>

#include "engine/scheduler.h"
#include "engine/token_constraint.h"
#include "fixture_util.h"
#include "model/synthetic.h"
#include "scheduler_util.h"
#include "util/error.h"

using namespace hs;

namespace {

// The tiny fixture (vocabulary 320: the candidates come from cuda::topk), or a synthetic tiny
// model with DeepSeek-V4's vocabulary (129,280: a full sort when top_k is off or above 2048).
std::unique_ptr<Engine> make_engine(bool v4_vocab, std::vector<std::string> devices = {"cuda:0"},
                                    std::vector<int> split = {}) {
  EngineOptions o;
  o.devices = std::move(devices);
  o.layer_split = std::move(split);
  if (!v4_vocab) return std::make_unique<Engine>(std::string(HS_TEST_DATA) + "/tiny", o);
  SyntheticSpec s;
  s.preset = "tiny";
  s.layers = 2;
  s.vocab = 129280;
  return std::make_unique<Engine>(make_synthetic_source(s), o);
}

const char* name_of(bool v4_vocab) { return v4_vocab ? "synthetic tiny, vocab 129280" : "tiny fixture, vocab 320"; }

// The spread of the model's logits: temperatures are set relative to it, so that the kept mass
// sits on a few dozen ids (a float-vs-double sum then never decides a draw).
float logit_sd(Engine& e) {
  auto seq = e.new_sequence();
  const std::vector<int32_t> p = {1, 2, 3};
  std::vector<float> l(static_cast<size_t>(e.config().vocab_size));
  e.step(*seq, p.data(), 3, l.data(), false);
  double s = 0, s2 = 0;
  for (float x : l) {
    s += x;
    s2 += static_cast<double>(x) * x;
  }
  const double m = s / static_cast<double>(l.size());
  return static_cast<float>(std::sqrt(std::max(s2 / static_cast<double>(l.size()) - m * m, 1e-12)));
}

std::vector<SamplingParams> params_for(float sd) {
  auto sp = [&](float t_over_sd, int top_k, float top_p, float min_p) {
    SamplingParams p;
    p.temperature = t_over_sd * sd;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  };
  std::vector<SamplingParams> v = {
      sp(0, 0, 1, 0),            // greedy
      sp(0, 0, 1, 0),            // greedy again (shares the launch)
      sp(0.3f, 40, 0.9f, 0),     // top-k candidates
      sp(0.25f, 0, 0.95f, 0.05f),  // every id
      sp(0.35f, 0, 1, 0),        // temperature alone
      sp(0.3f, 1, 1, 0),         // top_k 1: greedy
      sp(0.3f, 3000, 0.8f, 0.02f),
  };
  for (size_t i = 0; i < v.size(); ++i) v[i].seed = 1000 + i;
  return v;
}

std::vector<int32_t> prompt_of(size_t i, int64_t vocab) {
  std::vector<int32_t> p;
  for (size_t j = 0; j < 2 + i; ++j) p.push_back(static_cast<int32_t>((31 * i + 7 * j + 3) % static_cast<size_t>(vocab)));
  return p;
}

}  // namespace

// One batch with device sampling (items of mixed parameters, one item in the middle wanting its
// logits, the others none) against the same batch on other sequences returning every logits
// row: each device token equals pick_token on its row with the same uniform, step after step.
TEST(DeviceSampling, EngineStepMatchesTheHostSampler) {
  if (gpu_count() < 1) GTEST_SKIP() << "no CUDA device";
  for (bool v4 : {false, true}) {
    SCOPED_TRACE(name_of(v4));
    auto eng = make_engine(v4);
    ASSERT_TRUE(eng->can_sample());
    const int64_t V = eng->config().vocab_size;
    const std::vector<SamplingParams> params = params_for(logit_sd(*eng));
    const size_t n = params.size() + 1, plain = 3;  // item `plain` wants its logits
    std::vector<std::unique_ptr<Sequence>> dev, ref;
    std::vector<Sampler> samplers;
    std::vector<std::vector<int32_t>> next;
    for (size_t i = 0; i < n; ++i) {
      dev.push_back(eng->new_sequence());
      ref.push_back(eng->new_sequence());
      next.push_back(prompt_of(i, V));
      if (i != plain) samplers.emplace_back(params[i < plain ? i : i - 1]);
    }
    std::vector<std::vector<float>> got(n), want(n, std::vector<float>(static_cast<size_t>(V)));
    got[plain].resize(static_cast<size_t>(V));
    std::vector<StepSample> req(n);
    std::vector<int32_t> idx;
    for (int step = 0; step < 6; ++step) {
      std::vector<StepItem> a, b;
      for (size_t i = 0; i < n; ++i) {
        const auto k = static_cast<int64_t>(next[i].size());
        b.push_back(StepItem{ref[i].get(), next[i].data(), k, want[i].data(), false});
        StepItem it{dev[i].get(), next[i].data(), k, i == plain ? got[i].data() : nullptr, false};
        if (i != plain) {
          Sampler& s = samplers[i < plain ? i : i - 1];
          const SamplingParams& p = s.params();
          req[i] = StepSample{{p.temperature, p.top_k, p.top_p, p.min_p, s.next_uniform()}};
          it.sample = &req[i];
        }
        a.push_back(it);
      }
      eng->step_batch(b);
      eng->step_batch(a);
      for (size_t i = 0; i < n; ++i) {
        const float* w = want[i].data();
        if (i == plain) {
          EXPECT_LE(test::rel_l2(got[i].data(), w, got[i].size()), 1e-6) << "step " << step;
          next[i] = {static_cast<int32_t>(std::max_element(w, w + V) - w)};
          continue;
        }
        ASSERT_TRUE(req[i].sampled);
        const SamplingParams& p = samplers[i < plain ? i : i - 1].params();
        // The device sums the kept probabilities in float (a parallel scan), the host in double:
        // where thousands of ids share the mass (temperature alone over 129,280 ids) a draw may
        // land on a neighbour. The contract checked: the device's id is the host's pick for some
        // u' within 2e-5 of u (its CDF interval touches the window), exact where mass is concentrated.
        const float u = req[i].spec.u;
        bool ok = false;
        for (int j = -64; j <= 64 && !ok; ++j)
          ok = pick_token(w, V, p, std::clamp(u + 2e-5f * static_cast<float>(j) / 64.0f, 0.0f, 0.99999994f), idx) ==
               req[i].token;
        EXPECT_TRUE(ok) << "item " << i << " step " << step << " T " << p.temperature << " top_k " << p.top_k
                        << " top_p " << p.top_p << " min_p " << p.min_p << " u " << u << ": device " << req[i].token
                        << ", host " << pick_token(w, V, p, u, idx);
        if (!v4) {
          EXPECT_EQ(req[i].token, pick_token(w, V, p, u, idx)) << "item " << i << " step " << step;
        }
        next[i] = {req[i].token};
      }
    }
  }
}

// The scheduler with device sampling on and off, one request at a time (so every step's logits
// are the same in both runs): the same tokens, greedy and seeded. Penalties and logprobs keep
// a request on the host; so does a split whose last shard is on the CPU.
TEST(DeviceSampling, SchedulerOnAndOffGiveTheSameTokens) {
  if (gpu_count() < 1) GTEST_SKIP() << "no CUDA device";
  struct Case {
    bool v4;
    std::vector<std::string> devices;
    std::vector<int> split;
  };
  for (const Case& c : {Case{false, {"cuda:0"}, {}}, Case{true, {"cuda:0"}, {}}, Case{false, {"cuda:0", "cpu"}, {3, 3}}}) {
    const bool device_last = c.devices.back() != "cpu";
    SCOPED_TRACE(std::string(name_of(c.v4)) + (device_last ? "" : ", last shard on the cpu"));
    auto eng = make_engine(c.v4, c.devices, c.split);
    EXPECT_EQ(eng->can_sample(), device_last);
    const int64_t V = eng->config().vocab_size;
    // Over 129,280 ids the temperatures are a third as high, so the kept mass sits on a few
    // dozen ids there too and a float-vs-double CDF never decides a draw (see above).
    std::vector<SamplingParams> params = params_for(logit_sd(*eng) * (c.v4 ? 0.3f : 1.0f));
    const int64_t eligible = static_cast<int64_t>(params.size());
    SamplingParams pen = params[2], lp = params[3];
    pen.presence_penalty = 0.3f;
    lp.top_logprobs = 2;
    params.push_back(pen);
    params.push_back(lp);
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < params.size(); ++i) prompts.push_back(prompt_of(i, V));
    const int max_tokens = 12;
    auto run = [&](bool device, int max_seqs) {
      SchedulerStats st;
      const auto out = test::run_all(*eng, {.max_seqs = max_seqs, .prefill_chunk = 5, .device_sampling = device},
                                     prompts, max_tokens, params, &st);
      EXPECT_EQ(st.generated_tokens_total, static_cast<int64_t>(params.size()) * max_tokens);
      EXPECT_EQ(st.device_sampled_tokens, device && device_last ? eligible * max_tokens : 0);
      return out;
    };
    const std::vector<test::Outcome> on = run(true, 1), off = run(false, 1);
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_EQ(on[i].reason, FinishReason::Length) << "request " << i;
      EXPECT_EQ(on[i].tokens, off[i].tokens) << "request " << i << " T " << params[i].temperature;
    }
    // Batched (rows of several requests in one Ops::sample): greedy still equals the solo run
    // (a batch changes the logits by rounding only).
    const std::vector<test::Outcome> batched = run(true, static_cast<int>(params.size()));
    for (size_t i : {size_t{0}, size_t{1}, size_t{5}}) EXPECT_EQ(batched[i].tokens, off[i].tokens) << "greedy request " << i;
  }
}

namespace {
// Allows, at step k, only the tokens {10 + 3k, 11 + 3k, 12 + 3k}; finished after `len`.
class WindowConstraint : public TokenConstraint {
 public:
  explicit WindowConstraint(int len) : len_(len) {}
  void mask(float* logits, int64_t vocab) override {
    for (int64_t i = 0; i < vocab; ++i)
      if (i < 10 + 3 * step_ || i > 12 + 3 * step_) logits[i] = -INFINITY;
  }
  void allowed(std::vector<uint64_t>& bits, int64_t vocab) override {
    bits.assign(static_cast<size_t>((vocab + 63) / 64), 0);
    for (int64_t i = 10 + 3 * step_; i <= 12 + 3 * step_; ++i) bits[static_cast<size_t>(i / 64)] |= uint64_t{1} << (i % 64);
  }
  void accept(int32_t token) override {
    HS_CHECK(token >= 10 + 3 * step_ && token <= 12 + 3 * step_, "token ", token, " not allowed at ", step_);
    ++step_;
  }
  bool finished() const override { return step_ >= len_; }

 private:
  int len_, step_ = 0;
};
}  // namespace

// A constrained request is sampled on the device under its mask (cuda::mask_tokens), giving the
// tokens the host path gives it (greedy and seeded), and is counted as device-sampled.
TEST(DeviceSampling, ConstrainedRequestsSampleUnderTheirMaskOnTheDevice) {
  if (gpu_count() < 1) GTEST_SKIP() << "no CUDA device";
  auto eng = make_engine(false);
  for (const float t : {0.0f, 1.0f}) {
    std::vector<int32_t> got[2];
    int64_t device_tokens[2] = {0, 0};
    for (const bool device : {true, false}) {
      Scheduler s(*eng, {.max_seqs = 1, .device_sampling = device});
      SamplingParams p;
      p.temperature = t;
      p.seed = 9;
      const test::Outcome o = test::generate(s, {1, 2, 3}, 40, p, {}, -1, std::make_shared<WindowConstraint>(20)).get();
      EXPECT_EQ(o.reason, FinishReason::Stop);
      got[device ? 0 : 1] = o.tokens;
      device_tokens[device ? 0 : 1] = s.stats().device_sampled_tokens;
    }
    EXPECT_EQ(got[0], got[1]) << "temperature " << t;
    ASSERT_EQ(got[0].size(), 20u);
    for (int k = 0; k < 20; ++k) EXPECT_TRUE(got[0][k] >= 10 + 3 * k && got[0][k] <= 12 + 3 * k) << k;
    EXPECT_EQ(device_tokens[0], 20);
    EXPECT_EQ(device_tokens[1], 0);
  }
}
