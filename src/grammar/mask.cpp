#include "grammar/mask.h"

#include <algorithm>
#include <chrono>

namespace hs::grammar {

namespace {

// Walks `trie` from the stacks tops[0, n) (arena frames below them). For each trie node, the
// stacks after its bytes are the parent's stepped by its byte; `visit(node index, live, flags,
// depth)` decides what its tokens are and returns whether to descend when nothing is live.
template <typename Visit>
void walk(const Grammar& g, std::vector<Frame>& arena, std::vector<Top> start, const TokenTrie& trie, Visit&& visit) {
  struct Level {
    size_t begin, end, arena;
  };
  std::vector<Level> lv(1);
  std::vector<Top> buf = std::move(start);
  lv[0] = {0, buf.size(), arena.size()};
  for (size_t i = 0; i < trie.size();) {
    const size_t d = trie.depth[i];
    if (lv.size() <= d) lv.resize(d + 1);
    const Level par = lv[d - 1];
    buf.resize(par.end);
    arena.resize(par.arena);
    uint8_t flags = 0;
    const size_t begin = buf.size();
    if (par.end - par.begin == 1) {  // the common case, without the general step's work
      const Top t = buf[par.begin];
      const int32_t next = g.next(t.node, trie.byte[i]);
      if (next >= 0 && g.nodes[static_cast<size_t>(next)].simple) {
        buf.push_back({next, t.parent});
      } else if (next >= 0) {
        close_at(g, arena, next, t.parent, buf, flags);
        dedupe(arena, buf, begin);
      }
    } else if (par.end > par.begin) {
      step(g, arena, buf, par.begin, par.end, trie.byte[i], buf, flags);
    }
    lv[d] = {begin, buf.size(), arena.size()};
    const bool live = buf.size() > begin;
    if (!visit(i, live, flags, d) && !live) {
      i = trie.end[i];
      continue;
    }
    ++i;
  }
}

void set_tokens(const TokenTrie& t, size_t node, TokenBits& bits) {
  for (uint32_t k = t.tok_begin[node]; k < t.tok_begin[node + 1]; ++k) set_bit(bits, t.tokens[k]);
}

}  // namespace

MaskCache::MaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const Vocabulary> v)
    : g_(std::move(g)), v_(std::move(v)) {}

uint64_t MaskCache::key(int32_t node) const {
  const ChainTag& tag = g_->tags[static_cast<size_t>(node)];
  if (tag.chain < 0) return static_cast<uint64_t>(node);
  const Grammar::Chain& c = g_->chains[static_cast<size_t>(tag.chain)];
  const int64_t L = static_cast<int64_t>(v_->max_token_bytes());
  const int64_t pos = tag.pos;
  uint64_t cls = static_cast<uint64_t>(pos);
  if (pos + L < c.min) cls = 0xFFFFF;                          // no token reaches min
  else if (pos >= c.min && pos + L <= c.max) cls = 0xFFFFE;    // no token reaches a bound
  return (uint64_t{1} << 63) | (static_cast<uint64_t>(tag.chain) << 40) | (static_cast<uint64_t>(tag.role) << 20) | cls;
}

std::shared_ptr<const MaskEntry> MaskCache::entry(int32_t node) {
  const uint64_t k = key(node);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = entries_.find(k); it != entries_.end()) return it->second;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const MaskEntry> e = build(node);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const size_t size = e->dense.size() * 8 + e->sparse.size() * 4 + e->rest.size() * 11 + e->rest.tokens.size() * 4;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.entries++;
  stats_.build_seconds += secs;
  if (bytes_ + size > kMaxBytes) {  // (entries in use live on: they are shared)
    entries_.clear();
    bytes_ = 0;
  }
  bytes_ += size;
  return entries_.emplace(k, std::move(e)).first->second;
}

MaskStats MaskCache::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

std::shared_ptr<MaskEntry> MaskCache::build(int32_t node) const {
  const TokenTrie& trie = v_->trie();
  std::vector<Frame> arena;
  std::vector<int32_t> accepted;
  std::vector<std::pair<std::string, int32_t>> rest;
  std::vector<size_t> escapes;  // depths on the current path where the rule ended
  walk(*g_, arena, {{node, kUnknownFrame}}, trie, [&](size_t i, bool live, uint8_t flags, size_t d) {
    while (!escapes.empty() && escapes.back() >= d) escapes.pop_back();
    const bool ended_here = flags & kEscaped;
    for (uint32_t k = trie.tok_begin[i]; k < trie.tok_begin[i + 1]; ++k) {
      const int32_t tok = trie.tokens[k];
      if (live || ended_here) {
        accepted.push_back(tok);
      } else {
        for (size_t e : escapes) rest.emplace_back(std::string(v_->bytes(tok).substr(e)), tok);
      }
    }
    if (ended_here) escapes.push_back(d);
    return !escapes.empty();
  });
  auto e = std::make_shared<MaskEntry>();
  if (accepted.size() * 32 > static_cast<size_t>(v_->size())) {
    e->dense.assign((static_cast<size_t>(v_->size()) + 63) / 64, 0);
    for (int32_t t : accepted) set_bit(e->dense, t);
  } else {
    e->sparse = std::move(accepted);
  }
  e->rest = TokenTrie::build(std::move(rest));
  return e;
}

void compute_mask(Matcher& m, MaskCache& cache, const std::vector<int32_t>& specials, TokenBits& bits) {
  const Grammar& g = m.grammar();
  const Vocabulary& v = cache.vocab();
  bits.assign((static_cast<size_t>(v.size()) + 63) / 64, 0);
  std::vector<Frame>& arena = m.arena();
  const size_t committed = m.arena_size();
  for (const Top& top : m.tops()) {
    const auto e = cache.entry(top.node);
    if (!e->dense.empty()) {
      for (size_t w = 0; w < bits.size(); ++w) bits[w] |= e->dense[w];
    } else {
      for (int32_t t : e->sparse) set_bit(bits, t);
    }
    if (e->rest.size() == 0) continue;
    // What the caller of the top's rule accepts after it ends, walked over the left-over bytes.
    std::vector<Top> cont;
    uint8_t flags = 0;
    arena.resize(committed);
    if (top.parent == kRootFrame) {
      flags = kAccepted;
    } else {
      const Frame f = arena[static_cast<size_t>(top.parent)];
      close_at(g, arena, f.node, f.parent, cont, flags);
      dedupe(arena, cont, 0);
    }
    if (cont.empty()) continue;  // the caller ends too: only whole-value tokens, already in
    walk(g, arena, std::move(cont), e->rest, [&](size_t i, bool live, uint8_t fl, size_t) {
      if (live || (fl & kAccepted)) set_tokens(e->rest, i, bits);
      return false;
    });
  }
  arena.resize(committed);
  for (int32_t id : specials) {
    Matcher copy = m;
    if (copy.feed(v.bytes(id))) set_bit(bits, id);
  }
  if (m.complete() && v.eos() >= 0) set_bit(bits, v.eos());
}

void brute_force_mask(const Matcher& m, const Vocabulary& v, const std::vector<int32_t>& specials, TokenBits& bits) {
  bits.assign((static_cast<size_t>(v.size()) + 63) / 64, 0);
  const TokenTrie& t = v.trie();
  for (int32_t id : t.tokens) {
    Matcher copy = m;
    if (copy.feed(v.bytes(id))) set_bit(bits, id);
  }
  for (int32_t id : specials) {
    Matcher copy = m;
    if (copy.feed(v.bytes(id))) set_bit(bits, id);
  }
  if (m.complete() && v.eos() >= 0) set_bit(bits, v.eos());
}

}  // namespace hs::grammar
