// Wall-clock helpers shared by the `bench` parts (cmd_bench, bench_cache, bench_draft).
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace hs::cli {

using BenchClock = std::chrono::steady_clock;

inline double seconds_since(BenchClock::time_point t0) {
  return std::chrono::duration<double>(BenchClock::now() - t0).count();
}

// The upper median (the repetitions are few; no averaging of the middle two).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace hs::cli
