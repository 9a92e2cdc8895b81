#include "grammar/automaton.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "util/error.h"

namespace hs::grammar {

namespace {

constexpr uint32_t kSurrogateLo = 0xD800, kSurrogateHi = 0xDFFF;

// Epsilon closure with a reusable mark array (one pass per call, no allocation per state).
class Closer {
 public:
  explicit Closer(const Automaton& a) : a_(a), mark_(a.size(), 0) {}
  // Sorts `set` and adds every state reachable by epsilon moves.
  void close(std::vector<int32_t>& set) {
    ++gen_;
    std::vector<int32_t> todo;
    std::vector<int32_t> out;
    for (int32_t s : set) push(s, todo, out);
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      for (int32_t t : a_.states[static_cast<size_t>(s)].eps) push(t, todo, out);
    }
    std::sort(out.begin(), out.end());
    set.swap(out);
  }

 private:
  void push(int32_t s, std::vector<int32_t>& todo, std::vector<int32_t>& out) {
    if (mark_[static_cast<size_t>(s)] == gen_) return;
    mark_[static_cast<size_t>(s)] = gen_;
    todo.push_back(s);
    out.push_back(s);
  }
  const Automaton& a_;
  std::vector<uint32_t> mark_;
  uint32_t gen_ = 0;
};

struct VecHash {
  size_t operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

}  // namespace

bool Automaton::empty() const {
  std::vector<char> seen(size(), 0);
  std::vector<int32_t> todo{start};
  seen[static_cast<size_t>(start)] = 1;
  while (!todo.empty()) {
    const State& s = states[static_cast<size_t>(todo.back())];
    todo.pop_back();
    if (s.accept) return false;
    auto visit = [&](int32_t t) {
      if (!seen[static_cast<size_t>(t)]) {
        seen[static_cast<size_t>(t)] = 1;
        todo.push_back(t);
      }
    };
    for (const Edge& e : s.edges) visit(e.to);
    for (const Call& c : s.calls) visit(c.to);
    for (int32_t t : s.eps) visit(t);
  }
  return true;
}

RangeSet normalize(RangeSet r) {
  std::sort(r.begin(), r.end());
  RangeSet out;
  for (const auto& [lo, hi] : r) {
    if (lo > hi) continue;
    if (!out.empty() && uint64_t{lo} <= uint64_t{out.back().second} + 1) out.back().second = std::max(out.back().second, hi);
    else out.emplace_back(lo, hi);
  }
  return out;
}

RangeSet without_surrogates(const RangeSet& r) {
  RangeSet out;
  for (auto [lo, hi] : r) {
    hi = std::min(hi, kMaxCodePoint);
    if (lo > hi) continue;
    if (hi < kSurrogateLo || lo > kSurrogateHi) {
      out.emplace_back(lo, hi);
      continue;
    }
    if (lo < kSurrogateLo) out.emplace_back(lo, kSurrogateLo - 1);
    if (hi > kSurrogateHi) out.emplace_back(kSurrogateHi + 1, hi);
  }
  return out;
}

RangeSet any_char() { return {{0, kSurrogateLo - 1}, {kSurrogateHi + 1, kMaxCodePoint}}; }

RangeSet complement(const RangeSet& r) {
  const RangeSet n = normalize(r);
  RangeSet out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    if (hi >= kMaxCodePoint) {
      next = kMaxCodePoint + 1;
      break;
    }
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return without_surrogates(out);
}

int32_t add_literal(Automaton& a, int32_t from, std::string_view bytes) {
  int32_t s = from;
  for (unsigned char c : bytes) {
    const int32_t t = a.add();
    a.edge(s, c, c, t);
    s = t;
  }
  return s;
}

int32_t add_codepoints(Automaton& a, int32_t from, std::u32string_view cps) {
  int32_t s = from;
  for (char32_t c : cps) {
    const int32_t t = a.add();
    a.edge(s, static_cast<uint32_t>(c), static_cast<uint32_t>(c), t);
    s = t;
  }
  return s;
}

int32_t add_class(Automaton& a, int32_t from, const RangeSet& set) {
  const int32_t t = a.add();
  for (const auto& [lo, hi] : set) a.edge(from, lo, hi, t);
  return t;
}

int32_t embed(Automaton& dst, const Automaton& src, int32_t from) {
  const int32_t base = static_cast<int32_t>(dst.size());
  const int32_t end = base + static_cast<int32_t>(src.size());
  dst.states.resize(dst.size() + src.size() + 1);
  for (size_t i = 0; i < src.size(); ++i) {
    const Automaton::State& s = src.states[i];
    Automaton::State& d = dst.states[static_cast<size_t>(base) + i];
    for (const auto& e : s.edges) d.edges.push_back({e.lo, e.hi, e.to + base});
    for (const auto& c : s.calls) d.calls.push_back({c.rule, c.to + base});
    for (int32_t t : s.eps) d.eps.push_back(t + base);
    if (s.accept) d.eps.push_back(end);
  }
  dst.eps(from, src.start + base);
  return end;
}

Automaton determinize(const Automaton& a, size_t max_states, std::string_view what) {
  Closer closer(a);
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
  std::vector<std::vector<int32_t>> sets;
  Automaton d;
  d.states.clear();
  auto intern = [&](std::vector<int32_t> set) -> int32_t {
    closer.close(set);
    if (auto it = ids.find(set); it != ids.end()) return it->second;
    HS_CHECK(sets.size() < max_states, what, " is too complex: its automaton passes ", max_states, " states");
    const int32_t id = d.add();
    ids.emplace(set, id);
    sets.push_back(std::move(set));
    return id;
  };
  d.start = intern({a.start});
  std::vector<uint32_t> pts;
  std::vector<std::vector<int32_t>> buckets;
  for (size_t i = 0; i < sets.size(); ++i) {
    const std::vector<int32_t> set = sets[i];
    bool accept = false;
    pts.clear();
    for (int32_t s : set) {
      const auto& st = a.states[static_cast<size_t>(s)];
      accept = accept || st.accept;
      for (const auto& e : st.edges) {
        pts.push_back(e.lo);
        if (e.hi != std::numeric_limits<uint32_t>::max()) pts.push_back(e.hi + 1);
      }
    }
    std::sort(pts.begin(), pts.end());
    pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
    buckets.assign(pts.size(), {});
    for (int32_t s : set) {
      for (const auto& e : a.states[static_cast<size_t>(s)].edges) {
        const size_t k0 = static_cast<size_t>(std::lower_bound(pts.begin(), pts.end(), e.lo) - pts.begin());
        const size_t k1 = e.hi == std::numeric_limits<uint32_t>::max()
                              ? pts.size()
                              : static_cast<size_t>(std::lower_bound(pts.begin(), pts.end(), e.hi + 1) - pts.begin());
        for (size_t k = k0; k < k1; ++k) buckets[k].push_back(e.to);
      }
    }
    for (size_t k = 0; k < pts.size(); ++k) {
      if (buckets[k].empty()) continue;
      const uint32_t lo = pts[k];
      const uint32_t hi = k + 1 < pts.size() ? pts[k + 1] - 1 : std::numeric_limits<uint32_t>::max();
      const int32_t t = intern(std::move(buckets[k]));
      auto& edges = d.states[i].edges;
      if (!edges.empty() && edges.back().to == t && edges.back().hi + 1 == lo) edges.back().hi = hi;
      else edges.push_back({lo, hi, t});
    }
    std::map<int32_t, std::vector<int32_t>> calls;
    for (int32_t s : set)
      for (const auto& c : a.states[static_cast<size_t>(s)].calls) calls[c.rule].push_back(c.to);
    for (auto& [rule, targets] : calls) {
      const int32_t t = intern(std::move(targets));
      d.states[i].calls.push_back({rule, t});
    }
    d.states[i].accept = accept;
  }
  return d;
}

Automaton intersect(const Automaton& a, const Automaton& b, size_t max_states, std::string_view what) {
  std::unordered_map<uint64_t, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> pairs;
  Automaton p;
  p.states.clear();
  auto intern = [&](int32_t x, int32_t y) -> int32_t {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(x)) << 32) | static_cast<uint32_t>(y);
    if (auto it = ids.find(key); it != ids.end()) return it->second;
    HS_CHECK(pairs.size() < max_states, what, " is too complex: its automaton passes ", max_states, " states");
    const int32_t id = p.add();
    ids.emplace(key, id);
    pairs.emplace_back(x, y);
    return id;
  };
  p.start = intern(a.start, b.start);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto [x, y] = pairs[i];
    const auto& sa = a.states[static_cast<size_t>(x)];
    const auto& sb = b.states[static_cast<size_t>(y)];
    p.states[i].accept = sa.accept && sb.accept;
    for (const auto& ea : sa.edges)
      for (const auto& eb : sb.edges) {
        const uint32_t lo = std::max(ea.lo, eb.lo), hi = std::min(ea.hi, eb.hi);
        if (lo > hi) continue;
        const int32_t t = intern(ea.to, eb.to);
        p.states[i].edges.push_back({lo, hi, t});
      }
  }
  return trim(p);
}

Automaton trim(const Automaton& a) {
  const size_t n = a.size();
  std::vector<char> fwd(n, 0), bwd(n, 0);
  std::vector<std::vector<int32_t>> rev(n);
  std::vector<int32_t> todo{a.start};
  fwd[static_cast<size_t>(a.start)] = 1;
  while (!todo.empty()) {
    const int32_t s = todo.back();
    todo.pop_back();
    auto visit = [&](int32_t t) {
      rev[static_cast<size_t>(t)].push_back(s);
      if (!fwd[static_cast<size_t>(t)]) {
        fwd[static_cast<size_t>(t)] = 1;
        todo.push_back(t);
      }
    };
    for (const auto& e : a.states[static_cast<size_t>(s)].edges) visit(e.to);
    for (int32_t t : a.states[static_cast<size_t>(s)].eps) visit(t);
  }
  for (size_t s = 0; s < n; ++s)
    if (fwd[s] && a.states[s].accept) {
      bwd[s] = 1;
      todo.push_back(static_cast<int32_t>(s));
    }
  while (!todo.empty()) {
    const int32_t s = todo.back();
    todo.pop_back();
    for (int32_t r : rev[static_cast<size_t>(s)])
      if (!bwd[static_cast<size_t>(r)]) {
        bwd[static_cast<size_t>(r)] = 1;
        todo.push_back(r);
      }
  }
  Automaton out;
  if (!bwd[static_cast<size_t>(a.start)]) return out;  // accepts nothing
  out.states.clear();
  std::vector<int32_t> id(n, -1);
  auto map = [&](int32_t s) {
    if (id[static_cast<size_t>(s)] < 0) id[static_cast<size_t>(s)] = out.add();
    return id[static_cast<size_t>(s)];
  };
  out.start = map(a.start);
  for (size_t s = 0; s < n; ++s) {
    if (!fwd[s] || !bwd[s]) continue;
    const int32_t d = map(static_cast<int32_t>(s));
    out.states[static_cast<size_t>(d)].accept = a.states[s].accept;
    for (const auto& e : a.states[s].edges)
      if (bwd[static_cast<size_t>(e.to)]) {
        const int32_t t = map(e.to);
        out.states[static_cast<size_t>(d)].edges.push_back({e.lo, e.hi, t});
      }
    for (int32_t t : a.states[s].eps)
      if (bwd[static_cast<size_t>(t)]) {
        const int32_t u = map(t);
        out.states[static_cast<size_t>(d)].eps.push_back(u);
      }
  }
  return out;
}

// Strings without `t` anywhere (a KMP automaton over code points).
Automaton not_containing(std::u32string_view tv) {
  const std::u32string t(tv);
  Automaton a;
  const size_t m = t.size();
  a.states.clear();
  for (size_t k = 0; k < m; ++k) a.accept(a.add());
  std::vector<uint32_t> distinct(t.begin(), t.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  RangeSet others;
  for (uint32_t d : distinct) others.emplace_back(d, d);
  others = complement(others);
  for (size_t k = 0; k < m; ++k) {
    for (uint32_t d : distinct) {
      // The longest prefix of t that is a suffix of t[0..k) + d.
      std::u32string s = t.substr(0, k) + static_cast<char32_t>(d);
      size_t next = std::min(s.size(), m);
      while (next > 0 && s.compare(s.size() - next, next, t, 0, next) != 0) --next;
      if (next < m) a.edge(static_cast<int32_t>(k), d, d, static_cast<int32_t>(next));
    }
    for (const auto& [lo, hi] : others) a.edge(static_cast<int32_t>(k), lo, hi, 0);
  }
  return a;
}

bool accepts(const Automaton& dfa, std::u32string_view symbols) {
  int32_t s = dfa.start;
  for (char32_t c : symbols) {
    int32_t next = -1;
    for (const auto& e : dfa.states[static_cast<size_t>(s)].edges)
      if (e.lo <= static_cast<uint32_t>(c) && static_cast<uint32_t>(c) <= e.hi) {
        next = e.to;
        break;
      }
    if (next < 0) return false;
    s = next;
  }
  return dfa.states[static_cast<size_t>(s)].accept;
}

}  // namespace hs::grammar
