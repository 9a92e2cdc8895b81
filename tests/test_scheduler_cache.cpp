// The scheduler with the prefix cache (CPU, tiny fixture): 16 conversations of 4 turns each over
// two shared system prompts run at once, with answers cut short by their clients, through a
// cache small enough to demote and drop entries and a pool small enough to preempt; every
// answer equals the same conversation run alone without a cache, and later turns restore their
// earlier turns (cached prompt tokens reported per request).
#include <gtest/gtest.h>

#include <condition_variable>
#include <future>
#include <mutex>
#include <random>

#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "util/error.h"

using namespace hs;

namespace {

const std::string kTiny = std::string(HS_TEST_DATA) + "/tiny";

struct Turn {
  std::vector<int32_t> tokens;  // generated
  int64_t cached = 0;
};

// One request; `stop_after` > 0: the client stops reading after that many tokens.
std::future<Turn> ask(Scheduler& s, std::vector<int32_t> prompt, std::vector<int64_t> points, int stop_after) {
  auto prom = std::make_shared<std::promise<Turn>>();
  auto t = std::make_shared<Turn>();
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = 12;
  r.sampling.temperature = 0;
  r.cache_points = std::move(points);
  r.on_start = [t](int64_t cached) { t->cached = cached; };
  r.on_token = [t, stop_after](const SampleResult& x) {
    t->tokens.push_back(x.token);
    return stop_after <= 0 || static_cast<int>(t->tokens.size()) < stop_after;
  };
  r.on_done = [t, prom](FinishReason, const std::string&) { prom->set_value(*t); };
  s.submit(std::move(r));
  return prom->get_future();
}

struct Conversation {
  std::vector<int32_t> system;
  std::vector<std::vector<int32_t>> users;  // one per turn
};

// The prompt of turn k: the system prompt, then per earlier turn its user part and its answer,
// then this turn's user part; the turn boundaries are the snapshot points.
std::vector<int32_t> prompt_of(const Conversation& c, const std::vector<std::vector<int32_t>>& answers, size_t k,
                               std::vector<int64_t>& points) {
  std::vector<int32_t> p = c.system;
  points.clear();
  for (size_t i = 0; i <= k; ++i) {
    points.push_back(static_cast<int64_t>(p.size()));
    p.insert(p.end(), c.users[i].begin(), c.users[i].end());
    if (i < k) p.insert(p.end(), answers[i].begin(), answers[i].end());
  }
  return p;
}

int stop_after(size_t conv, size_t turn) { return (conv + turn) % 5 == 0 ? 3 : 0; }

}  // namespace

TEST(SchedulerCache, ConversationsEqualTheirSoloRunsWithoutCache) {
  constexpr int kConvs = 16, kTurns = 4;
  std::mt19937 rng(3);
  auto rnd = [&](int n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<int32_t>(2 + rng() % 300);
    return v;
  };
  const std::vector<int32_t> systems[2] = {rnd(23), rnd(31)};
  std::vector<Conversation> convs;
  for (int i = 0; i < kConvs; ++i) {
    Conversation c{systems[i % 2], {}};
    for (int k = 0; k < kTurns; ++k) c.users.push_back(rnd(5 + (i * 7 + k * 3) % 11));
    convs.push_back(std::move(c));
  }

  // Alone, no cache: each conversation's turns one after another.
  std::vector<std::vector<std::vector<int32_t>>> solo(kConvs);
  {
    EngineOptions o;
    o.threads = 2;
    o.max_seqs = 1;
    Engine eng(kTiny, o);
    SchedulerOptions so;
    so.max_seqs = 1;
    Scheduler s(eng, so);
    for (int i = 0; i < kConvs; ++i)
      for (int k = 0; k < kTurns; ++k) {
        std::vector<int64_t> pts;
        const auto p = prompt_of(convs[static_cast<size_t>(i)], solo[static_cast<size_t>(i)], static_cast<size_t>(k), pts);
        solo[static_cast<size_t>(i)].push_back(ask(s, p, pts, stop_after(static_cast<size_t>(i), static_cast<size_t>(k))).get().tokens);
      }
  }

  // Together, with a cache that is too small to keep everything, in a pool that preempts.
  EngineOptions o;
  o.threads = 2;
  o.max_seqs = 6;
  int64_t memory = 0;
  {
    Engine probe(kTiny, o);
    const StateLayout& L = probe.state_layout(0);
    memory = 6 * L.slot_bytes + L.swa_blocks * L.swa_page_bytes + 48 * L.cmp_page_bytes;
  }
  o.state_memory = memory;
  Engine eng(kTiny, o);
  PrefixCacheOptions po;
  po.max_entries = 24;
  PrefixCache cache(eng, po);
  SchedulerOptions so;
  so.max_seqs = 6;
  so.prefill_chunk = 9;
  so.cache = &cache;
  std::vector<std::vector<std::vector<int32_t>>> got(kConvs);
  int64_t cached_later_turns = 0;
  {
    Scheduler s(eng, so);
    // Every conversation's next turn is submitted as soon as its last answer is back.
    std::vector<std::future<Turn>> pending(kConvs);
    std::vector<int> turn(kConvs, 0);
    auto submit = [&](int i) {
      std::vector<int64_t> pts;
      const auto p = prompt_of(convs[static_cast<size_t>(i)], got[static_cast<size_t>(i)],
                               static_cast<size_t>(turn[static_cast<size_t>(i)]), pts);
      pending[static_cast<size_t>(i)] = ask(s, p, pts, stop_after(static_cast<size_t>(i), static_cast<size_t>(turn[static_cast<size_t>(i)])));
    };
    for (int i = 0; i < kConvs; ++i) submit(i);
    for (int done = 0; done < kConvs * kTurns;) {
      for (int i = 0; i < kConvs; ++i) {
        auto& f = pending[static_cast<size_t>(i)];
        if (!f.valid() || f.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready) continue;
        const Turn t = f.get();
        got[static_cast<size_t>(i)].push_back(t.tokens);
        if (turn[static_cast<size_t>(i)] > 0) cached_later_turns += t.cached;
        ++done;
        if (++turn[static_cast<size_t>(i)] < kTurns) submit(i);
      }
    }
    const SchedulerStats st = s.stats();
    std::printf("[scheduler-cache] 16 conversations x 4 turns: %lld prompt tokens cached of %lld; %lld preemptions\n",
                static_cast<long long>(st.cached_prompt_tokens), static_cast<long long>(st.prompt_tokens_total),
                static_cast<long long>(st.preemptions));
  }
  for (int i = 0; i < kConvs; ++i)
    for (int k = 0; k < kTurns; ++k)
      EXPECT_EQ(got[static_cast<size_t>(i)][static_cast<size_t>(k)], solo[static_cast<size_t>(i)][static_cast<size_t>(k)])
          << "conversation " << i << " turn " << k;
  const PrefixCacheStats cs = cache.stats();
  std::printf("[scheduler-cache] cache: %lld hits of %lld lookups, %lld device / %lld host evictions, %lld entries\n",
              static_cast<long long>(cs.hits), static_cast<long long>(cs.lookups),
              static_cast<long long>(cs.evictions_device), static_cast<long long>(cs.evictions_host),
              static_cast<long long>(cs.entries));
  EXPECT_GT(cached_later_turns, 0);
  EXPECT_GT(cs.evictions_device + cs.evictions_host, 0);
  EXPECT_LE(cs.entries, 24);
}
