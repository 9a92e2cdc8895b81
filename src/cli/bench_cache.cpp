// `bench --cache-turn N[,K]`: the prefix cache on a conversation's next turn. One sequence
// prefills N tokens (the conversation so far) and then K more (the next turn): that is the
// cold time to first token. A snapshot at N then serves a new sequence, which restores it and
// prefills only the K: from the pools, from host memory and, after a restart, from disk.
#include "cli/bench_cache.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include "cli/bench_timing.h"
#include "engine/prefix_cache.h"
#include "util/error.h"

namespace hs::cli {

nlohmann::ordered_json bench_cache_turn(Engine& eng, int64_t n, int64_t k, int64_t chunk, const std::string& dir) {
  HS_CHECK(n >= 1 && k >= 1 && chunk >= 1, "--cache-turn: N and K must be positive");
  const int64_t V = eng.config().vocab_size;
  std::mt19937_64 rng(31);
  std::vector<int32_t> t(static_cast<size_t>(n + k));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  std::vector<float> logits(static_cast<size_t>(V));
  auto prefill = [&](Sequence& s, int64_t from, int64_t to) {
    for (int64_t p = from; p < to; p += chunk)
      eng.step(s, t.data() + p, std::min(chunk, to - p), logits.data(), false);  // (waits: logits come back)
  };
  std::fprintf(stderr, "  cache-turn: cold prefill of %lld + %lld tokens...\n", static_cast<long long>(n),
               static_cast<long long>(k));
  PrefixCache cache(eng, PrefixCacheOptions{});
  auto a = eng.new_sequence();
  auto t0 = BenchClock::now();
  prefill(*a, 0, n);
  const double cold_n = seconds_since(t0);
  cache.insert(t, *a);
  t0 = BenchClock::now();
  prefill(*a, n, n + k);
  const double cold = cold_n + seconds_since(t0);
  a.reset();
  // A hit: restore, then the K new tokens.
  auto hit = [&](PrefixCache& c) {
    auto s = eng.new_sequence();
    const auto t1 = BenchClock::now();
    HS_CHECK(c.restore(t, n + k - 1, *s) == n, "internal: the bench's snapshot was not found");
    const double restore = seconds_since(t1);
    prefill(*s, n, n + k);
    return std::pair<double, double>{restore, seconds_since(t1)};
  };
  const auto [dev_restore, dev_ttft] = hit(cache);
  cache.make_room(eng.state_stats().pages_total + 1);  // every entry to host memory
  const auto [host_restore, host_ttft] = hit(cache);
  const PrefixCacheStats st = cache.stats();
  nlohmann::ordered_json j = {{"tokens", n},
                              {"new_tokens", k},
                              {"cold_ttft_s", cold},
                              {"device_restore_s", dev_restore},
                              {"device_ttft_s", dev_ttft},
                              {"host_restore_s", host_restore},
                              {"host_ttft_s", host_ttft},
                              {"speedup_device", cold / dev_ttft},
                              {"speedup_host", cold / host_ttft},
                              {"host_bytes_per_1k_tokens", static_cast<double>(st.host_bytes) * 1000.0 / n},
                              {"page_bytes_per_1k_tokens", static_cast<double>(cache.page_bytes()) * 1000.0 /
                                                               eng.state_layout(0).page}};
  std::printf("prefix cache, next turn of a %lld-token conversation (+%lld tokens): cold %.3f s; cached in the pools "
              "%.4f s (restore %.4f s, %.0fx), in host memory %.4f s (restore %.4f s, %.0fx); %.0f bytes of pages and "
              "%.0f of host memory per 1K tokens\n",
              static_cast<long long>(n), static_cast<long long>(k), cold, dev_ttft, dev_restore, cold / dev_ttft,
              host_ttft, host_restore, cold / host_ttft, j["page_bytes_per_1k_tokens"].get<double>(),
              j["host_bytes_per_1k_tokens"].get<double>());
  if (!dir.empty()) {
    {  // written through to disk...
      PrefixCacheOptions po;
      po.dir = dir;
      PrefixCache writer(eng, po);
      auto s = eng.new_sequence();
      HS_CHECK(cache.restore(t, n, *s) == n, "internal: the bench's snapshot was not found");
      writer.insert(t, *s);
    }
    // ...and found again by a new cache (a restarted server).
    PrefixCacheOptions po;
    po.dir = dir;
    const auto t1 = BenchClock::now();
    PrefixCache reader(eng, po);
    const double scan = seconds_since(t1);
    const auto [disk_restore, disk_ttft] = hit(reader);
    const PrefixCacheStats ds = reader.stats();
    j["disk_scan_s"] = scan;
    j["disk_restore_s"] = disk_restore;
    j["disk_ttft_s"] = disk_ttft;
    j["disk_bytes_per_1k_tokens"] = static_cast<double>(ds.disk_bytes) * 1000.0 / n;
    std::printf("  from disk after a restart: scan %.3f s, restore %.3f s, time to first token %.3f s (%.0fx); %.0f "
                "bytes on disk per 1K tokens\n",
                scan, disk_restore, disk_ttft, cold / disk_ttft, j["disk_bytes_per_1k_tokens"].get<double>());
  }
  return j;
}

}  // namespace hs::cli
