#include "grammar/regex.h"

#include <memory>
#include <vector>

#include "grammar/schema_error.h"

namespace hs::grammar {

std::u32string utf8_to_codepoints(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    HS_CHECK(n > 0 && i + static_cast<size_t>(n) <= s.size(), "invalid UTF-8 at byte ", i);
    uint32_t c = n == 1 ? b : n == 2 ? (b & 0x1F) : n == 3 ? (b & 0x0F) : (b & 0x07);
    for (int k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      HS_CHECK((cb & 0xC0) == 0x80, "invalid UTF-8 at byte ", i);
      c = (c << 6) | (cb & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    HS_CHECK(c >= kMin[n] && c <= kMaxCodePoint && (c < 0xD800 || c > 0xDFFF), "invalid UTF-8 at byte ", i);
    out.push_back(static_cast<char32_t>(c));
    i += static_cast<size_t>(n);
  }
  return out;
}

namespace {

constexpr size_t kMaxNfaStates = 60000;
constexpr size_t kMaxDfaStates = 20000;

struct Node {
  enum class Kind { cls, seq, alt, repeat, begin, end };
  Kind kind = Kind::seq;
  RangeSet set;                              // cls
  std::vector<std::unique_ptr<Node>> kids;   // seq, alt, repeat (one)
  int min = 0, max = 0;                      // repeat; max < 0: unbounded
};
using NodeP = std::unique_ptr<Node>;

NodeP make(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  return n;
}

RangeSet digit() { return {{'0', '9'}}; }
RangeSet word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
RangeSet space() {
  return {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

class Parser {
 public:
  Parser(std::string_view pattern) : src_(pattern) {
    try {
      p_ = utf8_to_codepoints(pattern);
    } catch (const Error& e) {
      throw SchemaError("", cat("the pattern is not valid UTF-8: ", e.what()));
    }
  }

  NodeP parse() {
    NodeP n = alternation();
    if (i_ < p_.size()) fail("unbalanced ')'");
    return n;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw SchemaError("", cat("pattern ", quoted(), ": ", why, " at character ", i_));
  }
  [[noreturn]] void unsupported(const std::string& what) const {
    throw SchemaError("", cat("pattern ", quoted(), " uses ", what, ", which structured output does not support"));
  }
  std::string quoted() const {
    std::string q(1, '\'');
    q.append(src_.substr(0, 200));
    q.push_back('\'');
    return q;
  }
  bool more() const { return i_ < p_.size(); }
  char32_t peek() const { return p_[i_]; }
  bool eat(char32_t c) {
    if (more() && p_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }

  NodeP alternation() {
    NodeP first = sequence();
    if (!more() || peek() != U'|') return first;
    NodeP alt = make(Node::Kind::alt);
    alt->kids.push_back(std::move(first));
    while (eat(U'|')) alt->kids.push_back(sequence());
    return alt;
  }

  NodeP sequence() {
    NodeP seq = make(Node::Kind::seq);
    while (more() && peek() != U'|' && peek() != U')') {
      NodeP atom = this->atom();
      seq->kids.push_back(quantified(std::move(atom)));
    }
    return seq;
  }

  // {n}, {n,}, {n,m} at i_ (just after '{'); false when it is not a quantifier (a literal '{').
  bool braces(int& lo, int& hi) {
    size_t j = i_;
    auto number = [&](int& v) {
      size_t k = j;
      long long x = 0;
      while (j < p_.size() && p_[j] >= U'0' && p_[j] <= U'9') {
        x = std::min<long long>(x * 10 + (p_[j] - U'0'), 1000000);
        ++j;
      }
      v = static_cast<int>(x);
      return j > k;
    };
    if (!number(lo)) return false;
    hi = lo;
    if (j < p_.size() && p_[j] == U',') {
      ++j;
      if (!number(hi)) hi = -1;
    }
    if (j >= p_.size() || p_[j] != U'}') return false;
    i_ = j + 1;
    return true;
  }

  NodeP quantified(NodeP atom) {
    for (;;) {
      int lo = 0, hi = 0;
      if (eat(U'*')) {
        lo = 0, hi = -1;
      } else if (eat(U'+')) {
        lo = 1, hi = -1;
      } else if (eat(U'?')) {
        lo = 0, hi = 1;
      } else if (more() && peek() == U'{') {
        const size_t save = i_++;
        if (!braces(lo, hi)) {
          i_ = save;  // not a quantifier: '{' is a literal (the next atom)
          return atom;
        }
      } else {
        return atom;
      }
      if (atom->kind == Node::Kind::begin || atom->kind == Node::Kind::end) fail("nothing to repeat");
      if (hi >= 0 && hi < lo) fail("numbers out of order in {} quantifier");
      eat(U'?');  // lazy: the same language
      NodeP r = make(Node::Kind::repeat);
      r->min = lo;
      r->max = hi;
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  NodeP cls(RangeSet s) {
    NodeP n = make(Node::Kind::cls);
    n->set = without_surrogates(normalize(std::move(s)));
    return n;
  }

  NodeP atom() {
    const char32_t c = p_[i_++];
    switch (c) {
      case U'^': return make(Node::Kind::begin);
      case U'$': return make(Node::Kind::end);
      case U'.': return cls(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case U'(': {
        if (eat(U'?')) {
          if (eat(U':')) {
          } else if (more() && (peek() == U'=' || peek() == U'!')) {
            unsupported(peek() == U'=' ? "a lookahead (?=...)" : "a negative lookahead (?!...)");
          } else if (eat(U'<')) {
            if (more() && (peek() == U'=' || peek() == U'!')) unsupported("a lookbehind (?<=...)");
            while (more() && peek() != U'>') ++i_;  // a named group
            if (!eat(U'>')) fail("unterminated group name");
          } else {
            fail("invalid group");
          }
        }
        NodeP inner = alternation();
        if (!eat(U')')) fail("missing ')'");
        return inner;
      }
      case U')': fail("unbalanced ')'");
      case U'[': return cls(class_body());
      case U'*':
      case U'+':
      case U'?': fail("nothing to repeat");
      case U'\\': return cls(escape(false));
      default: return cls({{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}});
    }
  }

  uint32_t hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!more()) fail("incomplete escape");
      const char32_t h = p_[i_++];
      int d = h >= U'0' && h <= U'9' ? int(h - U'0') : h >= U'a' && h <= U'f' ? int(h - U'a' + 10) : h >= U'A' && h <= U'F' ? int(h - U'A' + 10) : -1;
      if (d < 0) fail("bad hexadecimal escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a backslash: the class of one escape. In a class, \b is a backspace.
  RangeSet escape(bool in_class) {
    if (!more()) fail("trailing backslash");
    const char32_t c = p_[i_++];
    auto one = [](uint32_t v) { return RangeSet{{v, v}}; };
    switch (c) {
      case U'd': return digit();
      case U'D': return complement(digit());
      case U'w': return word();
      case U'W': return complement(word());
      case U's': return space();
      case U'S': return complement(space());
      case U'n': return one('\n');
      case U'r': return one('\r');
      case U't': return one('\t');
      case U'v': return one('\v');
      case U'f': return one('\f');
      case U'0':
        if (more() && peek() >= U'0' && peek() <= U'9') unsupported("an octal escape");
        return one(0);
      case U'x': return one(hex(2));
      case U'u': {
        if (eat(U'{')) {
          uint32_t v = 0;
          int n = 0;
          while (more() && peek() != U'}') {
            v = v * 16 + hex(1);
            if (++n > 6) fail("bad \\u{...} escape");
          }
          if (!eat(U'}') || n == 0 || v > kMaxCodePoint) fail("bad \\u{...} escape");
          return one(v);
        }
        const uint32_t v = hex(4);
        if (v >= 0xD800 && v <= 0xDFFF) unsupported("a surrogate escape \\uD800-\\uDFFF");
        return one(v);
      }
      case U'c': {
        if (!more() || !((peek() >= U'a' && peek() <= U'z') || (peek() >= U'A' && peek() <= U'Z'))) fail("bad \\c escape");
        return one(static_cast<uint32_t>(p_[i_++]) % 32);
      }
      case U'b':
        if (in_class) return one(8);
        unsupported("a word boundary \\b");
      case U'B': unsupported("a word boundary \\B");
      case U'p':
      case U'P': unsupported("a Unicode property escape \\p{...}");
      case U'k': unsupported("a named backreference \\k<...>");
      default:
        if (c >= U'1' && c <= U'9') unsupported("a backreference \\N");
        if ((c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z')) fail(cat("unknown escape \\", char(c)));
        return one(static_cast<uint32_t>(c));  // identity escape of a syntax character
    }
  }

  // After '[': the class up to and including ']'.
  RangeSet class_body() {
    const bool negate = eat(U'^');
    RangeSet set;
    while (more() && peek() != U']') {
      RangeSet a = class_atom();
      if (a.size() == 1 && a[0].first == a[0].second && more() && peek() == U'-' && i_ + 1 < p_.size() &&
          p_[i_ + 1] != U']') {
        ++i_;
        RangeSet b = class_atom();
        if (b.size() != 1 || b[0].first != b[0].second) fail("a class escape cannot end a range");
        if (b[0].first < a[0].first) fail("range out of order in character class");
        set.emplace_back(a[0].first, b[0].first);
      } else {
        set.insert(set.end(), a.begin(), a.end());
      }
    }
    if (!eat(U']')) fail("missing ']'");
    set = normalize(std::move(set));
    return negate ? complement(set) : set;
  }

  RangeSet class_atom() {
    const char32_t c = p_[i_++];
    if (c == U'\\') return escape(true);
    return {{static_cast<uint32_t>(c), static_cast<uint32_t>(c)}};
  }

  std::string_view src_;
  std::u32string p_;
  size_t i_ = 0;
};

// The pattern's NFA with its assertions as special epsilon moves.
struct RegexNfa {
  struct State {
    std::vector<Automaton::Edge> edges;
    std::vector<int32_t> eps, begin, end;
  };
  std::vector<State> s;
  int32_t add() {
    if (s.size() >= kMaxNfaStates) throw SchemaError("", "the pattern is too large (its automaton passes 60000 states)");
    s.emplace_back();
    return static_cast<int32_t>(s.size()) - 1;
  }
  int32_t build(const Node& n, int32_t from) {
    const int32_t in = add();
    s[static_cast<size_t>(from)].eps.push_back(in);
    switch (n.kind) {
      case Node::Kind::cls: {
        const int32_t t = add();
        for (const auto& [lo, hi] : n.set) s[static_cast<size_t>(in)].edges.push_back({lo, hi, t});
        return t;
      }
      case Node::Kind::seq: {
        int32_t cur = in;
        for (const auto& k : n.kids) cur = build(*k, cur);
        return cur;
      }
      case Node::Kind::alt: {
        const int32_t out = add();
        for (const auto& k : n.kids) s[static_cast<size_t>(build(*k, in))].eps.push_back(out);
        return out;
      }
      case Node::Kind::repeat: {
        int32_t cur = in;
        for (int k = 0; k < n.min; ++k) cur = build(*n.kids[0], cur);
        if (n.max < 0) {
          const int32_t loop = add();
          s[static_cast<size_t>(cur)].eps.push_back(loop);
          s[static_cast<size_t>(build(*n.kids[0], loop))].eps.push_back(loop);
          return loop;
        }
        for (int k = n.min; k < n.max; ++k) {
          const int32_t next = add();
          s[static_cast<size_t>(cur)].eps.push_back(next);
          s[static_cast<size_t>(build(*n.kids[0], cur))].eps.push_back(next);
          cur = next;
        }
        return cur;
      }
      case Node::Kind::begin:
      case Node::Kind::end: {
        const int32_t t = add();
        (n.kind == Node::Kind::begin ? s[static_cast<size_t>(in)].begin : s[static_cast<size_t>(in)].end).push_back(t);
        return t;
      }
    }
    return in;
  }
};

}  // namespace

Automaton compile_pattern(std::string_view pattern) {
  NodeP ast = Parser(pattern).parse();
  RegexNfa r;
  const int32_t start = r.add();
  const int32_t accept = r.build(*ast, start);
  // Search semantics: any text before and after the match; ^ holds before any character,
  // $ after the last. Phase 0: nothing consumed yet, 1: something consumed, 2: $ passed.
  const int32_t n = static_cast<int32_t>(r.s.size());
  const int32_t pre = n, post = n + 1;
  Automaton a;
  a.states.clear();
  std::vector<int32_t> id(static_cast<size_t>(n + 2) * 3, -1);
  std::vector<std::pair<int32_t, int>> todo;
  auto get = [&](int32_t q, int ph) {
    int32_t& slot = id[static_cast<size_t>(q) * 3 + static_cast<size_t>(ph)];
    if (slot < 0) {
      slot = a.add();
      todo.emplace_back(q, ph);
    }
    return slot;
  };
  const RangeSet any = any_char();
  a.start = get(pre, 0);
  while (!todo.empty()) {
    const auto [q, ph] = todo.back();
    todo.pop_back();
    const int32_t me = get(q, ph);
    if (q == pre || q == post) {
      if (ph != 2) {
        const int32_t t = get(q, 1);
        for (const auto& [lo, hi] : any) a.edge(me, lo, hi, t);
      }
      if (q == pre) a.eps(me, get(start, ph));
      else a.accept(me);
      continue;
    }
    const auto& st = r.s[static_cast<size_t>(q)];
    if (ph != 2)
      for (const auto& e : st.edges) a.edge(me, e.lo, e.hi, get(e.to, 1));
    for (int32_t t : st.eps) a.eps(me, get(t, ph));
    if (ph == 0)
      for (int32_t t : st.begin) a.eps(me, get(t, 0));
    for (int32_t t : st.end) a.eps(me, get(t, 2));
    if (q == accept) a.eps(me, get(post, ph));
  }
  try {
    return trim(determinize(a, kMaxDfaStates, "the pattern"));
  } catch (const SchemaError&) {
    throw;
  } catch (const Error& e) {
    throw SchemaError("", e.what());
  }
}

}  // namespace hs::grammar
