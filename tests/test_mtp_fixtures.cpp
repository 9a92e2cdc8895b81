// The MTP drafter against an outside oracle: tests/data/mtp-tiny, made by
// scripts/gen_mtp_fixtures.py (DeepSeek-V4's MTPBlock written in PyTorch after DeepSeek's reference
// inference code, float64, random weights at the tiny fixture's widths). The drafter's logits and
// output HC state of every row must match within 1e-5 (relative to the largest expected magnitude,
// at least 1) under reference numerics on the CPU, fed all at once (a prompt) and row by row (drafting).
// Skips until the fixture exists (HS_MTP_FIXTURE_DIR overrides where it is looked for).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "engine/cpu_ops.h"
#include "fixture_util.h"
#include "engine/mtp.h"
#include "engine/weights.h"
#include "format/safetensors.h"
#include "model/source.h"
#include "util/thread_pool.h"

namespace hs {
namespace {

std::string fixture_dir() {
  const char* env = std::getenv("HS_MTP_FIXTURE_DIR");
  return env ? env : std::string(HS_TEST_DATA) + "/mtp-tiny";
}

TEST(MtpFixtures, DraftLogitsMatchTheReferenceBlock) {
  const std::string dir = fixture_dir();
  if (!std::filesystem::exists(dir + "/expected.safetensors") || !std::filesystem::exists(dir + "/model.safetensors"))
    GTEST_SKIP() << "no MTP fixture at " << dir << " yet: run `python3 scripts/gen_mtp_fixtures.py tests/data` "
                 << "where torch is installed (the GPU machine), then commit tests/data/mtp-tiny";
  const auto src = ModelSource::open(dir);
  const ModelConfig& c = src->config();
  ASSERT_TRUE(src->has_mtp());
  ThreadPool pool(2);
  CpuOps ops(pool);
  Mat embed, head;
  for (const TensorSpec& t : model_tensor_specs(c, 0, 1, true, true)) {
    if (t.name != "token_embd" && t.name != "output") continue;
    Mat& m = t.name == "output" ? head : embed;
    m.rows = t.shape[0];
    m.cols = t.shape[1];
    m.w = src->read_f32(t);
  }
  StatePoolOptions po;
  po.slots = 2;
  po.max_context = 64;
  MtpDrafter d(c, load_mtp_weights(*src), ops, embed, head, Numerics::Reference, mtp_pool_options(c, po));

  const st::File ex(dir + "/expected.safetensors");
  const auto& tk = ex.tensors().at("tokens");
  std::vector<int32_t> tokens(static_cast<size_t>(tk.n_elements()));
  std::memcpy(tokens.data(), tk.data, tk.nbytes);
  const std::vector<float> hidden = test::tensor_values<float>(ex, "hidden"),
                           logits = test::tensor_values<float>(ex, "logits"),
                           out = test::tensor_values<float>(ex, "hidden_out");
  const int64_t T = static_cast<int64_t>(tokens.size()), V = c.vocab_size, per = c.hc_mult * c.dim;
  ASSERT_EQ(static_cast<int64_t>(logits.size()), T * V);
  ASSERT_EQ(static_cast<int64_t>(hidden.size()), T * per);
  constexpr double kTol = 1e-5;
  // Row by row (how drafting feeds it), and every prefix at once (its last row).
  auto seq = d.new_sequence();
  std::vector<float> lg(static_cast<size_t>(V)), h(static_cast<size_t>(per));
  for (int64_t p = 0; p < T; ++p) {
    DraftRows r{seq.get(), tokens.data() + p, hidden.data() + p * per, 1};
    d.forward({&r, 1}, lg.data(), h.data());
    EXPECT_LE(test::max_rel(lg.data(), logits.data() + p * V, static_cast<size_t>(V)), kTol) << "logits, row " << p;
    EXPECT_LE(test::max_rel(h.data(), out.data() + p * per, static_cast<size_t>(per)), kTol) << "HC state, row " << p;
  }
  for (int64_t n : {int64_t{5}, T}) {
    auto s = d.new_sequence();
    DraftRows r{s.get(), tokens.data(), hidden.data(), n};
    d.forward({&r, 1}, lg.data(), h.data());
    EXPECT_LE(test::max_rel(lg.data(), logits.data() + (n - 1) * V, static_cast<size_t>(V)), kTol) << n << " rows at once";
    EXPECT_LE(test::max_rel(h.data(), out.data() + (n - 1) * per, static_cast<size_t>(per)), kTol) << n << " rows at once";
  }
}

}  // namespace
}  // namespace hs
