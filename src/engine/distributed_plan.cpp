#include "engine/distributed_plan.h"

#include <algorithm>

#include "engine/distributed_wire.h"
#include "util/error.h"

namespace hs::dist {

namespace {

constexpr int64_t kMaxPad = 1 << 20;

void check(const StepPlan& p) {
  auto ids_ok = [](const std::vector<int64_t>& v, const char* what) {
    for (int64_t id : v) HS_CHECK(id >= 0, "step plan: ", what, " of sequence ", id);
  };
  ids_ok(p.releases, "a release");
  ids_ok(p.resets, "a reset");
  for (const auto& f : p.forks)
    HS_CHECK(f.src >= 0 && f.dst >= 0 && f.upto >= 0 && f.src != f.dst, "step plan: fork of sequence ", f.src, " into ",
             f.dst, " up to ", f.upto);
  for (const auto& t : p.truncates)
    HS_CHECK(t.seq_id >= 0 && t.n_past >= 0, "step plan: truncate of sequence ", t.seq_id, " to ", t.n_past);
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
  HS_CHECK(p.pad >= 0 && p.pad <= kMaxPad, "step plan: ", p.pad, " padding rows");
  const int64_t most = std::max<int64_t>(1, static_cast<int64_t>(p.items.size()));
  HS_CHECK(p.micro_batches >= 1 && p.micro_batches <= most, "step plan: ", p.micro_batches,
           " micro-batches for ", p.items.size(), " items");
}

}  // namespace

std::string encode_step_plan(const StepPlan& p) {
  check(p);
  std::vector<uint8_t> b;
  for (size_t n : {p.releases.size(), p.resets.size(), p.forks.size(), p.truncates.size(), p.items.size(),
                   p.tokens.size()})
    wire::put(b, n, 4);
  wire::put(b, static_cast<uint64_t>(p.pad), 8);
  wire::put(b, static_cast<uint32_t>(p.micro_batches), 4);
  for (int64_t id : p.releases) wire::put(b, static_cast<uint64_t>(id), 8);
  for (int64_t id : p.resets) wire::put(b, static_cast<uint64_t>(id), 8);
  for (const auto& f : p.forks)
    for (int64_t v : {f.src, f.dst, f.upto}) wire::put(b, static_cast<uint64_t>(v), 8);
  for (const auto& t : p.truncates)
    for (int64_t v : {t.seq_id, t.n_past}) wire::put(b, static_cast<uint64_t>(v), 8);
  for (const auto& it : p.items) {
    for (int64_t v : {it.seq_id, it.position, it.n}) wire::put(b, static_cast<uint64_t>(v), 8);
    wire::put(b, it.flags, 4);
  }
  for (int32_t t : p.tokens) wire::put(b, static_cast<uint32_t>(t), 4);
  return std::string(b.begin(), b.end());
}

StepPlan decode_step_plan(const std::string& payload) {
  wire::Reader r{payload, "step plan"};
  size_t count[6];
  for (size_t& c : count) c = r.num(4);
  StepPlan p;
  p.pad = r.i64();
  p.micro_batches = static_cast<int32_t>(r.num(4));
  // Each count must fit in what is left before anything is allocated for it.
  const size_t bytes = count[0] * 8 + count[1] * 8 + count[2] * 24 + count[3] * 16 + count[4] * 28 + count[5] * 4;
  HS_CHECK(std::all_of(count, count + 6, [&](size_t c) { return c <= payload.size(); }) && bytes == r.left(),
           "control message: a step plan's counts need ", bytes, " bytes, its payload has ", r.left());
  for (size_t i = 0; i < count[0]; ++i) p.releases.push_back(r.i64());
  for (size_t i = 0; i < count[1]; ++i) p.resets.push_back(r.i64());
  for (size_t i = 0; i < count[2]; ++i) {
    StepPlan::Fork f;
    f.src = r.i64();
    f.dst = r.i64();
    f.upto = r.i64();
    p.forks.push_back(f);
  }
  for (size_t i = 0; i < count[3]; ++i) {
    StepPlan::Truncate t;
    t.seq_id = r.i64();
    t.n_past = r.i64();
    p.truncates.push_back(t);
  }
  for (size_t i = 0; i < count[4]; ++i) {
    StepPlan::Item it;
    it.seq_id = r.i64();
    it.position = r.i64();
    it.n = r.i64();
    it.flags = static_cast<uint32_t>(r.num(4));
    p.items.push_back(it);
  }
  for (size_t i = 0; i < count[5]; ++i) p.tokens.push_back(static_cast<int32_t>(r.num(4)));
  r.done();
  check(p);
  return p;
}

}  // namespace hs::dist
