// One engine step as rank 0 plans it, for every rank of a multi-process pipeline (issue 19;
// control protocol 3, Op::StepPlan; docs/multi-gpu.md). In order: the state operations (what the
// scheduler did to sequences since the last step: releases, resets, forks, truncates, in the
// order they happened), then the items' rows, cut into micro-batches that flow through the
// ranks' shards. A rank makes a sequence it has not seen when it first appears (an item at
// position 0, or a fork's destination); a release or reset of a sequence it never saw is a no-op.
//
// Payload, little-endian: u32 counts of state ops, items, tokens; u32 micro_batches; then the
// ops (u32 kind, i64 seq, i64 arg, i64 upto), the items (i64 seq id, position, n; u32 flags) and
// the tokens (i32): 16 + 28 x ops + 28 x items + 4 x tokens bytes.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hs::dist {

inline constexpr uint32_t kFlagAllPositions = 1;  // StepPlan::Item: logits of every position, not only the last
inline constexpr uint32_t kItemOutput = 2;  // StepPlan::Item: the head runs for it (kFlagAllPositions: every row)

struct StateOp {
  enum Kind : uint32_t { Release = 1, Reset = 2, Fork = 3, Truncate = 4 };
  Kind kind = Release;
  int64_t seq = 0;   // the sequence (a fork's source)
  int64_t arg = 0;   // Fork: the new sequence; Truncate: the n_past it keeps
  int64_t upto = 0;  // Fork: the positions the new sequence shares
  bool operator==(const StateOp&) const = default;
};
const char* state_op_name(StateOp::Kind k);

struct StepPlan {
  struct Item {
    int64_t seq_id = 0;
    int64_t position = 0;  // the first row's (a rank checks it against the sequence's n_past)
    int64_t n = 0;         // rows
    uint32_t flags = 0;    // kFlagAllPositions, kItemOutput
    bool operator==(const Item&) const = default;
  };
  std::vector<StateOp> ops;
  std::vector<Item> items;
  std::vector<int32_t> tokens;  // the items' tokens, concatenated (sum of their n)
  int32_t micro_batches = 1;
  bool operator==(const StepPlan&) const = default;
};

// Both throw hs::Error naming the field on a plan that is not consistent: an unknown op kind,
// a negative id or position, a fork into itself, an item of no rows, a sequence twice among the
// items, tokens that do not add up to the items' rows, micro-batches outside 1..max(1, items),
// a truncated payload or stray bytes.
std::string encode_step_plan(const StepPlan& p);
StepPlan decode_step_plan(const std::string& payload);

}  // namespace hs::dist
