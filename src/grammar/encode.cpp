#include "grammar/encode.h"

#include <algorithm>

#include "util/error.h"

namespace hs::grammar {

namespace {

std::vector<uint8_t> utf8(uint32_t c) {
  if (c < 0x80) return {static_cast<uint8_t>(c)};
  if (c < 0x800) return {static_cast<uint8_t>(0xC0 | (c >> 6)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
  if (c < 0x10000)
    return {static_cast<uint8_t>(0xE0 | (c >> 12)), static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)),
            static_cast<uint8_t>(0x80 | (c & 0x3F))};
  return {static_cast<uint8_t>(0xF0 | (c >> 18)), static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F)),
          static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F)), static_cast<uint8_t>(0x80 | (c & 0x3F))};
}

// [lo, hi] all of one encoded length n: split until every byte position is an independent range.
void same_length(uint32_t lo, uint32_t hi, int n, std::vector<ByteSeq>& out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        same_length(lo, lo | m, n, out);
        same_length((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        same_length(lo, (hi & ~m) - 1, n, out);
        same_length(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  const auto a = utf8(lo), b = utf8(hi);
  ByteSeq seq;
  for (size_t k = 0; k < a.size(); ++k) seq.emplace_back(a[k], b[k]);
  out.push_back(std::move(seq));
}

// The escape json.dumps writes for a character that cannot appear raw in a JSON string.
std::string json_escape(uint32_t c) {
  switch (c) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: {
      static constexpr char kHex[] = "0123456789abcdef";
      return std::string("\\u00") + kHex[(c >> 4) & 15] + kHex[c & 15];
    }
  }
}

bool needs_escape(uint32_t c) { return c < 0x20 || c == '"' || c == '\\'; }

// Adds the paths for the code points [lo, hi] from byte state a to byte state b.
void add_range(Automaton& bytes, int32_t a, int32_t b, uint32_t lo, uint32_t hi, Encoding enc) {
  auto path = [&](const ByteSeq& seq) {
    int32_t s = a;
    for (size_t k = 0; k < seq.size(); ++k) {
      const int32_t t = k + 1 == seq.size() ? b : bytes.add();
      bytes.edge(s, seq[k].first, seq[k].second, t);
      s = t;
    }
  };
  if (enc == Encoding::json) {
    // The escaped characters one by one, the rest as UTF-8 runs between them.
    uint32_t run = lo;
    for (uint32_t c = lo; c <= std::min(hi, uint32_t{0x5C}); ++c) {
      if (!needs_escape(c)) continue;
      if (run < c)
        for (const auto& seq : utf8_sequences(run, c - 1)) path(seq);
      const std::string esc = json_escape(c);
      const int32_t end = add_literal(bytes, a, esc.substr(0, esc.size() - 1));
      const auto last = static_cast<uint8_t>(esc.back());
      bytes.edge(end, last, last, b);
      run = c + 1;
    }
    if (run <= hi)
      for (const auto& seq : utf8_sequences(run, hi)) path(seq);
    return;
  }
  for (const auto& seq : utf8_sequences(lo, hi)) path(seq);
}

}  // namespace

std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi) {
  std::vector<ByteSeq> out;
  hi = std::min(hi, kMaxCodePoint);
  if (lo > hi) return out;
  if (lo <= 0xDFFF && hi >= 0xD800) {
    auto a = lo < 0xD800 ? utf8_sequences(lo, 0xD7FF) : std::vector<ByteSeq>{};
    auto b = hi > 0xDFFF ? utf8_sequences(0xE000, hi) : std::vector<ByteSeq>{};
    a.insert(a.end(), b.begin(), b.end());
    return a;
  }
  static constexpr uint32_t kLimit[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  uint32_t lower = 0;
  for (int n = 1; n <= 4; ++n) {
    const uint32_t upper = kLimit[n - 1];
    if (lo <= upper && hi >= lower) same_length(std::max(lo, lower), std::min(hi, upper), n, out);
    lower = upper + 1;
  }
  return out;
}

int32_t add_encoded(Automaton& bytes, int32_t from, const Automaton& chars, Encoding enc) {
  std::vector<int32_t> m(chars.size());
  for (auto& s : m) s = bytes.add();
  const int32_t end = bytes.add();
  bytes.eps(from, m[static_cast<size_t>(chars.start)]);
  for (size_t q = 0; q < chars.size(); ++q) {
    const auto& st = chars.states[q];
    HS_CHECK(st.eps.empty() && st.calls.empty(), "grammar: a character automaton must be epsilon-free");
    for (const auto& e : st.edges) add_range(bytes, m[q], m[static_cast<size_t>(e.to)], e.lo, e.hi, enc);
    if (st.accept) bytes.eps(m[q], end);
  }
  return end;
}

TaggedAutomaton length_chain(const RangeSet& chars, int32_t min, int32_t max, Encoding enc, int32_t chain,
                             std::string_view open, std::string_view close) {
  // One character's bytes, determinized: its start is the position's boundary node.
  Automaton one;
  {
    Automaton c;
    const int32_t t = add_class(c, c.start, chars);
    c.accept(t);
    Automaton b;
    b.accept(add_encoded(b, b.start, c, enc));
    one = determinize(b, 1000, "a string position");
  }
  int32_t fin = -1;
  for (size_t s = 0; s < one.size(); ++s)
    if (one.states[s].accept) {
      HS_CHECK(fin < 0 && one.states[s].edges.empty(), "grammar: a character must end in one state");
      fin = static_cast<int32_t>(s);
    }
  HS_CHECK(fin >= 0 && one.start != fin, "grammar: an empty character set");

  TaggedAutomaton out;
  Automaton& a = out.a;
  const int32_t after_open = add_literal(a, a.start, open);
  out.tags.resize(a.size());
  auto tag = [&](int32_t s, int32_t role, int32_t pos) {
    if (out.tags.size() < a.size()) out.tags.resize(a.size());
    out.tags[static_cast<size_t>(s)] = ChainTag{chain, role, pos};
  };
  // Boundary nodes B[0..max]; the template's inner states copied per position.
  std::vector<int32_t> boundary(static_cast<size_t>(max) + 1);
  boundary[0] = after_open;
  for (int32_t i = 1; i <= max; ++i) boundary[static_cast<size_t>(i)] = a.add();
  for (int32_t i = 0; i <= max; ++i) tag(boundary[static_cast<size_t>(i)], one.start, i);
  std::vector<int32_t> copy(one.size());
  for (int32_t i = 0; i < max; ++i) {
    for (size_t s = 0; s < one.size(); ++s) {
      if (static_cast<int32_t>(s) == one.start) copy[s] = boundary[static_cast<size_t>(i)];
      else if (static_cast<int32_t>(s) == fin) copy[s] = boundary[static_cast<size_t>(i) + 1];
      else {
        copy[s] = a.add();
        tag(copy[s], static_cast<int32_t>(s), i);
      }
    }
    for (size_t s = 0; s < one.size(); ++s)
      for (const auto& e : one.states[s].edges) a.edge(copy[s], e.lo, e.hi, copy[static_cast<size_t>(e.to)]);
  }
  // The close path, shared by every boundary at or past min.
  HS_CHECK(!close.empty(), "grammar: a length chain needs a closing text");
  const int32_t close_1 = a.add();
  const auto c0 = static_cast<uint8_t>(close[0]);
  for (const auto& e : one.states[static_cast<size_t>(one.start)].edges)
    HS_CHECK(c0 < e.lo || c0 > e.hi, "grammar: the closing text of a string starts like one of its characters");
  for (int32_t i = min; i <= max; ++i) a.edge(boundary[static_cast<size_t>(i)], c0, c0, close_1);
  a.accept(add_literal(a, close_1, close.substr(1)));
  out.tags.resize(a.size());
  return out;
}

}  // namespace hs::grammar
