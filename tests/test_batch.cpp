// Continuous batching in the engine: Engine::step_batch (one forward over many sequences, each
// with its own token count and position) gives every sequence the logits separate step() calls
// give it; the same over layer splits and with the shards run as a pipeline of micro-batches;
// the PipelineRunner's order, overlap and error handling; bad batches are refused up front.
// (The scheduler over batched, pipelined steps: tests/test_scheduler.cpp.)
//
// Equality is asserted bit for bit: every CPU kernel computes an output row from that row's
// inputs alone in a fixed order (kernels/cpu matmul: one dot product per (row, output) whatever
// n is; MoE: each token's experts added in ascending expert id; the FP8/BF16 roundings are per
// row), so the rows around a sequence's rows in a batch cannot change its result.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "engine/pipeline_runner.h"
#include "fixture_util.h"
#include "util/error.h"

using namespace hs;

namespace {

// B sequences with their own prompts and lengths, and the steps that feed them: sequence i
// joins at step i and then takes its chunks (a seeded mix of single tokens and long chunks) one
// per step, so one step mixes prefill chunks and decode-like single tokens at different
// positions. The longest runs past the window and across many compressor window closes.
struct Plan {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int64_t>> chunks;
  int steps = 0;
};

Plan make_plan(int64_t vocab, const std::vector<int64_t>& lengths, uint32_t seed) {
  Plan p;
  std::mt19937 rng(seed);
  for (size_t i = 0; i < lengths.size(); ++i) {
    std::vector<int32_t> t(static_cast<size_t>(lengths[i]));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    p.tokens.push_back(std::move(t));
    p.chunks.push_back(test::random_split(lengths[i], seed + 7 * static_cast<uint32_t>(i)));
    p.steps = std::max(p.steps, static_cast<int>(i + p.chunks.back().size()));
  }
  return p;
}

// Each sequence's logits, in the order its steps made them: all positions of a chunk on every
// other step (by step and sequence), else the chunk's last position only.
using Logits = std::vector<std::vector<float>>;

bool all_positions(int step, size_t seq) { return (step + static_cast<int>(seq)) % 2 == 0; }

// batched: one step_batch per step; else one step() per sequence per step.
Logits run_plan(Engine& eng, const Plan& p, bool batched) {
  const int64_t V = eng.config().vocab_size;
  const size_t B = p.tokens.size();
  std::vector<std::unique_ptr<Sequence>> seqs;
  for (size_t i = 0; i < B; ++i) seqs.push_back(eng.new_sequence());
  Logits out(B);
  std::vector<size_t> next_chunk(B, 0);
  std::vector<int64_t> pos(B, 0);
  for (int step = 0; step < p.steps; ++step) {
    std::vector<StepItem> items;
    std::vector<std::vector<float>> bufs;
    std::vector<size_t> who;
    for (size_t i = 0; i < B; ++i) {
      if (step < static_cast<int>(i) || next_chunk[i] >= p.chunks[i].size()) continue;
      const int64_t n = p.chunks[i][next_chunk[i]++];
      const bool all = all_positions(step, i);
      bufs.emplace_back(static_cast<size_t>((all ? n : 1) * V));
      items.push_back(StepItem{seqs[i].get(), p.tokens[i].data() + pos[i], n, nullptr, all});
      who.push_back(i);
      pos[i] += n;
    }
    for (size_t k = 0; k < items.size(); ++k) items[k].logits = bufs[k].data();
    if (batched) {
      eng.step_batch(items);
    } else {
      for (const StepItem& it : items) eng.step(*it.seq, it.tokens, it.n, it.logits, it.all_positions);
    }
    for (size_t k = 0; k < items.size(); ++k) out[who[k]].insert(out[who[k]].end(), bufs[k].begin(), bufs[k].end());
  }
  for (size_t i = 0; i < B; ++i) EXPECT_EQ(seqs[i]->n_past(), static_cast<int64_t>(p.tokens[i].size()));
  return out;
}

EngineOptions opts(Numerics num, std::vector<std::string> devices = {}, std::vector<int> split = {},
                   int micro_batches = 0) {
  EngineOptions o;
  o.numerics = num;
  o.devices = std::move(devices);
  o.layer_split = std::move(split);
  o.pipeline_micro_batches = micro_batches;
  return o;
}

std::string dir_of(const std::string& fixture) { return std::string(HS_TEST_DATA) + "/" + fixture; }

struct Case {
  std::string fixture;
  Numerics numerics;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.fixture << (c.numerics == Numerics::Model ? " (model numerics)" : " (reference numerics)");
}

class BatchVsOneByOne : public ::testing::TestWithParam<Case> {};

// small-bf16: window 16, CSA every 4 and HCA every 16 tokens, hash-routed layers; the longest
// sequence (150 tokens) runs far past the window and closes dozens of compressor windows.
TEST_P(BatchVsOneByOne, SameLogitsUnsplitSplitAndPipelined) {
  const Case c = GetParam();
  Engine one(dir_of(c.fixture), opts(c.numerics));
  EXPECT_EQ(one.micro_batches(), 1);
  const Plan p = make_plan(one.config().vocab_size, {150, 37, 1, 64, 9, 90}, 5);
  const Logits ref = run_plan(one, p, false);
  EXPECT_EQ(run_plan(one, p, true), ref) << "unsplit";

  const int L = one.config().n_layers;
  Engine two(dir_of(c.fixture), opts(c.numerics, {"cpu", "cpu"}, {3, L - 3}));
  EXPECT_EQ(two.micro_batches(), 1);  // one backend: no pipeline unless forced
  EXPECT_EQ(run_plan(two, p, true), ref) << "cpu,cpu";
  Engine three(dir_of(c.fixture), opts(c.numerics, {"cpu", "cpu", "cpu"}, {2, L - 4, 2}));
  EXPECT_EQ(run_plan(three, p, true), ref) << "cpu,cpu,cpu";

  // Forced pipelines: micro-batches flow through the shards on their worker threads (shards
  // on one backend take turns, so this checks the machinery and the hand-over, not overlap);
  // more micro-batches than items in a step caps at one item each.
  for (int m : {2, 3, 8}) {
    Engine piped(dir_of(c.fixture), opts(c.numerics, {"cpu", "cpu", "cpu"}, {2, L - 4, 2}, m));
    EXPECT_EQ(piped.micro_batches(), m);
    EXPECT_EQ(run_plan(piped, p, true), ref) << "cpu,cpu,cpu with " << m << " micro-batches";
  }
  Engine piped2(dir_of(c.fixture), opts(c.numerics, {"cpu", "cpu"}, {L - 1, 1}, 2));
  EXPECT_EQ(run_plan(piped2, p, true), ref) << "cpu,cpu with 2 micro-batches";
}

INSTANTIATE_TEST_SUITE_P(Cpu, BatchVsOneByOne,
                         ::testing::Values(Case{"small-bf16", Numerics::Reference}, Case{"small-bf16", Numerics::Model},
                                           Case{"tiny-official", Numerics::Reference}),
                         [](const auto& info) {
                           const bool model = info.param.numerics == Numerics::Model;
                           std::string n = info.param.fixture + (model ? "_model" : "_reference");
                           for (auto& ch : n)
                             if (ch == '-') ch = '_';
                           return n;
                         });

// On a GPU the matmul path depends on the row count (matvec for a few rows, GEMM beyond), so a
// batch equals separate steps up to rounding: rel. L2 <= 1e-5 and the same argmax everywhere.
// cpu,cuda:0 (and cuda:0,cuda:1) run as a pipeline of micro-batches by default: real overlap
// of two backends and the HC state staged through host memory per micro-batch.
TEST(BatchGpu, BatchedAndPipelinedEqualOneByOne) {
  const int gpus = gpu_count();
  if (gpus < 1) GTEST_SKIP() << "no CUDA device";
  std::vector<std::vector<std::string>> cases = {{"cuda:0"}, {"cpu", "cuda:0"}};
  if (gpus >= 2) cases.push_back({"cuda:0", "cuda:1"});
  auto flat = [](const Logits& l) {
    std::vector<float> f;
    for (const auto& v : l) f.insert(f.end(), v.begin(), v.end());
    return f;
  };
  for (const auto& devs : cases) {
    for (int m : {0, 1}) {  // the default (a pipeline when the devices differ), and forced off
      Engine eng(dir_of("small-bf16"), opts(Numerics::Reference, devs, {}, m));
      const Plan p = make_plan(eng.config().vocab_size, {150, 37, 1, 64, 9, 90}, 5);
      const std::vector<float> ref = flat(run_plan(eng, p, false)), got = flat(run_plan(eng, p, true));
      ASSERT_EQ(got.size(), ref.size());
      std::string name;
      for (const auto& d : devs) name += (name.empty() ? "" : ",") + d;
      const double rel = test::rel_l2(got.data(), ref.data(), ref.size());
      std::printf("[batch-gpu] %-14s micro-batches %d: rel_l2 batched vs one by one %.3e\n", name.c_str(),
                  eng.micro_batches(), rel);
      EXPECT_LE(rel, 1e-5) << name;
      EXPECT_EQ(test::argmax_mismatches(got, ref, eng.config().vocab_size), 0) << name;
    }
  }
}

// The batch equals the fixture's oracle too (not only our own one-by-one run).
TEST(Batch, FixtureLogitsInsideABatch) {
  const std::string dir = dir_of("small-bf16");
  test::Expected e = test::load_expected(dir);
  Engine eng(dir, opts(Numerics::Reference, {"cpu", "cpu"}, {4, 4}, 2));
  const int64_t T = static_cast<int64_t>(e.tokens.size()), V = e.vocab;
  auto fixture = eng.new_sequence(), other = eng.new_sequence();
  std::vector<int32_t> noise(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) noise[static_cast<size_t>(t)] = static_cast<int32_t>((t * 37 + 11) % V);
  std::vector<float> got(static_cast<size_t>(T * V)), scratch(static_cast<size_t>(T * V));
  int64_t pos = 0;
  for (int64_t c : e.chunk_sizes) {  // the other sequence decodes a token beside each chunk
    const StepItem items[] = {{other.get(), noise.data() + pos, 1, scratch.data(), false},
                              {fixture.get(), e.tokens.data() + pos, c, got.data() + pos * V, true}};
    eng.step_batch(items);
    pos += c;
  }
  ASSERT_EQ(pos, T);
  const double rel = test::rel_l2(got.data(), e.logits.data(), got.size());
  EXPECT_LT(rel, 1e-5) << "rel L2 vs the fixture";
  EXPECT_EQ(test::argmax_mismatches(got, e.logits, V), 0);
}

// Bad batches are refused before anything runs, naming the sequence: no state moves.
TEST(Batch, BadItemsAreRefusedUpFront) {
  const std::string dir = dir_of("tiny");
  Engine eng(dir, opts(Numerics::Reference, {"cpu", "cpu"}, {3, 3}));
  const int64_t V = eng.config().vocab_size;
  auto a = eng.new_sequence(), b = eng.new_sequence();
  std::vector<float> la(static_cast<size_t>(3 * V)), lb(la.size());
  const std::vector<int32_t> good = {1, 2, 3}, bad = {4, static_cast<int32_t>(V), 6};
  auto refused = [&](std::vector<StepItem> items, const std::string& needle) {
    try {
      eng.step_batch(items);
      ADD_FAILURE() << "accepted a bad batch (" << needle << ")";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
    EXPECT_EQ(a->n_past(), 0);
    EXPECT_EQ(b->n_past(), 0);
    for (const auto& s : a->shards) EXPECT_EQ(s->n_past(), 0);
  };
  refused({}, "a step needs at least one sequence");
  refused({{a.get(), good.data(), 3, la.data(), true}, {b.get(), bad.data(), 3, lb.data(), true}},
          "sequence #1 of the batch: token id 320 at position 1 is outside the vocabulary [0, 320)");
  refused({{a.get(), good.data(), 3, la.data(), true}, {a.get(), good.data(), 1, lb.data(), false}},
          "sequence #0 and #1 of the batch are the same sequence");
  refused({{a.get(), good.data(), 3, la.data(), true}, {b.get(), good.data(), 0, lb.data(), true}},
          "sequence #1 of the batch: step needs at least one token");
  Engine three(dir, opts(Numerics::Reference, {"cpu", "cpu", "cpu"}, {2, 2, 2}));
  auto foreign = three.new_sequence();
  refused({{a.get(), good.data(), 3, la.data(), true}, {foreign.get(), good.data(), 3, lb.data(), true}},
          "sequence #1 of the batch: sequence has 3 shard states, engine has 2 shards");
  Engine other_split(dir, opts(Numerics::Reference, {"cpu", "cpu"}, {2, 4}));
  auto misfit = other_split.new_sequence();
  refused({{misfit.get(), good.data(), 3, la.data(), true}, {b.get(), good.data(), 3, lb.data(), true}},
          "sequence #0 of the batch: sequence state was made for layers starting at 0 (2 layers), not for this "
          "shard [0, 3)");
  // A sequence whose shards disagree (a step that failed half-way) must be reset first.
  {  // shard 1 alone takes two tokens, as a step that failed after it would leave it
    std::vector<float> X(static_cast<size_t>(2 * eng.config().hc_mult * eng.config().dim), 0.25f);
    eng.shard(1).forward(*a->shards[1], good.data(), 2, X.data());
  }
  try {
    eng.step(*a, good.data(), 3, la.data());
    ADD_FAILURE() << "accepted a half-advanced sequence";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("shard 1 of the sequence is at position 2, shard 0 at 0"),
              std::string::npos)
        << err.what();
  }
  a->reset();
  const StepItem ok[] = {{a.get(), good.data(), 3, la.data(), true}, {b.get(), good.data(), 2, lb.data(), false}};
  eng.step_batch(ok);
  EXPECT_EQ(a->n_past(), 3);
  EXPECT_EQ(b->n_past(), 2);
  for (const auto& s : b->shards) EXPECT_EQ(s->n_past(), 2);
}

// (s, m) runs after (s-1, m) and after (s, m-1); stages work on different micro-batches at the
// same time; an error stops the rest of the run and is rethrown; the runner serves again after.
TEST(PipelineRunner, OrderOverlapAndErrors) {
  std::vector<int> inits(3, 0);
  PipelineRunner r(3, [&](int s) { inits[static_cast<size_t>(s)]++; });
  std::mutex mu;
  std::vector<std::pair<int, int>> order;
  std::promise<void> stage0_on_1;
  auto started = stage0_on_1.get_future().share();
  std::atomic<bool> overlapped{false};
  r.run(4, [&](int s, int m) {
    if (s == 0 && m == 1) stage0_on_1.set_value();
    // Stage 1 on micro-batch 0 waits for stage 0 to be on micro-batch 1: only possible when
    // the stages run at the same time.
    if (s == 1 && m == 0) overlapped = started.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    std::lock_guard<std::mutex> lk(mu);
    order.emplace_back(s, m);
  });
  EXPECT_TRUE(overlapped);
  ASSERT_EQ(order.size(), 12u);
  auto at = [&](int s, int m) {
    return std::find(order.begin(), order.end(), std::make_pair(s, m)) - order.begin();
  };
  for (int s = 0; s < 3; ++s)
    for (int m = 0; m < 4; ++m) {
      if (s > 0) {
        EXPECT_LT(at(s - 1, m), at(s, m));
      }
      if (m > 0) {
        EXPECT_LT(at(s, m - 1), at(s, m));
      }
    }
  order.clear();
  try {
    r.run(4, [&](int s, int m) {
      if (s == 1 && m == 2) throw Error("stage 1 broke on micro-batch 2");
      std::lock_guard<std::mutex> lk(mu);
      order.emplace_back(s, m);
    });
    ADD_FAILURE() << "the error was swallowed";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "stage 1 broke on micro-batch 2");
  }
  EXPECT_EQ(at(1, 3), static_cast<long>(order.size()));  // stage 1 stopped at the error
  EXPECT_EQ(at(2, 2), static_cast<long>(order.size()));  // and nothing downstream of it ran
  order.clear();
  r.run(2, [&](int s, int m) {
    std::lock_guard<std::mutex> lk(mu);
    order.emplace_back(s, m);
  });
  EXPECT_EQ(order.size(), 6u);
  EXPECT_EQ(inits, std::vector<int>(3, 1));  // once per worker
}

}  // namespace
