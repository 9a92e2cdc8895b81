// Helpers for the scheduler tests: submit a request and collect its tokens and finish reason.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <map>
#include <utility>
#include <memory>
#include <vector>

#include "engine/scheduler.h"

namespace hs::test {

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::Error;
};

// Submits r (its on_token / on_done replaced); the future resolves when it finishes.
inline std::future<Outcome> submit_request(Scheduler& s, GenerationRequest r) {
  auto prom = std::make_shared<std::promise<Outcome>>();
  auto out = std::make_shared<Outcome>();
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

// Submits `prompt` with these sampling parameters; the future resolves when it finishes.
inline std::future<Outcome> generate(Scheduler& s, std::vector<int32_t> prompt, int max_tokens,
                                     const SamplingParams& sampling, std::vector<int32_t> stops = {},
                                     int64_t fail_after = -1, std::shared_ptr<TokenConstraint> constraint = nullptr) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.stop_tokens = std::move(stops);
  r.test_fail_after = fail_after;
  r.constraint = std::move(constraint);
  return submit_request(s, std::move(r));
}

// Submits every prompt (with the sampling parameters of the same index) at once and waits for all.
inline std::vector<Outcome> generate_all(Scheduler& s, const std::vector<std::vector<int32_t>>& prompts,
                                         int max_tokens, const std::vector<SamplingParams>& sampling) {
  std::vector<std::future<Outcome>> fs;
  for (size_t i = 0; i < prompts.size(); ++i) fs.push_back(generate(s, prompts[i], max_tokens, sampling.at(i)));
  std::vector<Outcome> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

// generate_all through a new scheduler with these options; its stats at the end into *stats.
inline std::vector<Outcome> run_all(Engine& engine, const SchedulerOptions& opts,
                                    const std::vector<std::vector<int32_t>>& prompts, int max_tokens,
                                    const std::vector<SamplingParams>& sampling, SchedulerStats* stats = nullptr) {
  Scheduler s(engine, opts);
  std::vector<Outcome> out = generate_all(s, prompts, max_tokens, sampling);
  if (stats) *stats = s.stats();
  return out;
}

// Two seeded samples of one token position agree in distribution (two-sample chi-square over
// the tokens seen, p = 0.001 through Wilson-Hilferty; at least 4 distinct tokens).
inline void expect_same_token_distribution(const std::vector<Outcome>& a, const std::vector<Outcome>& b, size_t at) {
  std::map<int32_t, std::pair<int, int>> counts;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ++counts[a[i].tokens.at(at)].first;
    ++counts[b[i].tokens.at(at)].second;
  }
  double x = 0;
  int df = -1;
  for (const auto& [tok, c] : counts) {
    x += static_cast<double>((c.first - c.second) * (c.first - c.second)) / (c.first + c.second);
    ++df;
  }
  ASSERT_GE(df, 3);
  const double z = 3.09, t = 1 - 2.0 / (9 * df) + z * std::sqrt(2.0 / (9 * df));
  EXPECT_LT(x, df * t * t * t) << "token " << at << " histograms differ (" << counts.size() << " tokens)";
}

}  // namespace hs::test
