// The engine's sequences and their state across the shards' pools: make, fork, truncate,
// snapshot and restore (the prefix cache), the page budget; and rank 0's log of what it did to
// its sequences, for the next step plan of a pipeline of processes (engine_ranks.cpp).
#include <algorithm>
#include <climits>
#include <utility>

#include "engine/dspark.h"
#include "engine/engine.h"
#include "engine/mtp.h"
#include "engine/rank_link.h"
#include "util/error.h"

namespace hs {

void SequenceLog::add(const dist::StateOp& op) {
  std::lock_guard<std::mutex> lk(mu);
  ops.push_back(op);
}

std::vector<dist::StateOp> SequenceLog::take() {
  std::lock_guard<std::mutex> lk(mu);
  return std::exchange(ops, {});
}

Sequence::~Sequence() {
  if (log) log->add({dist::StateOp::Release, id, 0, 0});
}

void Sequence::reset() {
  if (log) log->add({dist::StateOp::Reset, id, 0, 0});
  for (auto& s : shards) s->reset();
  if (draft) draft->reset();
  draft_offset = 0;
  if (dspark) dspark->reset();
}

std::unique_ptr<Sequence> Engine::new_sequence() const {
  auto s = std::make_unique<Sequence>();
  for (const auto& sh : shards_) s->shards.push_back(sh->new_sequence());
  if (log_) {
    s->id = next_id_++;
    s->log = log_;
  }
  if (drafter_) s->draft = drafter_->new_sequence();
  if (dspark_) s->dspark = dspark_->new_sequence();
  return s;
}

std::unique_ptr<Sequence> Engine::fork(const Sequence& src, int64_t upto) const {
  HS_CHECK(src.shards.size() == shards_.size(), "fork: the sequence has ", src.shards.size(),
           " shard states, the engine ", shards_.size(), " shards");
  for (size_t s = 0; s < shards_.size(); ++s) shards_[s]->check_state(*src.shards[s], "fork: ");
  auto dst = new_sequence();
  // A shard that cannot fork changes nothing; the earlier shards' copies go with dst.
  for (size_t s = 0; s < shards_.size(); ++s) shards_[s]->pool().fork(*src.shards[s], upto, *dst->shards[s]);
  if (log_) log_->add({dist::StateOp::Fork, src.id, dst->id, upto});
  return dst;
}

void Engine::truncate(Sequence& seq, int64_t n) const {
  HS_CHECK(seq.shards.size() == shards_.size(), "truncate: the sequence has ", seq.shards.size(),
           " shard states, the engine ", shards_.size(), " shards");
  for (size_t s = 0; s < shards_.size(); ++s) {
    shards_[s]->check_state(*seq.shards[s], "truncate: ");
    const SequenceState& st = *seq.shards[s];
    HS_CHECK(n >= 0 && n <= st.n_past() && n >= st.high() - st.pool().layout().max_rollback && n >= st.floor(),
             "truncate to ", n,
             " tokens: shard ", s, " holds ", st.n_past(), " (furthest ", st.high(), ", rollback at most ",
             st.pool().layout().max_rollback, ")");
  }
  for (size_t s = 0; s < shards_.size(); ++s) shards_[s]->pool().truncate(*seq.shards[s], n);
  if (log_) log_->add({dist::StateOp::Truncate, seq.id, n, 0});
}

EngineSnapshot Engine::snapshot(const Sequence& seq) const {
  HS_CHECK(!link_, "snapshot: this engine is one rank of a multi-process pipeline; the other ranks' state cannot be "
           "snapshot (the prefix cache does not span ranks)");
  HS_CHECK(seq.shards.size() == shards_.size(), "snapshot: the sequence has ", seq.shards.size(),
           " shard states, the engine ", shards_.size(), " shards");
  EngineSnapshot snap;
  for (size_t s = 0; s < shards_.size(); ++s) {
    shards_[s]->check_state(*seq.shards[s], "snapshot: ");
    snap.shards.push_back(shards_[s]->pool().snapshot(*seq.shards[s]));
  }
  return snap;
}

bool Engine::restore(const EngineSnapshot& snap, Sequence& seq) const {
  HS_CHECK(!link_, "restore: this engine is one rank of a multi-process pipeline (the prefix cache does not span "
           "ranks)");
  HS_CHECK(snap.shards.size() == shards_.size() && seq.shards.size() == shards_.size(),
           "restore: a snapshot of ", snap.shards.size(), " shards into a sequence of ", seq.shards.size(),
           " on an engine of ", shards_.size());
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (shards_[s]->pool().restore(snap.shards[s], *seq.shards[s])) continue;
    for (size_t t = 0; t < s; ++t) shards_[t]->pool().release_pages(*seq.shards[t]);  // back to empty
    return false;
  }
  return true;
}

void Engine::release(EngineSnapshot& snap) const {
  for (size_t s = 0; s < snap.shards.size() && s < shards_.size(); ++s) shards_[s]->pool().release(snap.shards[s]);
  snap.shards.clear();
}

bool Engine::can_reserve(const Sequence& seq, int64_t n) const {
  for (size_t s = 0; s < shards_.size(); ++s) {
    const StatePool& p = shards_[s]->pool();
    const auto [c, w] = p.blocks_needed(*seq.shards.at(s), n);
    const StatePoolStats st = p.stats();
    if (c > st.cmp_total - st.cmp_used || w > st.swa_total - st.swa_used) return false;
    if (seq.shards[s]->n_past() + n > p.layout().max_context) return false;
  }
  return true;
}

int64_t Engine::pages_for(int64_t n_tokens) const {
  return shards_.empty() ? 0 : (n_tokens + shards_.front()->pool().layout().page - 1) / shards_.front()->pool().layout().page;
}

int64_t Engine::free_pages() const {
  int64_t f = INT64_MAX;
  for (const auto& sh : shards_) {
    const StatePoolStats st = sh->pool().stats();
    f = std::min(f, st.cmp_total - st.cmp_used);
  }
  return shards_.empty() ? 0 : f;
}

EngineStateStats Engine::state_stats() const {
  EngineStateStats t;
  t.token_capacity = INT64_MAX;
  for (const auto& sh : shards_) {
    const StatePoolStats st = sh->pool().stats();
    t.pages_total += st.cmp_total;
    t.pages_used += st.cmp_used;
    t.pages_shared += st.cmp_shared;
    t.swa_pages_total += st.swa_total;
    t.swa_pages_used += st.swa_used;
    t.slots_total = st.slots_total;
    t.slots_used = std::max(t.slots_used, st.slots_used);
    t.token_capacity = std::min(t.token_capacity, sh->pool().token_capacity());
    t.bytes_per_token += sh->pool().layout().cmp_page_bytes / sh->pool().layout().page;
  }
  if (shards_.empty()) t.token_capacity = 0;
  return t;
}


}  // namespace hs
