// Helpers for the scheduler tests: submit a request and collect its tokens and finish reason.
#pragma once
#include <future>
#include <memory>
#include <vector>

#include "engine/scheduler.h"

namespace hs::test {

struct Outcome {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::Error;
};

// Submits `prompt` with these sampling parameters; the future resolves when it finishes.
inline std::future<Outcome> generate(Scheduler& s, std::vector<int32_t> prompt, int max_tokens,
                                     const SamplingParams& sampling, std::vector<int32_t> stops = {},
                                     int64_t fail_after = -1, std::shared_ptr<TokenConstraint> constraint = nullptr) {
  auto prom = std::make_shared<std::promise<Outcome>>();
  auto out = std::make_shared<Outcome>();
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling = sampling;
  r.stop_tokens = std::move(stops);
  r.test_fail_after = fail_after;
  r.constraint = std::move(constraint);
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

}  // namespace hs::test
