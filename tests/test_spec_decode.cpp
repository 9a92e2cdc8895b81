// Speculative decoding end to end (issue 16) on the synthetic tiny model with an MTP block:
// greedy output equals plain greedy decode bit for bit, under continuous batching (drafting and
// non-drafting requests, prompt chunks and verify steps in one engine step); forced acceptance
// (the true continuation as drafts) really skips steps; rollback of the model's and the drafter's
// state at every boundary (mid-window, window close, page boundary) equals never having seen the
// rejected tokens; sampled output keeps plain sampling's distribution; a bad --draft-max is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <chrono>
#include <future>
#include <map>
#include <thread>

#include "engine/engine.h"
#include "engine/mtp.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "model/synthetic.h"
#include "scheduler_util.h"
#include "util/error.h"

namespace hs {
namespace {

SyntheticSpec mtp_model() {
  SyntheticSpec s;
  s.layers = 4;  // SWA, SWA, CSA (ratio 4), HCA (ratio 8): every state kind
  s.seed = 3;
  s.draft = "mtp";
  return s;
}

EngineOptions mtp_options(int max_seqs) {
  EngineOptions o;
  o.draft = "mtp";
  o.max_seqs = max_seqs;
  o.threads = 2;
  return o;
}

std::unique_ptr<Engine> mtp_engine(int max_seqs = 4) {
  return std::make_unique<Engine>(make_synthetic_source(mtp_model()), mtp_options(max_seqs));
}

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 37 + salt * 11 + 5) % 300 + 3));
  return p;
}

SchedulerOptions options(int draft_max) {
  SchedulerOptions o;
  o.max_seqs = 4;
  o.prefill_chunk = 5;  // prompts in several chunks, mixed with decodes and verify steps
  o.draft_max = draft_max;
  return o;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0;
  return p;
}

TEST(SpecDecode, GreedyEqualsPlainDecodeUnderBatching) {
  auto e = mtp_engine();
  ASSERT_NE(e->drafter(), nullptr);
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(3, 1), prompt_of(9, 2), prompt_of(17, 3), prompt_of(30, 4)};
  std::vector<SamplingParams> sp(4, greedy());
  sp[2].presence_penalty = 0.5f;  // this one does not draft (penalties), in the same steps as those that do
  SchedulerStats plain_stats, spec_stats;
  const auto plain = test::run_all(*e, options(0), prompts, 24, sp, &plain_stats);
  EXPECT_EQ(plain_stats.drafted_tokens, 0);
  for (int k : {1, 3, 7}) {
    const auto spec = test::run_all(*e, options(k), prompts, 24, sp, &spec_stats);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "k = " << k << ", request " << i;
      EXPECT_EQ(spec[i].reason, plain[i].reason);
    }
    EXPECT_GT(spec_stats.drafted_tokens, 0) << "k = " << k;
    EXPECT_GT(spec_stats.verify_steps, 0);
    EXPECT_LE(spec_stats.accepted_tokens, spec_stats.drafted_tokens);
  }
}

// Drafts from the test hook: the plain run's continuation (all accepted) or wrong tokens (none).
TEST(SpecDecode, ForcedAcceptanceSkipsSteps) {
  auto e = mtp_engine();
  const std::vector<int32_t> prompt = prompt_of(11, 7);
  const int n = 31, k = 5;
  SchedulerStats st;
  const auto plain = test::run_all(*e, options(0), {prompt}, n, {greedy()}, &st);
  const std::vector<int32_t> truth = plain[0].tokens;
  ASSERT_EQ(static_cast<int>(truth.size()), n);
  EXPECT_EQ(st.decode_steps, n - 1);
  for (const bool right : {true, false}) {
    Scheduler s(*e, options(k));
    auto out = std::make_shared<test::Outcome>();
    std::promise<void> done;
    GenerationRequest r;
    r.prompt = prompt;
    r.max_tokens = n;
    r.sampling = greedy();
    int drafted = 0, accepted = 0;
    r.test_drafts = [&](int64_t g, int kk) {
      std::vector<int32_t> d;
      for (int i = 0; i < kk && g + i < n; ++i)
        d.push_back(right ? truth[static_cast<size_t>(g + i)] : (truth[static_cast<size_t>(g + i)] + 1) % 300);
      return d;
    };
    r.on_draft = [&](int dr, int ac) {
      drafted += dr;
      accepted += ac;
    };
    r.on_token = [out](const SampleResult& x) {
      out->tokens.push_back(x.token);
      return true;
    };
    r.on_done = [&](FinishReason, const std::string&) { done.set_value(); };
    s.submit(std::move(r));
    done.get_future().get();
    const SchedulerStats ss = s.stats();
    EXPECT_EQ(out->tokens, truth) << (right ? "accepted" : "rejected") << " drafts";
    if (right) {
      EXPECT_EQ(accepted, drafted);
      // The prompt's step gives 1 token, each verify step k + 1: 30 tokens in 5 steps, not 30.
      EXPECT_EQ(ss.decode_steps, (n - 1 + k) / (k + 1));
    } else {
      EXPECT_EQ(accepted, 0);
      EXPECT_GT(drafted, 0);
      EXPECT_EQ(ss.decode_steps, n - 1);
    }
  }
}

// The random MTP block's drafts (almost) always fail: a request verifies a few of them, then
// only probes on the shared step grid (at most one per 8 steps); the next request in the same
// scheduler starts from the lower estimate and verifies fewer before it backs off; the output
// stays plain greedy's.
TEST(SpecDecode, FailingDraftsBackOffAndTheNextRequestStartsLower) {
  auto e = mtp_engine();
  const int n = 120;
  const auto plain = test::run_all(*e, options(0), {prompt_of(9, 1), prompt_of(9, 2)}, n, {greedy(), greedy()});
  Scheduler s(*e, options(3));
  std::vector<int64_t> drafted, accepted, probes;
  for (int i = 0; i < 2; ++i) {
    const SchedulerStats before = s.stats();
    const test::Outcome out = test::generate(s, prompt_of(9, 1 + i), n, greedy()).get();
    EXPECT_EQ(out.tokens, plain[static_cast<size_t>(i)].tokens) << "request " << i;
    const SchedulerStats after = s.stats();
    drafted.push_back(after.drafted_tokens - before.drafted_tokens);
    accepted.push_back(after.accepted_tokens - before.accepted_tokens);
    probes.push_back(after.draft_probes - before.draft_probes);
  }
  // The second also starts at the probe interval the first backed off to (the longest): it does
  // not probe every 16, 32, 64 steps first.
  EXPECT_GE(probes[0], 3);
  EXPECT_LE(probes[1], n / DraftLength::kProbeMax + 1);
  EXPECT_LT(probes[1], probes[0]);
  ASSERT_LE(accepted[0] * 4, drafted[0]) << "the random drafter accepts too often for this test";
  // From 0.6: k = 2, 2, then k = 1 four times (10 drafts), then probes of one draft.
  EXPECT_GE(drafted[0], 8);
  EXPECT_LE(drafted[0], 10 + n / DraftLength::kProbeMin + 1);
  EXPECT_LT(drafted[1], drafted[0]) << "the second request should start from the first's lower estimate";
}

// A sampled request's tokens depend on its seed alone, also once its drafts have backed off to
// probes: alone, or started later next to other requests (their probes on the scheduler's step
// grid, its own on its token count), it gives the same tokens.
TEST(SpecDecode, ASampledRequestsTokensDoNotDependOnWhatElseRuns) {
  auto e = mtp_engine();
  SamplingParams p;
  p.temperature = 0.8f;
  p.seed = 77;
  const int n = 90;
  test::Outcome a;
  {
    Scheduler alone(*e, options(3));
    a = test::generate(alone, prompt_of(7, 9), n, p).get();
    ASSERT_GT(alone.stats().drafted_tokens, 0);
  }
  Scheduler busy(*e, options(3));
  auto g1 = test::generate(busy, prompt_of(12, 3), n + 40, greedy());
  auto g2 = test::generate(busy, prompt_of(5, 4), n + 40, greedy());
  while (busy.stats().decode_steps < 13) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const test::Outcome b = test::generate(busy, prompt_of(7, 9), n, p).get();
  g1.get();
  g2.get();
  EXPECT_EQ(a.tokens, b.tokens);
}

// A drafter that fails mid-generation (its batched pass throws) stops drafting for the requests
// of that pass: they finish with plain greedy's tokens, nothing else fails, and later requests
// draft again.
TEST(SpecDecode, AFailingDrafterLeavesRequestsDecodingPlainly) {
  auto e = mtp_engine();
  const int n = 40;
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(8, 1), prompt_of(13, 2)};
  const auto plain = test::run_all(*e, options(0), prompts, n, {greedy(), greedy()});
  Scheduler s(*e, options(3));
  std::vector<std::future<test::Outcome>> fs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.prompt = prompts[i];
    r.max_tokens = n;
    r.sampling = greedy();
    if (i == 0) r.test_drafter_fail_after = 5;
    fs.push_back(test::submit_request(s, std::move(r)));
  }
  for (size_t i = 0; i < fs.size(); ++i) {
    const test::Outcome o = fs[i].get();
    EXPECT_EQ(o.reason, FinishReason::Length) << "request " << i;
    EXPECT_EQ(o.tokens, plain[i].tokens) << "request " << i;
  }
  const int64_t drafted = s.stats().drafted_tokens;
  EXPECT_GT(drafted, 0);
  SamplingParams sampled;  // (a sampled request starts from the full estimate: it drafts at once)
  sampled.temperature = 0.8f;
  sampled.seed = 5;
  test::generate(s, prompt_of(9, 3), 20, sampled).get();
  EXPECT_GT(s.stats().drafted_tokens, drafted) << "a new request drafts again";
}

// A state that verified k + 1 tokens and rolled back to a + 1 of them equals one that only ever
// saw those: the model's (every layer kind: SWA rows, open compressor windows, CSA/HCA entries,
// indexer keys) and the drafter's, at every prompt length across the window (8), the compressor
// windows (4, 8) and the page (8).
TEST(SpecDecode, RollbackAtEveryStateBoundary) {
  auto e = mtp_engine(2);
  const int64_t V = e->config().vocab_size, per = e->config().hc_mult * e->config().dim;
  MtpDrafter& d = *e->drafter();
  const std::vector<int32_t> toks = prompt_of(40, 9), next = {17, 250, 4};
  auto a_seq = e->new_sequence(), b_seq = e->new_sequence();
  std::vector<float> la(3 * V), lb(3 * V), scratch(8 * V);
  for (int64_t P = 1; P <= 20; ++P)
    for (int k : {1, 4, 7})
      for (int acc : {0, k / 2, k}) {
        a_seq->reset();
        b_seq->reset();
        e->step(*a_seq, toks.data(), P, scratch.data(), false);
        e->step(*a_seq, toks.data() + P, k + 1, scratch.data(), true);
        e->truncate(*a_seq, P + acc + 1);
        e->step(*b_seq, toks.data(), P + acc + 1, scratch.data(), false);
        e->step(*a_seq, next.data(), 3, la.data(), true);
        e->step(*b_seq, next.data(), 3, lb.data(), true);
        ASSERT_EQ(la, lb) << "model: P " << P << ", k " << k << ", accepted " << acc;
        // The drafter: P rows, k more (its chain), back to P + acc, then the same rows.
        std::vector<float> hid((P + k + 3) * per);
        for (size_t i = 0; i < hid.size(); ++i) hid[i] = std::sin(0.37f * static_cast<float>(i % 977));
        a_seq->draft->reset();
        b_seq->draft->reset();
        DraftRows r{a_seq->draft.get(), toks.data(), hid.data(), P};
        d.forward({&r, 1}, nullptr, nullptr);
        r = {a_seq->draft.get(), toks.data() + P, hid.data() + P * per, k};
        d.forward({&r, 1}, nullptr, nullptr);
        d.truncate(*a_seq->draft, P + acc);
        r = {b_seq->draft.get(), toks.data(), hid.data(), P + acc};
        d.forward({&r, 1}, nullptr, nullptr);
        std::vector<float> da(V), db(V);
        r = {a_seq->draft.get(), next.data(), hid.data() + (P + acc) * per, 3};
        d.forward({&r, 1}, da.data(), nullptr);
        r = {b_seq->draft.get(), next.data(), hid.data() + (P + acc) * per, 3};
        d.forward({&r, 1}, db.data(), nullptr);
        ASSERT_EQ(da, db) << "drafter: P " << P << ", k " << k << ", accepted " << acc;
      }
}

// The distribution of the second generated token (the first that a verify step produces) over
// many seeds, with and without drafting: a two-sample chi-square.
TEST(SpecDecode, SampledOutputKeepsTheDistribution) {
  auto e = mtp_engine();
  const std::vector<int32_t> prompt = prompt_of(6, 5);
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 6;
  const int runs = 800;
  std::vector<std::vector<int32_t>> prompts(runs, prompt);
  std::vector<SamplingParams> sp(runs, p);
  for (int i = 0; i < runs; ++i) sp[static_cast<size_t>(i)].seed = 1000 + static_cast<uint64_t>(i);
  SchedulerStats st;
  // (3 tokens: the verify step after the first token may draft one; no drafts past max_tokens)
  const auto plain = test::run_all(*e, options(0), prompts, 3, sp, &st);
  const auto spec = test::run_all(*e, options(2), prompts, 3, sp, &st);
  EXPECT_GT(st.drafted_tokens, runs / 2);
  ASSERT_NO_FATAL_FAILURE(test::expect_same_token_distribution(plain, spec, 1));  // the second token
  // Per-request seeds stay reproducible with drafting.
  const auto again = test::run_all(*e, options(2), std::vector<std::vector<int32_t>>(prompts.begin(), prompts.begin() + 40), 6,
                                   std::vector<SamplingParams>(sp.begin(), sp.begin() + 40), &st);
  const auto once = test::run_all(*e, options(2), std::vector<std::vector<int32_t>>(prompts.begin(), prompts.begin() + 40), 6,
                                  std::vector<SamplingParams>(sp.begin(), sp.begin() + 40), &st);
  for (size_t i = 0; i < again.size(); ++i) EXPECT_EQ(again[i].tokens, once[i].tokens) << i;
}

// The drafter on the last shard of a layer split (cpu,cpu, pipelined micro-batches), and a
// state pool so small that drafting requests are preempted mid-run and recompute: still plain
// greedy's tokens.
TEST(SpecDecode, GreedyEqualsPlainOverASplitAndUnderPreemption) {
  auto e = mtp_engine();
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(13, 1), prompt_of(21, 2), prompt_of(9, 3), prompt_of(17, 4)};
  const std::vector<SamplingParams> sp(4, greedy());
  const auto plain = test::run_all(*e, options(0), prompts, 40, sp);
  EngineOptions so = mtp_options(4);
  so.devices = {"cpu", "cpu"};
  so.layer_split = {2, 2};
  so.pipeline_micro_batches = 2;
  Engine split(make_synthetic_source(mtp_model()), so);
  ASSERT_NE(split.drafter(), nullptr);
  const auto got = test::run_all(split, options(3), prompts, 40, sp);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, plain[i].tokens) << "split, request " << i;
  // 14 compressed pages of 8 positions for four requests of 6-8 pages each.
  EngineOptions po = mtp_options(4);
  {
    const StateLayout& L = e->state_layout(0);
    po.state_memory = 4 * L.slot_bytes + L.swa_blocks * L.swa_page_bytes + 14 * L.cmp_page_bytes;
  }
  Engine small(make_synthetic_source(mtp_model()), po);
  SchedulerStats st;
  const auto pre = test::run_all(small, options(4), prompts, 40, sp, &st);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(pre[i].tokens, plain[i].tokens) << "preempted, request " << i;
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GT(st.drafted_tokens, 0);
}

// A prompt restored from the prefix cache: the drafter starts where the restored state ends
// (it has no rows before it), and the output is still plain greedy's.
TEST(SpecDecode, GreedyEqualsPlainFromThePrefixCache) {
  auto e = mtp_engine();
  const std::vector<int32_t> first = prompt_of(19, 6);
  std::vector<int32_t> second = first;
  for (int i = 0; i < 7; ++i) second.push_back(static_cast<int32_t>(40 + i));
  const auto plain = test::run_all(*e, options(0), {second}, 20, {greedy()});
  PrefixCache cache(*e, PrefixCacheOptions{});
  SchedulerOptions o = options(3);
  o.cache = &cache;
  Scheduler s(*e, o);
  test::generate(s, first, 5, greedy()).get();  // leaves snapshots of `first` in the cache
  const auto got = test::generate(s, second, 20, greedy()).get();
  EXPECT_EQ(got.tokens, plain[0].tokens);
  EXPECT_GT(s.stats().cached_prompt_tokens, 0);
  EXPECT_GT(s.stats().drafted_tokens, 0);
}

TEST(SpecDecode, BadDraftMaxIsRefused) {
  auto e = mtp_engine();
  for (int k : {-1, 17, 1000000}) {
    try {
      Scheduler s(*e, options(k));
      ADD_FAILURE() << "--draft-max " << k << " accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("--draft-max"), std::string::npos) << err.what();
    }
  }
}

}  // namespace
}  // namespace hs
