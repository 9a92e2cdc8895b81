// The step plan of control protocol 3 (engine/distributed_plan.h, issue 19): what rank 0 sends
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
  // (in the order they happened: a fork before its source's release, a truncate after a fork)
  p.ops = {{StateOp::Fork, 3, 9, 128}, {StateOp::Release, 4, 0, 0}, {StateOp::Reset, 7, 0, 0},
           {StateOp::Reset, 1ll << 40, 0, 0}, {StateOp::Truncate, 3, 517, 0}, {StateOp::Truncate, 5, 0, 0}};
  p.items = {{3, 517, 4, kItemOutput | kFlagAllPositions}, {5, 0, 2, 0}, {9, 128, 1, kItemOutput}};
  p.tokens = {11, -1 & 0x7fffffff, 0, 129279, 5, 6, 7};
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
  huge[8] = '\xff';  // the token count's bytes: far more than the payload holds
  huge[11] = '\x7f';
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
      {"fork of sequence 3 into 3", [](StepPlan& p) { p.ops[0].arg = 3; }},
      {"truncate of sequence 5 (-4, 0)", [](StepPlan& p) { p.ops[5].arg = -4; }},
      {"reset of sequence -1", [](StepPlan& p) { p.ops[2].seq = -1; }},
      {"unknown state operation 9", [](StepPlan& p) { p.ops[1].kind = static_cast<StateOp::Kind>(9); }},
  };
  const std::string good = encode_step_plan(full_plan());
  for (const Case& c : cases) {
    StepPlan p = full_plan();
    c.mutate(p);
    EXPECT_ERROR(encode_step_plan(p), c.needle);
    // The receiving side checks the same (a sender of another build): bytes made by hand.
    std::string b = good;
    if (std::string(c.needle) == "0 micro-batches") {
      b[12] = 0;  // micro_batches: after three u32 counts
      EXPECT_ERROR(decode_step_plan(b), c.needle);
    }
    if (std::string(c.needle) == "unknown state operation 9") {
      b[16 + 28] = 9;  // the second op's kind
      EXPECT_ERROR(decode_step_plan(b), c.needle);
    }
  }
}

}  // namespace
}  // namespace hs::dist
