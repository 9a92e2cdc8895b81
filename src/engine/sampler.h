// Token sampling on the CPU: repetition penalties, temperature, top-k, min-p, top-p, and a
// per-request seeded generator (no shared state). The filters follow cuda::sample's documented
// contract (ops_cuda.h), so the scheduler can sample a request without penalties or logprobs
// on the device (Ops::sample) with the same uniform numbers and get the same tokens.
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
  // Fill SampleResult::logprob (a log-softmax over the whole row: on the host, a pass of exp
  // over the vocabulary that requests without logprobs need not pay).
  bool logprob = true;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;      // log-softmax of the raw logits (before penalties/temperature)
};

// logprob and top come from the host sampler only: a token sampled on the device (the
// scheduler does that only for requests that did not ask for logprobs) has logprob 0, top empty.
struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;           // (0 unless SamplingParams::logprob)
  std::vector<TokenLogprob> top;  // the top_logprobs most likely tokens
};

// The token the filters and a uniform draw u in [0, 1) pick from logits [vocab] (cuda::sample's
// semantics: temperature <= 0 or top_k == 1 greedy, ties to the lower id; else on
// z = logits / temperature by (z desc, id asc) top_k, then p >= min_p * p_max, then the shortest
// prefix of the survivors whose mass reaches top_p, then the first whose cumulative mass exceeds
// u * total). idx is scratch.
int32_t pick_token(const float* logits, int64_t vocab, const SamplingParams& p, float u, std::vector<int32_t>& idx);
// pick_token's candidates when it draws (draws_uniform): returns m, the survivors of the
// filters idx[0..m) in draw order, their masses ev[i] = p_i / p_0 and total = their sum.
int64_t sampling_candidates(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<int32_t>& idx,
                            std::vector<float>& ev, double& total);
// Whether these parameters draw a uniform number per token (temperature > 0 and top_k != 1).
inline bool draws_uniform(const SamplingParams& p) { return p.temperature > 0.0f && p.top_k != 1; }

// One per sequence: owns the generator and the counts the penalties need.
class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  // The next token: penalties on the logits, then pick_token with next_uniform().
  SampleResult sample(const float* logits, int64_t vocab) { return sample(logits, vocab, next_uniform()); }
  // The same with u already drawn by next_uniform() (a device sampling request that fell back).
  SampleResult sample(const float* logits, int64_t vocab, float u);
  // The uniform number of the next token, from this request's generator: one draw per token
  // when the sampling is random (draws_uniform), else 0 without a draw. Both the host path and
  // the device path (Ops::sample) take it from here, so the seed decides the same tokens.
  float next_uniform() { return draws_uniform(p_) ? static_cast<float>(rng_() >> 40) * 0x1p-24f : 0.0f; }
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
