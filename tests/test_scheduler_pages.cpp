// The scheduler's admission by state pages and preemption (engine/scheduler.h) on the CPU
// engine (tiny fixture): with a pool too small for every request at once, requests wait for
// pages or are preempted mid-decode and recompute, and every one finishes with the tokens it
// gets in an unconstrained engine; a request the pool can never hold is refused with the
// numbers; the page counts go back to zero.
#include <gtest/gtest.h>

#include <future>

#include "engine/scheduler.h"
#include "scheduler_util.h"
#include "util/error.h"

using namespace hs;

namespace {

const std::string kTiny = std::string(HS_TEST_DATA) + "/tiny";

EngineOptions opts(int max_seqs, int64_t pages) {
  EngineOptions o;
  o.threads = 2;
  o.max_seqs = max_seqs;
  if (pages > 0) {  // room for the slots, their SWA pages, and this many compressed pages
    EngineOptions probe = o;
    Engine e(kTiny, probe);
    const StateLayout& L = e.state_layout(0);
    o.state_memory = max_seqs * L.slot_bytes + L.swa_blocks * L.swa_page_bytes + pages * L.cmp_page_bytes;
  }
  return o;
}

std::vector<std::vector<int32_t>> prompts(int n, int len) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < len + 3 * i; ++j) p.push_back((17 * i + 5 * j + 1) % 320);
    out.push_back(p);
  }
  return out;
}

}  // namespace

// Four requests of 20-29 prompt tokens and 40 generated (8-9 pages of 8 positions each) share
// 20 pages: some wait, some are preempted mid-decode. Greedy and seeded sampling both give the
// unconstrained engine's tokens (a preempted request's sampler goes on where it was).
TEST(SchedulerPages, PreemptedRequestsFinishWithTheirUnconstrainedTokens) {
  Engine big(kTiny, opts(4, 0)), small(kTiny, opts(4, 20));
  ASSERT_EQ(small.state_stats().pages_total, 20);
  const auto ps = prompts(4, 20);
  std::vector<SamplingParams> sampling(4);
  sampling[0].temperature = 0;
  sampling[1].temperature = 0;
  sampling[2].seed = 7;
  sampling[3].seed = 8;
  sampling[3].temperature = 0.7f;
  SchedulerOptions so;
  so.max_seqs = 4;
  so.prefill_chunk = 8;
  SchedulerStats st_big, st_small;
  const auto want = test::run_all(big, so, ps, 40, sampling, &st_big);
  const auto got = test::run_all(small, so, ps, 40, sampling, &st_small);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(got[i].reason, FinishReason::Length) << "request " << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i;
  }
  std::printf("[scheduler-pages] 4 requests of 8-9 pages in a pool of 20: %lld preemptions\n",
              static_cast<long long>(st_small.preemptions));
  EXPECT_EQ(st_big.preemptions, 0);
  EXPECT_GT(st_small.preemptions, 0);
  EXPECT_EQ(st_small.pages.pages_used, 0);      // every page went back
  EXPECT_EQ(st_small.pages.swa_pages_used, 0);
}

// A request longer than the whole pool is refused at submit with the numbers; one that fits
// runs.
TEST(SchedulerPages, ARequestThePoolCannotHoldIsRefused) {
  Engine small(kTiny, opts(2, 6));
  SchedulerOptions so;
  so.max_seqs = 2;
  Scheduler s(small, so);
  try {
    test::generate(s, std::vector<int32_t>(30, 5), 30, SamplingParams{});
    ADD_FAILURE() << "accepted a request of 60 tokens into a pool of 48";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("60 tokens need 8 state pages of 8 positions, and the state pool holds 6"),
              std::string::npos)
        << e.what();
  }
  SamplingParams greedy;
  greedy.temperature = 0;
  const test::Outcome ok = test::generate(s, std::vector<int32_t>(20, 5), 20, greedy).get();
  EXPECT_EQ(ok.tokens.size(), 20u);
}
