// Speculative sampling (engine/speculative.h): sampling_probs is the distribution pick_token
// draws from; verify_drafts's output has the target's distribution whatever the draft's (chi-square
// over many seeded draws on small vocabularies); one-hot p and q (greedy) accept exactly the
// drafts equal to the target's argmax and draw nothing; the adaptive draft length stops drafting
// when drafts fail and resumes when they work.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "engine/speculative.h"

namespace hs {
namespace {

// Pearson's chi-square of counts against probabilities (categories with p = 0 must have no count).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n, int* df) {
  double x = 0;
  *df = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0 but was drawn";
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    x += (static_cast<double>(counts[i]) - e) * (static_cast<double>(counts[i]) - e) / e;
    ++*df;
  }
  return x;
}

// The 0.999 quantile of chi-square for df degrees of freedom (Wilson-Hilferty): a fixed-seed test
// that fails only on a real difference.
double chi_square_limit(int df) {
  const double z = 3.09, k = df;
  const double t = 1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k));
  return k * t * t * t;
}

std::vector<float> normalised(std::vector<float> w) {
  double s = 0;
  for (float x : w) s += x;
  for (float& x : w) x = static_cast<float>(x / s);
  return w;
}

TEST(Speculative, SamplingProbsIsWhatPickTokenDraws) {
  const std::vector<float> logits = {1.0f, 2.5f, -0.5f, 2.5f, 0.3f, 1.7f, -3.0f, 0.9f, 2.0f, -1.0f};
  const int64_t V = static_cast<int64_t>(logits.size());
  std::vector<SamplingParams> cases(5);
  cases[0].temperature = 1.0f;
  cases[1].temperature = 0.7f, cases[1].top_k = 4;
  cases[2].temperature = 1.3f, cases[2].top_p = 0.8f;
  cases[3].temperature = 0.9f, cases[3].min_p = 0.2f;
  cases[4].temperature = 1.1f, cases[4].top_k = 6, cases[4].top_p = 0.9f, cases[4].min_p = 0.05f;
  std::mt19937_64 rng(11);
  std::vector<int32_t> idx;
  for (const SamplingParams& p : cases) {
    std::vector<float> probs;
    sampling_probs(logits.data(), V, p, probs);
    double total = 0;
    for (float x : probs) total += x;
    EXPECT_NEAR(total, 1.0, 1e-6);
    const int64_t n = 40000;
    std::vector<int64_t> counts(static_cast<size_t>(V), 0);
    for (int64_t i = 0; i < n; ++i)
      ++counts[static_cast<size_t>(pick_token(logits.data(), V, p, static_cast<float>(rng() >> 40) * 0x1p-24f, idx))];
    int df = 0;
    const double x = chi_square(counts, std::vector<double>(probs.begin(), probs.end()), n, &df);
    EXPECT_LT(x, chi_square_limit(df)) << "temperature " << p.temperature << " top_k " << p.top_k;
  }
  SamplingParams greedy;
  greedy.temperature = 0;
  std::vector<float> probs;
  sampling_probs(logits.data(), V, greedy, probs);
  EXPECT_EQ(probs[1], 1.0f);  // the first of the two maxima, as pick_token
  EXPECT_EQ(probs[3], 0.0f);
}

// One verify step's first token, over many seeded draws: drafts from q (k of them, each from its
// own q_i), targets p_i; the first emitted token must be distributed as p_0 and the step's tokens
// after an accepted prefix as the target's too (the second emitted token, when there is one,
// as p_1).
TEST(Speculative, RejectionSamplingKeepsTheTargetDistribution) {
  const int64_t V = 6;
  const std::vector<std::vector<float>> p = {normalised({5, 1, 0, 2, 3, 1}), normalised({1, 1, 4, 0, 2, 2}),
                                             normalised({2, 0, 1, 3, 1, 1}), normalised({1, 2, 3, 4, 5, 6})};
  const std::vector<std::vector<float>> q = {normalised({1, 4, 1, 1, 0, 1}), normalised({3, 1, 1, 1, 1, 1}),
                                             normalised({0, 1, 1, 1, 1, 4}), normalised({1, 1, 1, 1, 1, 1})};
  for (int k = 1; k <= 3; ++k) {
    std::vector<float> target, draft;
    for (int i = 0; i <= k; ++i) target.insert(target.end(), p[static_cast<size_t>(i)].begin(), p[static_cast<size_t>(i)].end());
    for (int i = 0; i < k; ++i) draft.insert(draft.end(), q[static_cast<size_t>(i)].begin(), q[static_cast<size_t>(i)].end());
    std::mt19937_64 rng(1000 + static_cast<uint64_t>(k));
    auto u = [&] { return static_cast<float>(rng() >> 40) * 0x1p-24f; };
    auto sample = [&](const std::vector<float>& w) {
      float x = u(), c = 0;
      for (int64_t i = 0; i < V; ++i)
        if ((c += w[static_cast<size_t>(i)]) > x) return static_cast<int32_t>(i);
      return static_cast<int32_t>(V - 1);
    };
    const int64_t n = 30000;
    std::vector<int64_t> first(static_cast<size_t>(V), 0), second(static_cast<size_t>(V), 0);
    int64_t seconds = 0, accepted = 0;
    for (int64_t t = 0; t < n; ++t) {
      std::vector<int32_t> d;
      for (int i = 0; i < k; ++i) d.push_back(sample(q[static_cast<size_t>(i)]));
      const DraftVerdict v = verify_drafts(d, target.data(), draft.data(), V, u);
      ASSERT_GE(v.accepted, 0);
      ASSERT_LE(v.accepted, k);
      accepted += v.accepted;
      std::vector<int32_t> out(d.begin(), d.begin() + v.accepted);
      out.push_back(v.next);
      ++first[static_cast<size_t>(out[0])];
      if (out.size() >= 2) {  // given the first token accepted; p_1 does not depend on it here
        ++second[static_cast<size_t>(out[1])];
        ++seconds;
      }
    }
    int df = 0;
    double x = chi_square(first, std::vector<double>(p[0].begin(), p[0].end()), n, &df);
    EXPECT_LT(x, chi_square_limit(df)) << "k = " << k << ": first token";
    x = chi_square(second, std::vector<double>(p[1].begin(), p[1].end()), seconds, &df);
    EXPECT_LT(x, chi_square_limit(df)) << "k = " << k << ": second token";
    EXPECT_GT(accepted, 0);
  }
}

TEST(Speculative, OneHotDistributionsAreGreedyAndDrawNothing) {
  const int64_t V = 5;
  auto one_hot = [&](int32_t t) {
    std::vector<float> v(static_cast<size_t>(V), 0.0f);
    v[static_cast<size_t>(t)] = 1.0f;
    return v;
  };
  const std::vector<int32_t> argmax = {3, 1, 4, 0};  // the target's greedy tokens at 4 rows
  std::vector<float> target;
  for (int32_t t : argmax) {
    auto r = one_hot(t);
    target.insert(target.end(), r.begin(), r.end());
  }
  auto no_draw = []() -> float {
    ADD_FAILURE() << "a greedy verify drew a random number";
    return 0.0f;
  };
  for (const auto& [drafts, accepted, next] : std::vector<std::tuple<std::vector<int32_t>, int, int32_t>>{
           {{3, 1, 4}, 3, 0}, {{3, 1, 2}, 2, 4}, {{2, 1, 4}, 0, 3}, {{3, 0, 4}, 1, 1}, {{3}, 1, 1}}) {
    std::vector<float> q;
    for (int32_t d : drafts) {
      auto r = one_hot(d);
      q.insert(q.end(), r.begin(), r.end());
    }
    const DraftVerdict v = verify_drafts(drafts, target.data(), q.data(), V, no_draw);
    EXPECT_EQ(v.accepted, accepted);
    EXPECT_EQ(v.next, next);
  }
}

TEST(Speculative, DraftLengthAdapts) {
  DraftLength len(5);
  int64_t step = 0;
  EXPECT_GE(len.next(step++), 1);
  // Drafts that always fail: after the first few, only probes, further and further apart.
  int drafted = 0, steps_with_drafts = 0;
  for (int i = 0; i < 1000; ++i, ++step) {
    const int k = len.next(step);
    if (k > 0) len.observe(k, 0);
    if (i >= 200) {
      drafted += k;
      steps_with_drafts += k > 0;
      if (k > 0) EXPECT_EQ(step % DraftLength::kProbeMax, 0) << "a probe off the shared longest grid at step " << step;
    }
  }
  EXPECT_LE(steps_with_drafts, 800 / DraftLength::kProbeMax + 1);  // one probe every kProbeMax steps
  EXPECT_GE(steps_with_drafts, 800 / DraftLength::kProbeMax - 1);
  EXPECT_EQ(drafted, steps_with_drafts);       // of one draft each
  // Backed off, the drafter is fed only on the few steps before each probe (the scheduler asks
  // wants_rows() after next(), for the step about to run): every probe has such steps right
  // before it, and most steps have none.
  int fed = 0, probes = 0, fed_before_probe = 0;
  bool last_fed = false;
  for (int i = 0; i < 640; ++i, ++step) {
    const int k = len.next(step);
    if (k > 0) {
      ++probes;
      fed_before_probe += last_fed;
      len.observe(k, 0);
    }
    last_fed = len.wants_rows(step);
    fed += last_fed && k == 0;
  }
  EXPECT_GE(probes, 640 / DraftLength::kProbeMax - 1);
  EXPECT_EQ(fed_before_probe, probes);
  EXPECT_LE(fed, probes * 4);
  // Drafts that are always accepted: a probe that works brings the full length back.
  for (int i = 0; i < 200; ++i, ++step) {
    const int k = len.next(step);
    if (k > 0) len.observe(k, k);
  }
  EXPECT_EQ(len.next(step), 5);
}

// A request can start backed off further (Scheduler: where recent greedy requests ended): it probes
// on that interval's grid from the start; the interval is kept within kProbeMin..kProbeMax.
TEST(Speculative, DraftLengthStartsAtAGivenProbeInterval) {
  EXPECT_EQ(DraftLength(3, 0.0, 1).probe_every(), DraftLength::kProbeMin);
  EXPECT_EQ(DraftLength(3, 0.0, 1000).probe_every(), DraftLength::kProbeMax);
  const int every = DraftLength::kProbeMax;
  DraftLength len(3, 0.0, every);
  int probes = 0;
  for (int64_t step = 1; step < 10 * every; ++step) {
    const int k = len.next(step);
    if (k > 0) {
      EXPECT_EQ(step % every, 0) << "a probe off the longest grid at step " << step;
      ++probes;
      len.observe(k, 0);
    }
  }
  EXPECT_EQ(probes, 9);
  // One accepted probe brings the interval back to 8.
  len.next(10 * every);
  len.observe(1, 1);
  EXPECT_EQ(len.probe_every(), DraftLength::kProbeMin);
}

// Sequences that back off at different times probe in the same steps (the intervals are powers
// of two on the shared step count), so a batch pays for one step of verify rows, not one per
// sequence.
TEST(Speculative, DraftLengthProbesAlign) {
  std::vector<DraftLength> lens;
  for (int i = 0; i < 8; ++i) lens.emplace_back(3, 0.3 + 0.05 * i);  // each backs off after its own number of failures
  int steps_with_probe = 0, probes = 0;
  for (int64_t step = 0; step < 2000; ++step) {
    int here = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      if (step < static_cast<int64_t>(7 * i)) continue;  // staggered joins
      const int k = lens[i].next(step);
      if (k > 0) lens[i].observe(k, 0), ++here;
    }
    if (step >= 500) probes += here, steps_with_probe += here > 0;
  }
  EXPECT_GE(probes, 8 * (1500 / DraftLength::kProbeMax - 1));
  EXPECT_LE(steps_with_probe, 1500 / DraftLength::kProbeMax + 1);  // every sequence probes in the same steps
}

}  // namespace
}  // namespace hs
