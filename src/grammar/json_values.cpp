// SchemaCompiler: the bodies of objects, arrays and strings, and whitespace.
#include <algorithm>
#include <array>
#include <map>

#include "grammar/formats.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/schema_error.h"

namespace hs::grammar {

namespace {

constexpr uint32_t kFullwidthBar = 0xFF5C;  // '｜', in every text the chat parser stops at

int64_t count(const ojson& s, const char* k, const std::string& where, int64_t dflt) {
  if (!s.contains(k)) return dflt;
  const ojson& v = s[k];
  if (!v.is_number() || v.get<double>() < 0 || v.get<double>() != static_cast<double>(static_cast<int64_t>(v.get<double>())))
    throw SchemaError(where, cat("'", k, "' must be a non-negative integer"));
  return static_cast<int64_t>(v.get<double>());
}

// One state accepting everything over `set`.
Automaton loop_over(const RangeSet& set) {
  Automaton a;
  a.accept(a.start);
  for (const auto& [lo, hi] : set) a.edge(a.start, lo, hi, a.start);
  return a;
}

RangeSet minus(RangeSet set, std::initializer_list<uint32_t> cps) {
  RangeSet ex;
  for (uint32_t c : cps) ex.emplace_back(c, c);
  RangeSet keep = complement(ex);
  RangeSet out;
  for (const auto& [a, b] : set)
    for (const auto& [c, d] : keep) {
      const uint32_t lo = std::max(a, c), hi = std::min(b, d);
      if (lo <= hi) out.emplace_back(lo, hi);
    }
  return normalize(out);
}

std::string json_quote(std::string_view s) {
  std::string out;
  py_json_quote_to(out, s);
  return out;
}

}  // namespace

int32_t SchemaCompiler::ws_rule() {
  if (ws_rule_ >= 0) return ws_rule_;
  ws_rule_ = g_.declare("ws");
  Automaton a;
  a.accept(a.start);
  a.accept(add_literal(a, a.start, " "));
  int32_t s = add_literal(a, a.start, "\n");
  a.accept(s);
  for (int i = 0; i < opts_.max_indent; ++i) {
    s = add_literal(a, s, " ");
    a.accept(s);
  }
  g_.define(ws_rule_, std::move(a));
  return ws_rule_;
}

int32_t SchemaCompiler::ws(Automaton& a, int32_t from) {
  if (!opts_.whitespace) return from;
  const int32_t t = a.add();
  a.call(from, ws_rule(), t);
  return t;
}

Automaton SchemaCompiler::without_forbidden(Automaton chars, const std::vector<std::string>& extra) {
  std::vector<std::string> all = opts_.forbidden;
  all.insert(all.end(), extra.begin(), extra.end());
  for (const auto& f : all) chars = intersect(chars, not_containing(utf8_to_codepoints(f)), 100000, "a string schema");
  return chars;
}

Automaton SchemaCompiler::string_chars(const ojson& s, const std::string& where, int32_t& min, int32_t& max, bool& free) {
  min = static_cast<int32_t>(std::min<int64_t>(count(s, "minLength", where, 0), INT32_MAX));
  const int64_t mx = count(s, "maxLength", where, -1);
  max = static_cast<int32_t>(std::min<int64_t>(mx, INT32_MAX));
  if (max >= 0 && min > max) throw SchemaError(where, cat("minLength ", min, " is above maxLength ", max));
  std::optional<Automaton> chars;
  if (s.contains("format")) {
    if (!s["format"].is_string()) throw SchemaError(where, "'format' must be a string");
    const std::string f = s["format"].get<std::string>();
    if (auto fa = format_automaton(f)) chars = std::move(*fa);
    else if (!s.contains("pattern")) throw SchemaError(where, cat("the string format '", f, "' is not supported"));
  }
  if (s.contains("pattern")) {
    if (!s["pattern"].is_string()) throw SchemaError(where, "'pattern' must be a string");
    Automaton p;
    try {
      p = compile_pattern(s["pattern"].get<std::string>());
    } catch (const SchemaError& e) {
      throw SchemaError(where, e.detail());
    }
    chars = chars ? intersect(*chars, p, 100000, "the string's format and pattern") : std::move(p);
  }
  free = !chars;
  if (free) return loop_over(any_char());
  if (min > kMaxPatternLength) throw SchemaError(where, cat("minLength above ", kMaxPatternLength, " with a pattern or format is not supported"));
  if (min > 0 || max >= 0) {
    const int32_t cap = max < 0 ? -1 : std::min(max, std::max(min, kMaxPatternLength));
    Automaton len;
    int32_t st = len.start;
    for (int32_t i = 0; i < min; ++i) st = add_class(len, st, any_char());
    len.accept(st);
    if (cap < 0) {
      for (const auto& [lo, hi] : any_char()) len.edge(st, lo, hi, st);
    } else {
      for (int32_t i = min; i < cap; ++i) {
        st = add_class(len, st, any_char());
        len.accept(st);
      }
    }
    chars = intersect(*chars, len, 200000, "the string's length bounds with its pattern");
  }
  return std::move(*chars);
}

int32_t SchemaCompiler::string_rule(const ojson& s, const std::string& where, Encoding enc, std::string_view close) {
  const std::string key = cat("str:", enc == Encoding::json ? "json:" : "raw:", close, ":", s.dump(-1, ' ', false, ojson::error_handler_t::replace));
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  int32_t min = 0, max = -1;
  bool free = false;
  Automaton chars = string_chars(s, where, min, max, free);
  const std::string open = enc == Encoding::json ? "\"" : "";
  const std::vector<std::string> extra = enc == Encoding::raw ? std::vector<std::string>{std::string(close)} : std::vector<std::string>{};
  const int32_t rule = g_.declare("string " + where);
  memo_[key] = rule;
  if (free && (min > 0 || max >= 0)) {
    // Unrolled, over characters that cannot start a forbidden text (they all hold '｜') nor,
    // raw, the closing tag.
    if (min > kMaxStringChain) throw SchemaError(where, cat("minLength above ", kMaxStringChain, " is not supported"));
    const int32_t cap = max < 0 ? std::max(min, kMaxStringChain) : std::min(max, std::max(min, kMaxStringChain));
    RangeSet set = minus(any_char(), {kFullwidthBar});
    if (enc == Encoding::raw) set = minus(set, {static_cast<uint32_t>(static_cast<unsigned char>(close[0]))});
    TaggedAutomaton t = length_chain(set, min, cap, enc, g_.add_chain(min, cap), open, close);
    g_.define(rule, std::move(t.a), std::move(t.tags));
    return rule;
  }
  chars = without_forbidden(std::move(chars), extra);
  if (chars.empty()) throw SchemaError(where, "no string satisfies the schema");
  Automaton a;
  const int32_t s1 = add_literal(a, a.start, open);
  a.accept(add_literal(a, add_encoded(a, s1, chars, enc), close));
  g_.define(rule, std::move(a));
  return rule;
}

int32_t SchemaCompiler::extra_key_rule(const std::vector<std::string>& declared) {
  std::string key = "xkey:";
  for (const auto& d : declared) key += json_quote(d);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  // Printable ASCII but '"' and '\', never one of the declared names (a trie of them).
  const RangeSet alphabet = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x7E}};
  Automaton c;
  const int32_t free = c.add();
  c.accept(free);
  for (const auto& [lo, hi] : alphabet) c.edge(free, lo, hi, free);
  std::vector<std::map<uint32_t, int32_t>> kids(1);
  std::vector<char> terminal(1, 0);
  for (const auto& d : declared) {
    int32_t t = 0;
    bool ascii = true;
    for (unsigned char ch : d) ascii = ascii && ch >= 0x20 && ch < 0x7F && ch != '"' && ch != '\\';
    if (!ascii) continue;  // never equal to an ASCII-only key
    for (unsigned char ch : d) {
      auto it = kids[static_cast<size_t>(t)].find(ch);
      if (it == kids[static_cast<size_t>(t)].end()) {
        const auto n = static_cast<int32_t>(kids.size());
        kids[static_cast<size_t>(t)][ch] = n;
        kids.emplace_back();
        terminal.push_back(0);
        t = n;
      } else {
        t = it->second;
      }
    }
    terminal[static_cast<size_t>(t)] = 1;
  }
  std::vector<int32_t> state(kids.size());
  state[0] = c.start;
  for (size_t t = 1; t < kids.size(); ++t) state[t] = c.add();
  for (size_t t = 0; t < kids.size(); ++t) {
    RangeSet used;
    for (const auto& [ch, n] : kids[t]) {
      c.edge(state[t], ch, ch, state[static_cast<size_t>(n)]);
      used.emplace_back(ch, ch);
    }
    const RangeSet rest = complement(used);
    for (const auto& [lo, hi] : alphabet)
      for (const auto& [a, b] : rest) {
        const uint32_t l = std::max(lo, a), h = std::min(hi, b);
        if (l <= h) c.edge(state[t], l, h, free);
      }
    if (t > 0 && !terminal[t]) c.accept(state[t]);
  }
  const int32_t rule = g_.declare("extra key");
  memo_[key] = rule;
  Automaton a;
  const int32_t s1 = add_literal(a, a.start, "\"");
  a.accept(add_literal(a, add_encoded(a, s1, c, Encoding::json), "\""));
  g_.define(rule, std::move(a));
  return rule;
}

void SchemaCompiler::object_body(Automaton& a, const ojson& s, const std::string& where) {
  std::vector<std::pair<std::string, ojson>> props;
  if (s.contains("properties")) {
    if (!s["properties"].is_object()) throw SchemaError(where, "'properties' must be an object");
    for (const auto& [k, v] : s["properties"].items()) props.emplace_back(k, v);
  }
  std::vector<std::string> required;
  if (s.contains("required")) {
    if (!s["required"].is_array()) throw SchemaError(where, "'required' must be an array of strings");
    for (const auto& r : s["required"]) {
      if (!r.is_string()) throw SchemaError(where, "'required' must be an array of strings");
      if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end())
        required.push_back(r.get<std::string>());
    }
  }
  // What may follow the declared properties: by default nothing when some are declared.
  ojson extra = s.contains("additionalProperties") ? s["additionalProperties"] : ojson(props.empty());
  if (!extra.is_boolean() && !extra.is_object()) throw SchemaError(where, "'additionalProperties' must be a boolean or a schema");
  if (extra.is_object() && resolve(extra, where + "/additionalProperties") == ojson{{"enum", ojson::array()}}) extra = false;
  if (s.contains("propertyNames")) {
    const ojson pn = resolve(s["propertyNames"], where + "/propertyNames");
    if (!pn.empty() && pn != ojson{{"type", "string"}})
      throw SchemaError(where, "'propertyNames' other than {\"type\": \"string\"} is not supported");
  }
  for (const auto& r : required) {
    if (std::any_of(props.begin(), props.end(), [&](const auto& p) { return p.first == r; })) continue;
    if (extra == false)
      throw SchemaError(where, cat("the required property '", r, "' is not in 'properties' and additionalProperties is false"));
    props.emplace_back(r, extra == true ? ojson::object() : extra);
  }
  auto is_required = [&](const std::string& k) { return std::find(required.begin(), required.end(), k) != required.end(); };
  const bool extras = extra != false;
  if (s.contains("minProperties") && count(s, "minProperties", where, 0) > static_cast<int64_t>(required.size()))
    throw SchemaError(where, "'minProperties' above the number of required properties is not supported");
  if (s.contains("maxProperties")) {
    const int64_t mp = count(s, "maxProperties", where, 0);
    if (static_cast<int64_t>(required.size()) > mp) throw SchemaError(where, "'maxProperties' is below the required properties");
    if (extras || static_cast<int64_t>(props.size()) > mp)
      throw SchemaError(where, "'maxProperties' below the number of possible properties is not supported");
  }
  const size_t k = props.size();
  int32_t cur = ws(a, add_literal(a, a.start, "{"));
  std::vector<std::array<int32_t, 2>> st(k + 1);
  for (auto& p : st) p = {a.add(), a.add()};
  a.eps(cur, st[0][0]);
  auto separator = [&](int32_t from, int e) {
    if (!e) return from;
    return ws(a, add_literal(a, ws(a, from), ","));
  };
  for (size_t i = 0; i < k; ++i) {
    const auto& [key, schema] = props[i];
    const std::string pw = where + "/properties/" + pointer_escape(key);
    const int32_t value = this->value(schema, pw);
    for (int e = 0; e < 2; ++e) {
      const int32_t from = st[i][static_cast<size_t>(e)];
      if (!is_required(key)) a.eps(from, st[i + 1][static_cast<size_t>(e)]);
      int32_t c = separator(from, e);
      c = ws(a, add_literal(a, ws(a, add_literal(a, c, json_quote(key))), ":"));
      a.call(c, value, st[i + 1][1]);
    }
  }
  if (extras) {
    std::vector<std::string> declared;
    for (const auto& p : props) declared.push_back(p.first);
    const int32_t key_rule = extra_key_rule(declared);
    const int32_t value = extra == true ? value_rule(ojson::object(), where + "/additionalProperties")
                                        : this->value(extra, where + "/additionalProperties");
    for (int e = 0; e < 2; ++e) {
      const int32_t c = separator(st[k][static_cast<size_t>(e)], e);
      const int32_t after_key = a.add();
      a.call(c, key_rule, after_key);
      a.call(ws(a, add_literal(a, ws(a, after_key), ":")), value, st[k][1]);
    }
  }
  // (After "{" the whitespace is already allowed.)
  a.accept(add_literal(a, st[k][0], "}"));
  a.accept(add_literal(a, ws(a, st[k][1]), "}"));
}

void SchemaCompiler::array_body(Automaton& a, const ojson& s, const std::string& where) {
  std::vector<std::pair<ojson, std::string>> prefix;
  ojson rest = true;
  std::string rest_where = where + "/items";
  if (s.contains("prefixItems")) {
    if (!s["prefixItems"].is_array()) throw SchemaError(where, "'prefixItems' must be an array");
    for (size_t i = 0; i < s["prefixItems"].size(); ++i)
      prefix.emplace_back(s["prefixItems"][i], where + "/prefixItems/" + std::to_string(i));
    if (s.contains("items")) rest = s["items"];
  } else if (s.contains("items") && s["items"].is_array()) {
    for (size_t i = 0; i < s["items"].size(); ++i) prefix.emplace_back(s["items"][i], where + "/items/" + std::to_string(i));
    if (s.contains("additionalItems")) {
      rest = s["additionalItems"];
      rest_where = where + "/additionalItems";
    }
  } else if (s.contains("items")) {
    rest = s["items"];
  }
  if (!rest.is_boolean() && !rest.is_object()) throw SchemaError(where, "'items' must be a schema");
  if (rest.is_object() && resolve(rest, rest_where) == ojson{{"enum", ojson::array()}}) rest = false;
  const bool more = rest != false;
  const int64_t m = static_cast<int64_t>(prefix.size());
  const int64_t lo = count(s, "minItems", where, 0);
  int64_t hi = count(s, "maxItems", where, -1);
  if (!more) hi = hi < 0 ? m : std::min(hi, m);
  if (hi >= 0 && lo > hi) throw SchemaError(where, cat("minItems ", lo, " is above the ", hi, " items the schema allows"));
  if (lo > 4 * kMaxArrayUnroll) throw SchemaError(where, cat("minItems above ", 4 * kMaxArrayUnroll, " is not supported"));
  if (hi >= 0) hi = std::min(hi, std::max({lo, m, int64_t{kMaxArrayUnroll}}));
  const int64_t n = hi >= 0 ? hi : std::max(lo, m);
  auto rule_at = [&](int64_t i) {
    if (i < m) return this->value(prefix[static_cast<size_t>(i)].first, prefix[static_cast<size_t>(i)].second);
    return rest == true ? value_rule(ojson::object(), rest_where) : this->value(rest, rest_where);
  };
  int32_t cur = ws(a, add_literal(a, a.start, "["));
  std::vector<int32_t> cnt(static_cast<size_t>(n + 1));
  for (auto& c : cnt) c = a.add();
  a.eps(cur, cnt[0]);
  auto separator = [&](int32_t from, int64_t i) {
    if (i == 0) return from;
    return ws(a, add_literal(a, ws(a, from), ","));
  };
  for (int64_t i = 0; i < n; ++i) a.call(separator(cnt[static_cast<size_t>(i)], i), rule_at(i), cnt[static_cast<size_t>(i + 1)]);
  std::vector<int32_t> closers;
  for (int64_t i = lo; i <= n; ++i) closers.push_back(cnt[static_cast<size_t>(i)]);
  if (hi < 0) {  // unbounded: loop at n (or, with n = 0, at a state past the first item)
    const int32_t r = rule_at(n);
    int32_t loop = cnt[static_cast<size_t>(n)];
    if (n == 0) {
      loop = a.add();
      a.call(cnt[0], r, loop);
      closers.push_back(loop);
    }
    a.call(separator(loop, 1), r, loop);
  }
  for (int32_t c : closers) a.accept(add_literal(a, c == cnt[0] ? c : ws(a, c), "]"));
}

}  // namespace hs::grammar
