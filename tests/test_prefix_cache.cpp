// The prefix cache (engine/prefix_cache.h) on the CPU and on a GPU: a request that restores a cached prefix
// gets the logits of a cold run bit for bit, for prefixes inside the first page, at a page
// boundary, one past it, inside a compressor window and over many pages, from each tier (the
// pools, host memory, disk), after eviction and reload and across a restart; bad files are
// refused with a message and the request still answers correctly.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "engine/prefix_cache.h"
#include "engine/prefix_store.h"
#include "fixture_util.h"
#include "util/error.h"

using namespace hs;
using test::FixtureCase;
using test::fixture_dir;
using test::random_tokens;
namespace fs = std::filesystem;

namespace {

EngineOptions opts(Numerics num, int max_seqs = 4, const char* device = "cpu") {
  EngineOptions o;
  o.numerics = num;
  if (std::string(device) != "cpu") o.devices = {device};
  o.threads = 2;
  o.max_seqs = max_seqs;
  return o;
}

// Feeds tokens[from, to) to seq in chunks of 1-7 (seeded), returning the logits of every position.
std::vector<float> feed(Engine& eng, Sequence& seq, const std::vector<int32_t>& tokens, int64_t from, int64_t to,
                        uint32_t seed) {
  const int64_t V = eng.config().vocab_size;
  std::vector<float> out(static_cast<size_t>((to - from) * V));
  std::mt19937 rng(seed);
  for (int64_t p = from; p < to;) {
    const int64_t n = std::min<int64_t>(to - p, 1 + rng() % 7);
    eng.step(seq, tokens.data() + p, n, out.data() + (p - from) * V);
    p += n;
  }
  return out;
}

// A scratch directory removed at the end.
struct TempDir {
  std::string path;
  TempDir() {
    path = (fs::temp_directory_path() / ("hs-prefix-" + std::to_string(std::random_device{}()))).string();
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};


// On the CPU a run's logits do not depend on its chunks, so the cold run is chunked its own way;
// on a GPU (GEMM and matvec paths round differently) it takes the same chunks as the cached
// prefix and the continuation, so that every difference left is the restored state's.
std::vector<float> cold_run(Engine& eng, const FixtureCase& c, const std::vector<int32_t>& tokens, int64_t n,
                            int64_t end) {
  auto s = eng.new_sequence();
  if (!c.on_gpu()) return feed(eng, *s, tokens, 0, end, 2);
  std::vector<float> out = feed(eng, *s, tokens, 0, n, 1);
  const std::vector<float> rest = feed(eng, *s, tokens, n, end, 3);
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

class PrefixCacheTest : public testing::TestWithParam<FixtureCase> {
 protected:
  void SetUp() override {
    if (GetParam().on_gpu() && gpu_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

}  // namespace

// Every prefix length class from every tier: the continuation's logits equal a cold run's.
TEST_P(PrefixCacheTest, HitsAreBitIdenticalToColdRunsFromEveryTier) {
  const FixtureCase& c = GetParam();
  Engine eng(fixture_dir(c.fixture), opts(c.numerics, 4, c.device));
  const int64_t V = eng.config().vocab_size, P = eng.state_layout(0).page;
  int hca = 0;
  for (int r : eng.config().compress_ratios) hca = std::max(hca, r);
  const int64_t lengths[] = {5, P, P + 1, 2 * P + hca / 2 + 1, 10 * P + 5};
  TempDir tmp;
  for (const int tier : {0, 1, 2}) {  // 0: the pools, 1: host memory, 2: disk (no host tier)
    SCOPED_TRACE(tier == 0 ? "device tier" : tier == 1 ? "host tier" : "disk tier");
    PrefixCacheOptions po;
    po.ram_bytes = tier == 2 ? 0 : int64_t{1} << 30;
    if (tier == 2) po.dir = tmp.path + "/t2";
    PrefixCache cache(eng, po);
    for (const int64_t n : lengths) {
      SCOPED_TRACE("prefix of " + std::to_string(n));
      const std::vector<int32_t> tokens = random_tokens(V, n + 12, static_cast<uint32_t>(100 + n + 7 * tier));
      {
        auto a = eng.new_sequence();
        feed(eng, *a, tokens, 0, n, 1);
        cache.insert(tokens, *a);
      }
      if (tier > 0) {  // every entry leaves the pools
        cache.make_room(eng.state_stats().pages_total + 1);
        cache.flush();
        ASSERT_EQ(cache.stats().device_entries, 0);
      }
      const std::vector<float> want = cold_run(eng, c, tokens, n, n + 12);
      auto b = eng.new_sequence();
      ASSERT_EQ(cache.restore(tokens, static_cast<int64_t>(tokens.size()) - 1, *b), n);
      const std::vector<float> got = feed(eng, *b, tokens, n, n + 12, 3);
      EXPECT_TRUE(got == std::vector<float>(want.begin() + n * V, want.end())) << "logits differ after the hit";
    }
    const PrefixCacheStats st = cache.stats();
    EXPECT_EQ(st.hits, 5);
    EXPECT_EQ(st.bad_files, 0);
  }
}

// A restart: a new engine and cache over the same directory find the snapshots again.
TEST_P(PrefixCacheTest, SnapshotsOnDiskOutliveTheServer) {
  const FixtureCase& c = GetParam();
  TempDir tmp;
  PrefixCacheOptions po;
  po.dir = tmp.path;
  std::vector<int32_t> tokens;
  int64_t V = 0;
  {
    Engine eng(fixture_dir(c.fixture), opts(c.numerics, 4, c.device));
    V = eng.config().vocab_size;
    tokens = random_tokens(V, 7 * eng.state_layout(0).page + 3 + 9, 55);
    PrefixCache cache(eng, po);
    auto a = eng.new_sequence();
    feed(eng, *a, tokens, 0, static_cast<int64_t>(tokens.size()) - 9, 1);
    cache.insert(tokens, *a);
  }  // (the cache finishes its writes as it goes)
  Engine eng(fixture_dir(c.fixture), opts(c.numerics, 4, c.device));
  PrefixCache cache(eng, po);
  EXPECT_EQ(cache.stats().disk_entries, 1);
  const int64_t n = static_cast<int64_t>(tokens.size()) - 9;
  const std::vector<float> want = cold_run(eng, c, tokens, n, n + 9);
  auto b = eng.new_sequence();
  ASSERT_EQ(cache.restore(tokens, n + 8, *b), n);
  EXPECT_TRUE(feed(eng, *b, tokens, n, n + 9, 3) == std::vector<float>(want.begin() + n * V, want.end()));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PrefixCacheTest,
                         testing::Values(FixtureCase{"tiny", Numerics::Reference}, FixtureCase{"tiny", Numerics::Model},
                                         FixtureCase{"small-bf16", Numerics::Reference}),
                         test::fixture_case_name<testing::TestParamInfo<FixtureCase>>);
// The same on a GPU (skipped without one): snapshots of device pools, restored bit for bit.
INSTANTIATE_TEST_SUITE_P(CudaFixtures, PrefixCacheTest,
                         testing::Values(FixtureCase{"tiny", Numerics::Reference, "cuda:0"},
                                         FixtureCase{"tiny", Numerics::Model, "cuda:0"},
                                         FixtureCase{"small-bf16", Numerics::Model, "cuda:0"}),
                         test::fixture_case_name<testing::TestParamInfo<FixtureCase>>);

// The longest cached prefix wins; a prefix that only shares part of an entry's tokens falls back
// to a shorter entry; nothing cached: a miss.
TEST(PrefixCache, LongestCachedPrefixAndFallback) {
  Engine eng(fixture_dir("tiny"), opts(Numerics::Reference));
  const int64_t V = eng.config().vocab_size;
  PrefixCache cache(eng, PrefixCacheOptions{});
  const std::vector<int32_t> t = random_tokens(V, 60, 9);
  for (const int64_t n : {10, 30, 50}) {
    auto a = eng.new_sequence();
    feed(eng, *a, t, 0, n, 4);
    cache.insert(t, *a);
  }
  auto probe = [&](std::vector<int32_t> q, int64_t max_len) {
    auto s = eng.new_sequence();
    return cache.restore(q, max_len, *s);
  };
  EXPECT_EQ(probe(t, 59), 50);
  EXPECT_EQ(probe(t, 49), 30);  // max_len below the longest entry
  std::vector<int32_t> fork = t;
  fork[40] = (fork[40] + 1) % static_cast<int32_t>(V);  // diverges inside the 50-token entry
  EXPECT_EQ(probe(fork, 59), 30);
  fork[3] = (fork[3] + 1) % static_cast<int32_t>(V);
  EXPECT_EQ(probe(fork, 59), 0);
  EXPECT_EQ(cache.stats().entries, 3);
}

// Bad files: truncated, one flipped byte, another format version, another model's key, a missing
// or corrupt page. Each is refused with a log line; the request then prefills from the start
// (or from a shorter entry) and gets the cold run's logits.
TEST(PrefixCache, BadFilesAreIgnored) {
  Engine eng(fixture_dir("tiny"), opts(Numerics::Reference));
  const int64_t V = eng.config().vocab_size, P = eng.state_layout(0).page;
  const std::vector<int32_t> tokens = random_tokens(V, 6 * P + 3 + 8, 66);
  const int64_t n = 6 * P + 3;
  auto cold = eng.new_sequence();
  const std::vector<float> want = feed(eng, *cold, tokens, 0, n + 8, 2);
  enum Damage { truncate, flip, version, key, page_missing, page_flip };
  for (const Damage d : {truncate, flip, version, key, page_missing, page_flip}) {
    SCOPED_TRACE("damage " + std::to_string(d));
    TempDir tmp;
    PrefixCacheOptions po;
    po.dir = tmp.path;
    {
      PrefixCache writer(eng, po);
      auto a = eng.new_sequence();
      feed(eng, *a, tokens, 0, n, 1);
      writer.insert(tokens, *a);
    }
    fs::path snap, page;
    for (const auto& e : fs::recursive_directory_iterator(tmp.path)) {
      if (e.path().extension() == ".hss") snap = e.path();
      if (e.path().extension() == ".hsp" && page.empty()) page = e.path();
    }
    ASSERT_FALSE(snap.empty());
    ASSERT_FALSE(page.empty());
    auto patch = [](const fs::path& f, size_t at, uint8_t x) {
      std::fstream s(f, std::ios::in | std::ios::out | std::ios::binary);
      s.seekg(static_cast<std::streamoff>(at));
      char ch = 0;
      s.read(&ch, 1);
      ch = static_cast<char>(ch ^ x);
      s.seekp(static_cast<std::streamoff>(at));
      s.write(&ch, 1);
    };
    const size_t size = static_cast<size_t>(fs::file_size(snap));
    switch (d) {
      case truncate: fs::resize_file(snap, size - 100); break;
      case flip: patch(snap, size - 200, 0x5a); break;
      case version: patch(snap, 4, 0x02); break;
      case key: patch(snap, 9, 0x01); break;
      case page_missing: fs::remove(page); break;
      case page_flip: patch(page, static_cast<size_t>(fs::file_size(page)) / 2, 0x10); break;
    }
    PrefixCache cache(eng, po);
    auto b = eng.new_sequence();
    const int64_t got = cache.restore(tokens, n + 7, *b);
    EXPECT_EQ(got, 0);
    EXPECT_GE(cache.stats().bad_files, 1);
    EXPECT_TRUE(feed(eng, *b, tokens, got, n + 8, 3) == std::vector<float>(want.begin() + got * V, want.end()));
  }
}

// Budgets: with little host memory and no disk, old entries go; the newest stays usable.
TEST(PrefixCache, EvictionUnderBudgets) {
  Engine eng(fixture_dir("tiny"), opts(Numerics::Reference));
  const int64_t V = eng.config().vocab_size;
  PrefixCacheOptions po;
  po.max_entries = 3;
  PrefixCache cache(eng, po);
  std::vector<std::vector<int32_t>> ts;
  for (int i = 0; i < 6; ++i) {
    ts.push_back(random_tokens(V, 40, 200 + i));
    auto a = eng.new_sequence();
    feed(eng, *a, ts.back(), 0, 39, 1);
    cache.insert(ts.back(), *a);
  }
  EXPECT_EQ(cache.stats().entries, 3);
  auto probe_in = [&](PrefixCache& c, const std::vector<int32_t>& q) {
    auto s = eng.new_sequence();
    return c.restore(q, 39, *s);
  };
  auto probe = [&](const std::vector<int32_t>& q) { return probe_in(cache, q); };
  EXPECT_EQ(probe(ts[0]), 0);  // evicted
  EXPECT_EQ(probe(ts[5]), 39);
  // Pages: device entries are taken off the pools on demand (to host memory here).
  PrefixCache tight(eng, PrefixCacheOptions{});
  auto a = eng.new_sequence();
  feed(eng, *a, ts[1], 0, 39, 1);
  tight.insert(ts[1], *a);
  a.reset();
  const int64_t used = eng.state_stats().pages_used;
  EXPECT_GT(tight.make_room(eng.state_stats().pages_total), 0);
  EXPECT_LT(eng.state_stats().pages_used, used);
  EXPECT_EQ(tight.stats().device_entries, 0);
  EXPECT_EQ(tight.stats().host_entries, 1);
  EXPECT_EQ(probe_in(tight, ts[1]), 39);  // and back
}
