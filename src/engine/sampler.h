// Token sampling on the CPU (the CUDA backend adds a device twin): repetition penalties,
// temperature, top-k, top-p, min-p, and a per-request seeded generator (no shared state).
#pragma once
#include <cstdint>
#include <random>
#include <unordered_map>
#include <vector>

namespace hs {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  int top_logprobs = 0;      // how many alternatives to report (0..20)
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;      // log-softmax of the raw logits (before penalties/temperature)
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;  // the top_logprobs most likely tokens
};

// One per sequence: owns the generator and the counts the penalties need.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  SampleResult sample(const float* logits, int64_t vocab);
  void accept(int32_t token) { ++counts_[token]; }  // a generated token (feeds the penalties)
  const SamplingParams& params() const { return p_; }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> counts_;
  std::vector<float> work_;
  std::vector<int32_t> idx_;
};

}  // namespace hs
