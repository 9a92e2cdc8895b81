// The step plan of control protocol 2 (engine/distributed_plan.h, issue 19): what rank 0 sends
// every rank for one engine step. It round-trips through a control message bit for bit, and a
// plan that is inconsistent or cut short is refused naming what is wrong, on either side.
#include <gtest/gtest.h>

#include <string>

#include "engine/distributed_control.h"
#include "engine/distributed_plan.h"
#include "error_util.h"
#include "util/error.h"

namespace hs::dist {
namespace {

StepPlan full_plan() {
  StepPlan p;
  p.releases = {4};
  p.resets = {7, 1ll << 40};
  p.forks = {{3, 9, 128}};
  p.truncates = {{3, 517}, {5, 0}};
  p.items = {{3, 517, 4, kItemOutput | kFlagAllPositions}, {5, 0, 2, 0}, {9, 128, 1, kItemOutput}};
  p.tokens = {11, -1 & 0x7fffffff, 0, 129279, 5, 6, 7};
  p.pad = 1;
  p.micro_batches = 2;
  return p;
}

TEST(StepPlan, RoundTripsThroughAControlMessage) {
  for (const StepPlan& p : {full_plan(), StepPlan{}}) {  // (an empty plan: only state operations, or none)
    Message m;
    m.op = Op::StepPlan;
    m.payload = encode_step_plan(p);
    const std::vector<uint8_t> b = encode(m);
    const Message back = decode(b.data(), b.size());
    EXPECT_EQ(back.op, Op::StepPlan);
    EXPECT_STREQ(op_name(back.op), "step_plan");
    EXPECT_EQ(decode_step_plan(back.payload), p);
  }
}

TEST(StepPlan, ACutOrPaddedPayloadIsRefused) {
  const std::string b = encode_step_plan(full_plan());
  for (size_t n = 0; n < b.size(); ++n)
    EXPECT_ERROR(decode_step_plan(b.substr(0, n)), "control message:") << "cut to " << n << " bytes";
  EXPECT_ERROR(decode_step_plan(b + std::string(1, '\0')), "control message:");
  std::string huge = b;
  huge[20] = '\xff';  // the token count's high byte: far more than the payload holds
  huge[23] = '\x7f';
  EXPECT_ERROR(decode_step_plan(huge), "counts need");
}

TEST(StepPlan, AnInconsistentPlanIsRefusedOnBothSides) {
  struct Case {
    const char* needle;
    void (*mutate)(StepPlan&);
  };
  const Case cases[] = {
      {"tokens for items of 7 rows", [](StepPlan& p) { p.tokens.pop_back(); }},
      {"appears twice", [](StepPlan& p) { p.items[2].seq_id = 3; }},
      {"with 0 rows", [](StepPlan& p) { p.items[1].n = 0; }},
      {"item of sequence -2", [](StepPlan& p) { p.items[1].seq_id = -2; }},
      {"3 micro-batches for 2 items", [](StepPlan& p) { p.items.pop_back(); p.tokens.pop_back(); p.micro_batches = 3; }},
      {"0 micro-batches", [](StepPlan& p) { p.micro_batches = 0; }},
      {"-1 padding rows", [](StepPlan& p) { p.pad = -1; }},
      {"fork of sequence 3 into 3", [](StepPlan& p) { p.forks[0].dst = 3; }},
      {"truncate of sequence 5 to -4", [](StepPlan& p) { p.truncates[1].n_past = -4; }},
      {"a reset of sequence -1", [](StepPlan& p) { p.resets[0] = -1; }},
  };
  const std::string good = encode_step_plan(full_plan());
  for (const Case& c : cases) {
    StepPlan p = full_plan();
    c.mutate(p);
    EXPECT_ERROR(encode_step_plan(p), c.needle);
    // The receiving side checks the same (a sender of another build): bytes made by hand.
    std::string b = good;
    if (std::string(c.needle) == "0 micro-batches") {
      b[32] = 0;  // micro_batches: after six u32 counts and the i64 pad
      EXPECT_ERROR(decode_step_plan(b), c.needle);
    }
  }
}

}  // namespace
}  // namespace hs::dist
