#include "engine/distributed_plan.h"

#include <algorithm>

#include "engine/distributed_wire.h"
#include "util/error.h"

namespace hs::dist {

const char* state_op_name(StateOp::Kind k) {
  switch (k) {
    case StateOp::Release: return "release";
    case StateOp::Reset: return "reset";
    case StateOp::Fork: return "fork";
    case StateOp::Truncate: return "truncate";
  }
  return "?";
}

namespace {

void check(const StepPlan& p) {
  for (const StateOp& o : p.ops) {
    HS_CHECK(o.kind >= StateOp::Release && o.kind <= StateOp::Truncate, "step plan: unknown state operation ",
             static_cast<uint32_t>(o.kind));
    HS_CHECK(o.seq >= 0 && o.arg >= 0 && o.upto >= 0, "step plan: ", state_op_name(o.kind), " of sequence ", o.seq,
             " (", o.arg, ", ", o.upto, ")");
    HS_CHECK(o.kind != StateOp::Fork || o.seq != o.arg, "step plan: fork of sequence ", o.seq, " into ", o.arg);
  }
  int64_t rows = 0;
  std::vector<int64_t> ids;
  for (const auto& it : p.items) {
    HS_CHECK(it.seq_id >= 0 && it.position >= 0 && it.n >= 1, "step plan: item of sequence ", it.seq_id, " at ",
             it.position, " with ", it.n, " rows");
    rows += it.n;
    ids.push_back(it.seq_id);
  }
  std::sort(ids.begin(), ids.end());
  const auto dup = std::adjacent_find(ids.begin(), ids.end());
  HS_CHECK(dup == ids.end(), "step plan: sequence ", dup == ids.end() ? 0 : *dup, " appears twice among the items");
  HS_CHECK(static_cast<int64_t>(p.tokens.size()) == rows, "step plan: ", p.tokens.size(), " tokens for items of ",
           rows, " rows");
  const int64_t most = std::max<int64_t>(1, static_cast<int64_t>(p.items.size()));
  HS_CHECK(p.micro_batches >= 1 && p.micro_batches <= most, "step plan: ", p.micro_batches,
           " micro-batches for ", p.items.size(), " items");
}

}  // namespace

std::string encode_step_plan(const StepPlan& p) {
  check(p);
  std::vector<uint8_t> b;
  for (size_t n : {p.ops.size(), p.items.size(), p.tokens.size()}) wire::put(b, n, 4);
  wire::put(b, static_cast<uint32_t>(p.micro_batches), 4);
  for (const StateOp& o : p.ops) {
    wire::put(b, o.kind, 4);
    for (int64_t v : {o.seq, o.arg, o.upto}) wire::put(b, static_cast<uint64_t>(v), 8);
  }
  for (const auto& it : p.items) {
    for (int64_t v : {it.seq_id, it.position, it.n}) wire::put(b, static_cast<uint64_t>(v), 8);
    wire::put(b, it.flags, 4);
  }
  for (int32_t t : p.tokens) wire::put(b, static_cast<uint32_t>(t), 4);
  return std::string(b.begin(), b.end());
}

StepPlan decode_step_plan(const std::string& payload) {
  wire::Reader r{payload, "step plan"};
  size_t count[3];
  for (size_t& c : count) c = r.num(4);
  StepPlan p;
  p.micro_batches = static_cast<int32_t>(r.num(4));
  // Each count must fit in what is left before anything is allocated for it.
  const size_t bytes = count[0] * 28 + count[1] * 28 + count[2] * 4;
  HS_CHECK(std::all_of(count, count + 3, [&](size_t c) { return c <= payload.size(); }) && bytes == r.left(),
           "control message: a step plan's counts need ", bytes, " bytes, its payload has ", r.left());
  for (size_t i = 0; i < count[0]; ++i) {
    StateOp o;
    o.kind = static_cast<StateOp::Kind>(r.num(4));
    o.seq = r.i64();
    o.arg = r.i64();
    o.upto = r.i64();
    p.ops.push_back(o);
  }
  for (size_t i = 0; i < count[1]; ++i) {
    StepPlan::Item it;
    it.seq_id = r.i64();
    it.position = r.i64();
    it.n = r.i64();
    it.flags = static_cast<uint32_t>(r.num(4));
    p.items.push_back(it);
  }
  for (size_t i = 0; i < count[2]; ++i) p.tokens.push_back(static_cast<int32_t>(r.num(4)));
  r.done();
  check(p);
  return p;
}

}  // namespace hs::dist
