// The shard state pool (engine/state_pool.h) on the CPU: ragged batches with joins, resets and
// slot reuse, fork() at and between page boundaries, truncate(), a full pool, and memory that
// is never read before it is written. The oracle is always a fresh sequence fed the same tokens
// one at a time in its own engine: CPU results do not depend on chunking or batching (see
// test_batch.cpp), so every comparison is bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "fixture_util.h"
#include "util/error.h"

using namespace hs;
using test::FixtureCase;
using test::fixture_dir;
using test::random_tokens;

namespace {

EngineOptions opts(Numerics num, int max_seqs = 8, int64_t state_memory = 0, std::vector<std::string> devices = {},
                   std::vector<int> split = {}) {
  EngineOptions o;
  o.numerics = num;
  o.threads = 2;
  o.max_seqs = max_seqs;
  o.state_memory = state_memory;
  o.devices = std::move(devices);
  o.layer_split = std::move(split);
  return o;
}

// Logits of every position of `tokens`, fed one token at a time to a fresh sequence.
std::vector<float> oracle(Engine& eng, const std::vector<int32_t>& tokens) {
  const int64_t V = eng.config().vocab_size;
  auto seq = eng.new_sequence();
  std::vector<float> out(tokens.size() * static_cast<size_t>(V));
  for (size_t t = 0; t < tokens.size(); ++t) eng.step(*seq, tokens.data() + t, 1, out.data() + t * V);
  return out;
}

std::vector<float> rows(const std::vector<float>& all, int64_t V, int64_t first, int64_t n) {
  return std::vector<float>(all.begin() + first * V, all.begin() + (first + n) * V);
}


class StatePoolTest : public testing::TestWithParam<FixtureCase> {};

}  // namespace

// Ragged steps over a changing set of sequences: prompts in chunks beside decoders, sequences
// joining late, one reset in the middle of its run and fed a new stream, one destroyed and its
// slot taken by a new sequence. Every logits row equals the fresh one-token-at-a-time run.
TEST_P(StatePoolTest, RaggedBatchesWithResetsAndSlotReuse) {
  const FixtureCase& c = GetParam();
  Engine eng(fixture_dir(c.fixture), opts(c.numerics, 6));
  Engine ref(fixture_dir(c.fixture), opts(c.numerics, 2));
  const int64_t V = eng.config().vocab_size;
  struct Live {
    std::unique_ptr<Sequence> seq;
    std::vector<int32_t> tokens;  // what this sequence was fed since its last reset
    std::vector<float> logits;    // every position's logits since then
    std::vector<int32_t> stream;  // what it will be fed
    size_t fed = 0;
  };
  std::mt19937 rng(5);
  std::vector<Live> live;
  auto join = [&](uint32_t seed, int64_t len) {
    live.push_back(Live{eng.new_sequence(), {}, {}, random_tokens(V, len, seed), 0});
  };
  join(1, 90);
  join(2, 40);
  auto check = [&](Live& l, const char* what) {
    const std::vector<float> want = oracle(ref, l.tokens);
    ASSERT_EQ(l.logits.size(), want.size()) << what;
    EXPECT_TRUE(l.logits == want) << what << ": logits differ from a fresh run (" << l.tokens.size() << " tokens)";
  };
  for (int step = 0; step < 60; ++step) {
    if (step == 5) join(3, 70);
    if (step == 9) join(4, 25);
    if (step == 20) {  // reset sequence 1 mid-run: it starts over with a new stream
      check(live[1], "before reset");
      live[1].seq->reset();
      live[1].tokens.clear();
      live[1].logits.clear();
      live[1].stream = random_tokens(V, 50, 9);
      live[1].fed = 0;
    }
    if (step == 30) {  // sequence 0 ends; a new one takes its slot
      check(live[0], "before release");
      live.erase(live.begin());
      join(5, 60);
    }
    std::vector<StepItem> items;
    std::vector<std::vector<float>> out;
    std::vector<size_t> who;
    for (size_t i = 0; i < live.size(); ++i) {
      Live& l = live[i];
      if (l.fed >= l.stream.size()) continue;
      const int64_t left = static_cast<int64_t>(l.stream.size() - l.fed);
      const int64_t n = std::min<int64_t>(left, rng() % 3 == 0 ? 1 + rng() % 23 : 1);
      out.emplace_back(static_cast<size_t>(n * V));
      items.push_back(StepItem{l.seq.get(), l.stream.data() + l.fed, n, nullptr, true});
      who.push_back(i);
    }
    if (items.empty()) break;
    for (size_t k = 0; k < items.size(); ++k) items[k].logits = out[k].data();
    eng.step_batch(items);
    for (size_t k = 0; k < items.size(); ++k) {
      Live& l = live[who[k]];
      l.tokens.insert(l.tokens.end(), items[k].tokens, items[k].tokens + items[k].n);
      l.logits.insert(l.logits.end(), out[k].begin(), out[k].end());
      l.fed += static_cast<size_t>(items[k].n);
    }
  }
  for (Live& l : live) check(l, "at the end");
}

// fork() at a page boundary, one past it, inside an HCA window, and at the sequence's end,
// then both continue with different tokens: each equals a fresh run of its own tokens.
TEST_P(StatePoolTest, ForkThenDivergeEqualsFreshRuns) {
  const FixtureCase& c = GetParam();
  Engine eng(fixture_dir(c.fixture), opts(c.numerics, 4));
  Engine ref(fixture_dir(c.fixture), opts(c.numerics, 2));
  const int64_t V = eng.config().vocab_size, P = eng.state_layout(0).page;
  const std::vector<int32_t> prefix = random_tokens(V, 5 * P + 3, 21);
  const int64_t N = static_cast<int64_t>(prefix.size());
  for (const int64_t upto : {N, 5 * P, 5 * P + 1, N - 7}) {
    SCOPED_TRACE("fork at " + std::to_string(upto) + " of " + std::to_string(N));
    auto src = eng.new_sequence();
    std::vector<float> scratch(static_cast<size_t>(N * V));
    eng.step(*src, prefix.data(), N, scratch.data());
    auto dst = eng.fork(*src, upto);
    ASSERT_EQ(dst->n_past(), upto);
    const std::vector<int32_t> a = random_tokens(V, 2 * P + 5, 31), b = random_tokens(V, 2 * P + 5, 32);
    std::vector<float> la(a.size() * static_cast<size_t>(V)), lb(la.size());
    // src continues (after rolling back to the fork point too, so both diverge from upto).
    eng.truncate(*src, upto);
    for (size_t t = 0; t < a.size(); ++t) {  // interleaved, in one batch each step
      const StepItem items[] = {{src.get(), a.data() + t, 1, la.data() + t * V, true},
                                {dst.get(), b.data() + t, 1, lb.data() + t * V, true}};
      eng.step_batch(items);
    }
    std::vector<int32_t> ta(prefix.begin(), prefix.begin() + upto), tb = ta;
    ta.insert(ta.end(), a.begin(), a.end());
    tb.insert(tb.end(), b.begin(), b.end());
    const int64_t A = static_cast<int64_t>(a.size());
    EXPECT_TRUE(la == rows(oracle(ref, ta), V, upto, A)) << "source after the fork";
    EXPECT_TRUE(lb == rows(oracle(ref, tb), V, upto, A)) << "fork";
  }
}

// truncate() back across window closes and a page boundary, then new tokens: equal to a fresh
// run of the kept tokens plus the new ones. Repeated, with decodes in between.
TEST_P(StatePoolTest, TruncateThenRedecodeEqualsFreshRun) {
  const FixtureCase& c = GetParam();
  Engine eng(fixture_dir(c.fixture), opts(c.numerics, 2));
  Engine ref(fixture_dir(c.fixture), opts(c.numerics, 2));
  const int64_t V = eng.config().vocab_size, P = eng.state_layout(0).page;
  std::vector<int32_t> kept = random_tokens(V, 3 * P + 2, 41);
  auto seq = eng.new_sequence();
  std::vector<float> scratch(kept.size() * static_cast<size_t>(V));
  eng.step(*seq, kept.data(), static_cast<int64_t>(kept.size()), scratch.data());
  std::mt19937 rng(43);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const int64_t back = 1 + static_cast<int64_t>(rng() % 14);  // within max_rollback (16)
    eng.truncate(*seq, seq->n_past() - back);
    kept.resize(kept.size() - static_cast<size_t>(back));
    const std::vector<int32_t> more = random_tokens(V, back + 3, 50 + round);
    std::vector<float> got(more.size() * static_cast<size_t>(V));
    for (size_t t = 0; t < more.size(); t += 2) {  // pairs of tokens and single ones
      const int64_t n = std::min<int64_t>(2, static_cast<int64_t>(more.size() - t));
      eng.step(*seq, more.data() + t, n, got.data() + t * V);
    }
    const int64_t at = static_cast<int64_t>(kept.size());
    kept.insert(kept.end(), more.begin(), more.end());
    EXPECT_TRUE(got == rows(oracle(ref, kept), V, at, static_cast<int64_t>(more.size())));
  }
  // Beyond the rollback the state is gone: refused, nothing changed.
  const int64_t n_past = seq->n_past();
  EXPECT_THROW(eng.truncate(*seq, n_past - 40), Error);
  EXPECT_EQ(seq->n_past(), n_past);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, StatePoolTest,
                         testing::Values(FixtureCase{"tiny", Numerics::Reference}, FixtureCase{"tiny", Numerics::Model},
                                         FixtureCase{"small-bf16", Numerics::Reference}),
                         test::fixture_case_name<testing::TestParamInfo<FixtureCase>>);

// A pool with room for few pages: a step that cannot have its pages is refused with a message
// and changes nothing; the other sequences go on exactly as in an unconstrained engine.
TEST(StatePool, FullPoolRefusesAndCorruptsNothing) {
  const std::string dir = fixture_dir("tiny");
  Engine big(dir, opts(Numerics::Reference, 3));
  const StateLayout& L = big.state_layout(0);
  // Three slots, their SWA pages, and 12 compressed pages.
  const int64_t memory = 3 * L.slot_bytes + L.swa_blocks * L.swa_page_bytes + 12 * L.cmp_page_bytes;
  Engine small(dir, opts(Numerics::Reference, 3, memory));
  const int64_t P = small.state_layout(0).page, V = small.config().vocab_size;
  ASSERT_EQ(small.state_stats().pages_total, 12);
  auto a = small.new_sequence(), b = small.new_sequence();
  // a: 8 pages, with room for 5 more tokens in its last one.
  const int64_t na = 8 * P - 5;
  const std::vector<int32_t> ta = random_tokens(V, na, 61), tb = random_tokens(V, 6 * P, 62);
  std::vector<float> la(ta.size() * static_cast<size_t>(V)), lb(tb.size() * static_cast<size_t>(V));
  small.step(*a, ta.data(), na, la.data());
  try {
    small.step(*b, tb.data(), 6 * P, lb.data());
    ADD_FAILURE() << "a step beyond the pool was accepted";
  } catch (const StatePoolFull& e) {
    EXPECT_NE(std::string(e.what()).find("state pool of shard 0 is full: this step needs 6 more pages (4 of 12 free)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(b->n_past(), 0);
  EXPECT_EQ(small.state_stats().pages_used, 8);
  // b fits in what is left when it is shorter; a continues; both equal fresh runs.
  small.step(*b, tb.data(), 4 * P, lb.data());
  const std::vector<int32_t> more = random_tokens(V, 5, 63);
  std::vector<float> lm(more.size() * static_cast<size_t>(V));
  for (size_t t = 0; t < more.size(); ++t) small.step(*a, more.data() + t, 1, lm.data() + t * V);
  std::vector<int32_t> all_a = ta;
  all_a.insert(all_a.end(), more.begin(), more.end());
  const std::vector<float> want_a = oracle(big, all_a);
  EXPECT_TRUE(la == rows(want_a, V, 0, na));
  EXPECT_TRUE(lm == rows(want_a, V, na, 5));
  EXPECT_TRUE(rows(lb, V, 0, 4 * P) == oracle(big, std::vector<int32_t>(tb.begin(), tb.begin() + 4 * P)));
  // The pool ran out: a sequence past its pages is refused again.
  EXPECT_THROW(small.step(*b, tb.data() + 4 * P, P, lb.data()), StatePoolFull);
}

// Pool memory is handed out uninitialised: fill every pool byte with NaN patterns first and the
// logits do not change (nothing is read that was not written for this sequence).
TEST(StatePool, NothingIsReadBeforeItIsWritten) {
  for (const Numerics num : {Numerics::Reference, Numerics::Model}) {
    const std::string dir = fixture_dir("tiny");
    Engine clean(dir, opts(num, 2)), dirty(dir, opts(num, 2));
    for (int s = 0; s < dirty.n_shards(); ++s) {
      const StatePool& p = dirty.shard(s).pool();
      const StateLayout& L = p.layout();
      for (int l = 0; l < p.n_layers(); ++l) {
        const LayerStorage& st = p.storage(l);
        const StateLayout::Layer& y = L.layers[static_cast<size_t>(l)];
        std::memset(st.kv.base, 0xff, static_cast<size_t>(L.swa_blocks * L.page * y.kv.bytes));
        if (st.entries.base)
          std::memset(st.entries.base, 0xff, static_cast<size_t>(L.cmp_blocks * st.entries.rows_per_block * y.entry.bytes));
        if (st.keys.base)
          std::memset(st.keys.base, 0xff, static_cast<size_t>(L.cmp_blocks * st.keys.rows_per_block * y.key.bytes));
        if (st.ring_kv) {
          const size_t ring = static_cast<size_t>(L.slots) * y.ring * y.coff * y.kv.d * 4;
          std::memset(st.ring_kv, 0xff, ring);
          std::memset(st.ring_gate, 0xff, ring);
        }
        if (st.iring_kv) {
          const size_t ring = static_cast<size_t>(L.slots) * y.ring * 2 * y.key.d * 4;
          std::memset(st.iring_kv, 0xff, ring);
          std::memset(st.iring_gate, 0xff, ring);
        }
      }
    }
    const std::vector<int32_t> t = random_tokens(clean.config().vocab_size, 70, 71);
    EXPECT_TRUE(oracle(clean, t) == oracle(dirty, t)) << (num == Numerics::Model ? "model" : "reference");
  }
}

// The same over a layer split: every shard's pool forks and truncates together.
TEST(StatePool, ForkAndTruncateOverALayerSplit) {
  const std::string dir = fixture_dir("small-bf16");
  Engine eng(dir, opts(Numerics::Reference, 4, 0, {"cpu", "cpu"}, {3, 5}));
  Engine ref(dir, opts(Numerics::Reference, 2));
  const int64_t V = eng.config().vocab_size;
  const std::vector<int32_t> prefix = random_tokens(V, 77, 81), tail = random_tokens(V, 9, 82);
  auto a = eng.new_sequence();
  std::vector<float> scratch(prefix.size() * static_cast<size_t>(V));
  eng.step(*a, prefix.data(), 77, scratch.data());
  auto b = eng.fork(*a, 70);
  eng.truncate(*a, 72);
  std::vector<float> la(tail.size() * static_cast<size_t>(V)), lb(la.size());
  eng.step(*a, tail.data(), 9, la.data());
  eng.step(*b, tail.data(), 9, lb.data());
  std::vector<int32_t> ta(prefix.begin(), prefix.begin() + 72), tb(prefix.begin(), prefix.begin() + 70);
  ta.insert(ta.end(), tail.begin(), tail.end());
  tb.insert(tb.end(), tail.begin(), tail.end());
  EXPECT_TRUE(la == rows(oracle(ref, ta), V, 72, 9));
  EXPECT_TRUE(lb == rows(oracle(ref, tb), V, 70, 9));
  // A fork further back than the rollback keeps is refused.
  EXPECT_THROW(eng.fork(*a, 10), Error);
}
