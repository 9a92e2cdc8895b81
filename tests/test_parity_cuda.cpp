// Whole-model parity of the CUDA backend (cuda:0) with the Hugging Face fixtures in reference
// numerics, on every split of the CPU parity test: relative L2 <= 1e-4 and the same argmax at
// every position. Skipped (reported as such) where there is no GPU or no CUDA build.
#include <gtest/gtest.h>

#include <cstdio>

#include "fixture_util.h"
#include "util/error.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

using namespace hs;

namespace {

bool have_gpu() {
#ifdef HS_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

class CudaParity : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaParity, EverySplitMatchesHF) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::string dir = std::string(HS_TEST_DATA) + "/" + GetParam();
  test::Expected e = test::load_expected(dir);
  EngineOptions o;
  o.device = "cuda:0";
  Engine eng(dir, o);
  EngineOptions co;
  Engine cpu(dir, co);
  for (const auto& sp : test::splits_for(e)) {
    std::vector<float> got = test::run(eng, e, sp.chunks);
    const double rel = test::rel_l2(got.data(), e.logits.data(), got.size());
    const int bad = test::argmax_mismatches(got, e.logits, e.vocab);
    std::vector<float> ref = test::run(cpu, e, sp.chunks);
    std::printf("[cuda-parity] %-14s %-10s rel_l2 vs HF %.3e, vs CPU %.3e, argmax_mismatch %d\n", GetParam().c_str(),
                sp.name.c_str(), rel, test::rel_l2(got.data(), ref.data(), ref.size()), bad);
    EXPECT_LE(rel, 1e-4) << GetParam() << " split " << sp.name;
    EXPECT_EQ(bad, 0) << GetParam() << " split " << sp.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaParity, ::testing::Values("tiny", "tiny-official", "small-bf16", "pro-bf16"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

TEST(CudaDevice, UnknownOrMissingDeviceIsAClearError) {
  EngineOptions o;
  o.device = "cuda:99";
  try {
    Engine eng(std::string(HS_TEST_DATA) + "/tiny", o);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_TRUE(m.find("cuda:99") != std::string::npos) << m;
  }
  o.device = "tpu:0";
  EXPECT_THROW(Engine(std::string(HS_TEST_DATA) + "/tiny", o), Error);
}

}  // namespace
