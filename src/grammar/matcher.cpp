#include "grammar/matcher.h"

#include <unordered_map>

namespace hs::grammar {

void close_at(const Grammar& g, std::vector<Frame>& arena, int32_t node, int32_t parent, std::vector<Top>& out,
              uint8_t& flags) {
  const Grammar::Node& nd = g.nodes[static_cast<size_t>(node)];
  if (nd.simple) {
    out.push_back({node, parent});
    return;
  }
  for (uint32_t i = nd.item_begin; i < nd.item_end; ++i) {
    const Grammar::Item& it = g.items[i];
    if (it.top == Grammar::kPop) {
      if (parent == kRootFrame) {
        flags |= kAccepted;
      } else if (parent == kUnknownFrame) {
        flags |= kEscaped;
      } else {
        const Frame f = arena[static_cast<size_t>(parent)];
        close_at(g, arena, f.node, f.parent, out, flags);
      }
      continue;
    }
    int32_t p = parent;
    for (uint32_t k = it.push_begin; k < it.push_end; ++k) {
      arena.push_back({g.pushes[k], p});
      p = static_cast<int32_t>(arena.size()) - 1;
    }
    out.push_back({it.top, p});
  }
}

namespace {

bool same_stack(const std::vector<Frame>& arena, int32_t a, int32_t b) {
  while (a != b) {
    if (a < 0 || b < 0) return false;
    const Frame& fa = arena[static_cast<size_t>(a)];
    const Frame& fb = arena[static_cast<size_t>(b)];
    if (fa.node != fb.node) return false;
    a = fa.parent;
    b = fb.parent;
  }
  return true;
}

}  // namespace

void dedupe(const std::vector<Frame>& arena, std::vector<Top>& out, size_t begin) {
  if (out.size() - begin < 2) return;
  size_t w = begin;
  for (size_t i = begin; i < out.size(); ++i) {
    bool dup = false;
    for (size_t j = begin; j < w && !dup; ++j)
      dup = out[j].node == out[i].node && same_stack(arena, out[j].parent, out[i].parent);
    if (!dup && w - begin < kMaxStacks) out[w++] = out[i];
  }
  out.resize(w);
}

void step(const Grammar& g, std::vector<Frame>& arena, const std::vector<Top>& tops, size_t begin, size_t end,
          uint8_t b, std::vector<Top>& out, uint8_t& flags) {
  const size_t first = out.size();
  for (size_t i = begin; i < end; ++i) {
    const Top t = tops[i];
    const int32_t next = g.next(t.node, b);
    if (next >= 0) close_at(g, arena, next, t.parent, out, flags);
  }
  dedupe(arena, out, first);
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  uint8_t flags = 0;
  close_at(*g_, arena_, g_->rule_start[static_cast<size_t>(g_->root)], kRootFrame, tops_, flags);
  dedupe(arena_, tops_, 0);
  accepted_ = flags & kAccepted;
  arena_size_ = arena_.size();
}

bool Matcher::feed(std::string_view bytes) {
  if (bytes.empty()) return true;
  std::vector<Top> cur = tops_, next;
  bool accepted = accepted_;
  arena_.resize(arena_size_);
  for (unsigned char b : bytes) {
    next.clear();
    uint8_t flags = 0;
    step(*g_, arena_, cur, 0, cur.size(), b, next, flags);
    accepted = flags & kAccepted;
    if (next.empty() && !accepted) {
      arena_.resize(arena_size_);
      return false;
    }
    cur.swap(next);
  }
  tops_ = std::move(cur);
  accepted_ = accepted;
  arena_size_ = arena_.size();
  if (arena_size_ > 2 * compacted_ + 4096) {
    compact();
    compacted_ = arena_size_;
  }
  return true;
}

// Copies the frames the stacks still use to the front of the arena (iteratively: a stack can
// be as deep as the output is nested).
void Matcher::compact() {
  std::vector<Frame> fresh;
  std::unordered_map<int32_t, int32_t> moved;
  std::vector<int32_t> chain;
  for (Top& t : tops_) {
    chain.clear();
    int32_t f = t.parent;
    while (f >= 0 && !moved.count(f)) {
      chain.push_back(f);
      f = arena_[static_cast<size_t>(f)].parent;
    }
    int32_t below = f < 0 ? f : moved[f];
    for (size_t k = chain.size(); k-- > 0;) {
      fresh.push_back({arena_[static_cast<size_t>(chain[k])].node, below});
      below = static_cast<int32_t>(fresh.size()) - 1;
      moved[chain[k]] = below;
    }
    t.parent = t.parent < 0 ? t.parent : moved[t.parent];
  }
  arena_ = std::move(fresh);
  arena_size_ = arena_.size();
}

bool grammar_accepts(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g);
  return m.feed(text) && m.complete();
}

}  // namespace hs::grammar
