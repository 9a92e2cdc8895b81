// Greedy generation through a layer split under --numerics model: 256 generated tokens must be
// the same tokens the unsplit model generates (issue: layer split; the boundary carries the
// full HC state, so a split changes nothing). On the CPU (CI) cpu,cpu and cpu,cpu,cpu; on GPUs
// cuda:0,cuda:0 and, with two GPUs, cuda:0,cuda:1 and cuda:0 -> cuda:1 -> cuda:0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "fixture_util.h"

using namespace hs;

namespace {

// The fixture's prompt, then `n` tokens by argmax of the last position's logits.
std::vector<int32_t> greedy(Engine& eng, const std::vector<int32_t>& prompt, int n) {
  auto seq = eng.new_sequence();
  std::vector<float> logits(static_cast<size_t>(eng.config().vocab_size));
  eng.step(*seq, prompt.data(), static_cast<int64_t>(prompt.size()), logits.data(), false);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(t);
    eng.step(*seq, &t, 1, logits.data(), false);
  }
  return out;
}

EngineOptions model_on(std::vector<std::string> devices) {
  EngineOptions o;
  o.numerics = Numerics::Model;
  o.devices = std::move(devices);
  return o;
}

void expect_same_generation(const std::vector<std::string>& single, const std::vector<std::vector<std::string>>& splits) {
  const std::string dir = std::string(HS_TEST_DATA) + "/small-bf16";
  const test::Expected e = test::load_expected(dir);
  const int n = 256;
  Engine one(dir, model_on(single));
  const std::vector<int32_t> want = greedy(one, e.tokens, n);
  // A generation that collapses into one repeated token would prove little.
  std::vector<int32_t> distinct = want;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  EXPECT_GE(distinct.size(), 8u) << "the reference generation is degenerate";
  for (const auto& devs : splits) {
    Engine sh(dir, model_on(devs));
    const std::vector<int32_t> got = greedy(sh, e.tokens, n);
    std::string name;
    for (const auto& d : devs) name += (name.empty() ? "" : ",") + d;
    size_t first_diff = 0;
    while (first_diff < want.size() && got[first_diff] == want[first_diff]) ++first_diff;
    std::printf("[split-generate] %-22s %d greedy tokens, first difference at %zu (%zu distinct tokens)\n",
                name.c_str(), n, first_diff, distinct.size());
    EXPECT_EQ(got, want) << name;
  }
}

TEST(SplitGenerate, CpuModelNumericsSameTokens) {
  expect_same_generation({"cpu"}, {{"cpu", "cpu"}, {"cpu", "cpu", "cpu"}});
}

TEST(SplitGenerate, GpuModelNumericsSameTokens) {
  const int gpus = gpu_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device";
  std::vector<std::vector<std::string>> splits = {{"cuda:0", "cuda:0"}};
  if (gpus >= 2) {
    splits.push_back({"cuda:0", "cuda:1"});
    splits.push_back({"cuda:0", "cuda:1", "cuda:0"});
  }
  expect_same_generation({"cuda:0"}, splits);
  if (gpus < 2) GTEST_SKIP() << "one GPU: the cuda:0,cuda:1 splits were not run";
}

}  // namespace
