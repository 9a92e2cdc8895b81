#include "cli/bench_draft.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli/bench_timing.h"
#include "engine/dspark.h"
#include "engine/mtp.h"
#include "util/error.h"

namespace hs::cli {

nlohmann::ordered_json bench_draft(Engine& eng, int64_t depth, int64_t reps, bool synthetic) {
  MtpDrafter* d = eng.drafter();
  DsparkDrafter* dsp = eng.dspark();
  HS_CHECK(d || dsp, "bench --draft: the model has no drafter (--draft auto found no DSpark drafter or MTP block)");
  HS_CHECK(depth >= 1 && reps >= 1, "bench --draft: the depth and the repetitions must be positive");
  const ModelConfig& c = eng.config();
  const int64_t V = c.vocab_size, per = c.hc_mult * c.dim;
  std::mt19937_64 rng(41);
  std::vector<int32_t> t(static_cast<size_t>(depth + 8));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(V));
  std::fprintf(stderr, "  draft: verify steps at depth %lld...\n", static_cast<long long>(depth));
  auto seq = eng.new_sequence();
  std::vector<float> logits(static_cast<size_t>(8 * V)), hidden(static_cast<size_t>(8 * per));
  std::vector<float> taps(dsp ? static_cast<size_t>(8 * dsp->tap_width()) : 0);
  for (int64_t p = 0; p < depth; p += 512)
    eng.step(*seq, t.data() + p, std::min<int64_t>(512, depth - p), logits.data(), false);
  // A step of n rows at `depth` (the way the scheduler runs it), then the rollback to depth.
  // With the drafter's inputs as the scheduler asks for them (MTP: a verify step's HC states;
  // DSpark: every drafting step's taps), or none (plain decode without speculation).
  auto timed = [&](int64_t n, bool inputs) {
    std::vector<double> s;
    for (int64_t r = 0; r < reps + 2; ++r) {  // two warm-ups
      StepItem it{seq.get(), t.data() + depth, n, logits.data(), n > 1};
      if (inputs && d) it.hidden = hidden.data();
      if (inputs && dsp) it.taps = taps.data();
      const auto t0 = BenchClock::now();
      eng.step_batch({&it, 1});
      if (r >= 2) s.push_back(seconds_since(t0));
      eng.truncate(*seq, depth);
    }
    return median(s);
  };
  const double plain = timed(1, false);
  const int64_t warm = std::min<int64_t>(depth, c.window);
  // MTP: the drafter's pass for one drafted token (its block and the head), from a warm window;
  // DSpark: one block pass (fixed per verify step) and one draft's Markov + confidence step.
  double draft = 0, block = 0;
  nlohmann::ordered_json probe;  // DSpark: the drafter's share of a probe step
  if (d) {
    std::vector<float> h(static_cast<size_t>(warm * per));
    for (auto& x : h) x = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    DraftRows rows{seq->draft.get(), t.data(), h.data(), warm};
    d->forward({&rows, 1}, nullptr, nullptr);
    std::vector<double> ds;
    for (int64_t r = 0; r < reps + 2; ++r) {
      rows = {seq->draft.get(), t.data() + warm, h.data(), 1};
      const auto t0 = BenchClock::now();
      d->forward({&rows, 1}, logits.data(), hidden.data());
      if (r >= 2) ds.push_back(seconds_since(t0));
      d->truncate(*seq->draft, warm);
    }
    draft = median(ds);
    std::printf("speculative decoding (MTP) at depth %lld: plain decode step %.3f ms, drafter pass %.3f ms per drafted "
                "token\n", static_cast<long long>(depth), 1e3 * plain, 1e3 * draft);
    std::printf("speedup = L x plain / (verify(k) + k x drafter), L = tokens a verify step yields (1 .. k + 1)\n");
  } else {
    std::vector<float> tp(static_cast<size_t>(warm * dsp->tap_width()));
    for (auto& x : tp) x = std::normal_distribution<float>(0.0f, 1.0f)(rng);
    auto ctx = dsp->new_sequence();
    dsp->add_context(*ctx, 0, tp.data(), warm);
    std::vector<double> bs, ss;
    std::vector<float> lg(static_cast<size_t>(V));
    for (int64_t r = 0; r < reps + 2; ++r) {
      const auto t0 = BenchClock::now();
      const DsparkBlock b = dsp->draft_block(*ctx, t[0]);
      if (r >= 2) bs.push_back(seconds_since(t0));
      float conf = 0;
      const auto t1 = BenchClock::now();
      dsp->step(b, 0, t[0], lg.data(), &conf);
      if (r >= 2) ss.push_back(seconds_since(t1));
    }
    block = median(bs);
    draft = median(ss);
    std::printf("speculative decoding (DSpark, blocks of %d) at depth %lld: plain decode step %.3f ms (with taps %.3f "
                "ms), drafter block %.3f ms + %.3f ms per drafted token\n", dsp->block(), static_cast<long long>(depth),
                1e3 * plain, 1e3 * timed(1, true), 1e3 * block, 1e3 * draft);
    // What a probe step of kProbeSeqs backed-off requests adds (one drafter pass each: their context
    // rows, their blocks with one draft wanted, and with every draft).
    constexpr int kProbeSeqs = 8;
    std::vector<std::unique_ptr<DsparkSequence>> many;
    std::vector<const DsparkSequence*> cs;
    for (int i = 0; i < kProbeSeqs; ++i) {
      many.push_back(dsp->new_sequence());
      dsp->add_context(*many.back(), 0, tp.data(), warm);
      cs.push_back(many.back().get());
    }
    const std::vector<int32_t> anchors(kProbeSeqs, t[0]);
    const std::vector<int> one(kProbeSeqs, 1);
    std::vector<double> cx, b1, ball;
    for (int64_t r = 0; r < reps + 2; ++r) {
      std::vector<DsparkContextRows> rows;
      for (auto& q : many) rows.push_back({q.get(), q->next, tp.data(), 1});
      auto t0 = BenchClock::now();
      dsp->add_context(rows);
      if (r >= 2) cx.push_back(seconds_since(t0));
      t0 = BenchClock::now();
      dsp->draft_blocks(cs, anchors, one);
      if (r >= 2) b1.push_back(seconds_since(t0));
      t0 = BenchClock::now();
      dsp->draft_blocks(cs, anchors);
      if (r >= 2) ball.push_back(seconds_since(t0));
    }
    probe = {{"requests", kProbeSeqs}, {"context_row_ms", 1e3 * median(cx)}, {"blocks_one_draft_ms", 1e3 * median(b1)},
             {"blocks_all_drafts_ms", 1e3 * median(ball)}};
    std::printf("a probe step of %d requests: their context rows %.3f ms, their blocks in one pass %.3f ms (one "
                "draft each; %.3f ms with all %d)\n", kProbeSeqs, 1e3 * median(cx), 1e3 * median(b1),
                1e3 * median(ball), dsp->block());
    std::printf("speedup = L x plain / (verify(k) + block + k x draft), L = tokens a verify step yields (1 .. k + 1)\n");
  }
  std::printf("| k | verify ms | x plain | + drafts ms | L=1 | L=2 | L=3 | L=4 | L=5 | break-even L | break-even rate |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  nlohmann::ordered_json out = {{"drafter", d ? "mtp" : "dspark"}, {"depth", depth}, {"plain_step_ms", 1e3 * plain},
                                {"drafter_pass_ms", 1e3 * draft}, {"drafter_block_ms", 1e3 * block},
                                {"rows", nlohmann::ordered_json::array()}};
  if (!probe.is_null()) out["probe"] = probe;
  for (int k = 1; k <= 7; ++k) {
    const double verify = timed(k + 1, true), drafts = block + k * draft, cost = verify + drafts;
    std::printf("| %d | %.3f | %.2f | %.3f |", k, 1e3 * verify, verify / plain, 1e3 * drafts);
    for (int L = 1; L <= 5; ++L) {
      if (L <= k + 1) std::printf(" %.2f |", L * plain / cost);
      else std::printf(" - |");
    }
    // The acceptance rate a at which (1 - a^(k+1)) / (1 - a) tokens per step pay for the cost.
    const double even = cost / plain;
    double lo = 0, hi = 1;
    for (int i = 0; i < 60; ++i) {
      const double a = (lo + hi) / 2;
      double len = 0, pw = 1;
      for (int j = 0; j <= k; ++j, pw *= a) len += pw;
      (len < even ? lo : hi) = a;
    }
    if (even <= k + 1) std::printf(" %.2f | %.2f |\n", even, lo);
    else std::printf(" %.2f | never |\n", even);
    out["rows"].push_back({{"k", k}, {"verify_ms", 1e3 * verify}, {"ratio", verify / plain},
                           {"draft_ms", 1e3 * drafts}, {"break_even_length", even}});
  }
  if (synthetic)
    std::printf("(random weights: the drafter's tokens are almost never accepted, so a served synthetic model gains "
                "nothing; the table is the cost side, a real checkpoint's acceptance decides its L)\n");
  std::printf("\n");
  return out;
}

}  // namespace hs::cli
