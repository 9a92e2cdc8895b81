// One engine step as rank 0 plans it, for every rank of a multi-process pipeline (issue 19;
// control protocol 2, Op::StepPlan; docs/multi-gpu.md). In order: the state operations (releases,
// resets, forks, truncates: what the scheduler did to sequences since the last step), then the
// items' rows, cut into micro-batches that flow through the ranks' shards.
//
// Payload, little-endian: u32 counts of releases, resets, forks, truncates, items, tokens; i64
// pad; i32 micro_batches; then the releases and resets (i64 seq ids), the forks (i64 src, dst,
// upto), the truncates (i64 seq id, n_past), the items (i64 seq id, position, n; u32 flags) and
// the tokens (i32).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hs::dist {

inline constexpr uint32_t kItemOutput = 2;  // StepPlan::Item: the head runs for it (kFlagAllPositions: every row)

struct StepPlan {
  struct Item {
    int64_t seq_id = 0;
    int64_t position = 0;  // the first row's (a rank checks it against the sequence's n_past)
    int64_t n = 0;         // rows
    uint32_t flags = 0;    // kFlagAllPositions, kItemOutput
    bool operator==(const Item&) const = default;
  };
  struct Fork {
    int64_t src = 0, dst = 0, upto = 0;  // Engine::fork: dst shares src's first `upto` positions
    bool operator==(const Fork&) const = default;
  };
  struct Truncate {
    int64_t seq_id = 0, n_past = 0;  // Engine::truncate (a rejected draft tail)
    bool operator==(const Truncate&) const = default;
  };
  std::vector<int64_t> releases, resets;
  std::vector<Fork> forks;
  std::vector<Truncate> truncates;
  std::vector<Item> items;
  std::vector<int32_t> tokens;  // the items' tokens, concatenated (sum of their n)
  int64_t pad = 0;              // padding rows after the items (a decode step rounded up to a graph's rows)
  int32_t micro_batches = 1;
  bool operator==(const StepPlan&) const = default;
};

// Both throw hs::Error naming the field on a plan that is not consistent: an item of no rows, a
// sequence twice among the items, a negative id or position, tokens that do not add up to the
// items' rows, micro-batches outside 1..max(1, items), a truncated payload or stray bytes.
std::string encode_step_plan(const StepPlan& p);
StepPlan decode_step_plan(const std::string& payload);

}  // namespace hs::dist
