// The structured-output compiler: regex patterns against std::regex (ECMAScript), UTF-8 lowering
// against the encoder, numeric bounds against arithmetic, and JSON Schemas accepting and
// rejecting texts; unsupported features fail naming them.
#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "grammar/encode.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/numbers.h"
#include "grammar/regex.h"
#include "grammar/schema_error.h"

using namespace hs;
using namespace hs::grammar;

namespace {

std::shared_ptr<const Grammar> compile(const std::string& schema, bool whitespace = true) {
  const ojson s = ojson::parse(schema);
  GrammarBuilder g;
  SchemaCompiler c(g, s, JsonOptions{whitespace, 20, {"<｜end▁of▁sentence｜>"}});
  return g.build(c.value(s, "#"));
}

std::string schema_error(const std::string& schema) {
  try {
    compile(schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "(compiled)";
}

std::u32string ascii32(const std::string& s) { return std::u32string(s.begin(), s.end()); }

std::string utf8(uint32_t c) {
  std::string s;
  if (c < 0x80) s += static_cast<char>(c);
  else if (c < 0x800) s += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
  else if (c < 0x10000)
    s += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
  else
    s += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
          static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
  return s;
}

bool byte_accepts(const Automaton& a, std::string_view bytes) {
  std::u32string s;
  for (unsigned char c : bytes) s.push_back(c);
  return accepts(a, s);
}

}  // namespace

TEST(GrammarRegex, AgreesWithStdRegexOnAsciiStrings) {
  const std::vector<std::string> patterns = {
      "^[a-z]+$",         "ab",          "^a|b$",          "^(ab|ba)*$",        "^a{2,3}b?$",   "\\d{2}-\\d",
      "^[^0-9]*$",        "^.a.$",       "^(?:x|y)+z$",    "^[\\w.-]+@[a-z]+\\.[a-z]{2,}$", "a.*b",
      "^\\s*\\S+\\s*$",   "^[a-c-]{0,4}$", "^(a(b(c)?)?)?$", "b{3}",            "^$",           "^a+?b*?$",
      "[.]",              "^\\.\\-\\@$", "(?<n>ab)c",      "^[\\d\\s]+$",       "^ab{0}c$",     "x{1,}",
  };
  std::mt19937 rng(7);
  const std::string alphabet = "abcxyz0129-._@ \t";
  for (const auto& p : patterns) {
    const Automaton dfa = compile_pattern(p);
    const std::regex re(p.find("(?<") != std::string::npos ? "(ab)c" : p, std::regex::ECMAScript);
    for (int n = 0; n < 600; ++n) {
      std::string s;
      const int len = static_cast<int>(rng() % 9);
      for (int i = 0; i < len; ++i) s += alphabet[rng() % alphabet.size()];
      if (n < 20) s = std::string(static_cast<size_t>(n % 5), "abz@."[n % 5]);
      EXPECT_EQ(accepts(dfa, ascii32(s)), std::regex_search(s, re)) << "pattern " << p << " on '" << s << "'";
    }
  }
}

TEST(GrammarRegex, UnsupportedConstructsAreNamed) {
  auto err = [](const std::string& p) {
    try {
      compile_pattern(p);
    } catch (const SchemaError& e) {
      return std::string(e.what());
    }
    return std::string("(compiled)");
  };
  EXPECT_NE(err("^(?=a)b").find("lookahead"), std::string::npos);
  EXPECT_NE(err("^(?!a)b").find("negative lookahead"), std::string::npos);
  EXPECT_NE(err("(?<=a)b").find("lookbehind"), std::string::npos);
  EXPECT_NE(err("(a)\\1").find("backreference"), std::string::npos);
  EXPECT_NE(err("\\bword").find("word boundary"), std::string::npos);
  EXPECT_NE(err("\\p{L}+").find("Unicode property"), std::string::npos);
  EXPECT_NE(err("a)").find("unbalanced"), std::string::npos);
  EXPECT_NE(err("[a-").find("missing ']'"), std::string::npos);
  EXPECT_NE(err("*a").find("nothing to repeat"), std::string::npos);
}

TEST(GrammarRegex, NonAsciiAndEscapes) {
  const Automaton a = compile_pattern("^[é-ë]\\u00e9\\x41\\u{1F600}$");
  EXPECT_TRUE(accepts(a, U"êéA\U0001F600"));
  EXPECT_FALSE(accepts(a, U"eéA\U0001F600"));
  const Automaton dot = compile_pattern("^.$");
  EXPECT_TRUE(accepts(dot, U"\U0001F600"));
  EXPECT_FALSE(accepts(dot, U"\n"));
}

TEST(GrammarEncode, Utf8SequencesCoverExactlyTheRange) {
  std::mt19937 rng(3);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {
      {0x20, 0x7E}, {0x7F, 0x80}, {0x7FF, 0x800}, {0xD7F0, 0xE010}, {0xFFF0, 0x10010}, {0x10FFF0, 0x10FFFF}, {0x41, 0x41},
      {0x100, 0x17F}, {0x3000, 0x9FFF}};
  for (const auto& [lo, hi] : ranges) {
    Automaton c;
    c.accept(add_class(c, c.start, {{lo, hi}}));
    Automaton b;
    b.accept(add_encoded(b, b.start, c, Encoding::raw));
    const Automaton d = determinize(b, 10000, "test");
    for (uint32_t cp = lo > 64 ? lo - 64 : 0; cp <= std::min(hi + 64, kMaxCodePoint); ++cp) {
      const bool in = cp >= lo && cp <= hi && (cp < 0xD800 || cp > 0xDFFF);
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      EXPECT_EQ(byte_accepts(d, utf8(cp)), in) << std::hex << cp << " in [" << lo << ", " << hi << "]";
      if (cp > lo + 300 && cp + 300 < hi) cp = hi - 300;
    }
    // Random byte strings: accepted only when they are the UTF-8 of a code point in range.
    for (int n = 0; n < 3000; ++n) {
      std::string s;
      const int len = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < len; ++i) s += static_cast<char>(rng() % 256);
      bool valid = false;
      try {
        const std::u32string cps = utf8_to_codepoints(s);
        valid = cps.size() == 1 && cps[0] >= lo && cps[0] <= hi;
      } catch (const Error&) {
      }
      EXPECT_EQ(byte_accepts(d, s), valid);
    }
  }
}

TEST(GrammarEncode, JsonEscapesAsJsonDumpsWritesThem) {
  Automaton c;
  c.accept(add_class(c, c.start, any_char()));
  Automaton b;
  b.accept(add_encoded(b, b.start, c, Encoding::json));
  const Automaton d = determinize(b, 10000, "test");
  for (uint32_t cp = 0; cp < 0x80; ++cp) {
    std::string want;
    py_json_quote_to(want, std::string(1, static_cast<char>(cp)));
    want = want.substr(1, want.size() - 2);
    EXPECT_TRUE(byte_accepts(d, want)) << cp;
    if (want.size() > 1) {
      EXPECT_FALSE(byte_accepts(d, std::string(1, static_cast<char>(cp)))) << cp;
    }
  }
  EXPECT_TRUE(byte_accepts(d, "é"));
  EXPECT_FALSE(byte_accepts(d, "\\u0041"));  // one spelling per character
}

TEST(GrammarNumbers, IntegerRangesAgreeWithArithmetic) {
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{-5, 120}, {0, 0}, {1, 9}, {-1000, -7}, {10, 99}, {37, 1234}, {-1, 1}};
  for (const auto& [lo, hi] : ranges) {
    const Automaton a = integer_automaton(NumberBound{static_cast<double>(lo), false}, NumberBound{static_cast<double>(hi), false});
    for (int64_t v = -1300; v <= 1300; ++v) EXPECT_EQ(accepts(a, ascii32(std::to_string(v))), v >= lo && v <= hi) << v << " in [" << lo << ", " << hi << "]";
    EXPECT_FALSE(accepts(a, U"-0"));
    EXPECT_FALSE(accepts(a, U"007"));
    EXPECT_FALSE(accepts(a, U"1.0"));
  }
  // Exclusive and fractional bounds.
  const Automaton e = integer_automaton(NumberBound{0, true}, NumberBound{10.5, false});
  EXPECT_FALSE(accepts(e, U"0"));
  EXPECT_TRUE(accepts(e, U"1"));
  EXPECT_TRUE(accepts(e, U"10"));
  EXPECT_FALSE(accepts(e, U"11"));
  // zod's safe-integer bounds.
  const Automaton z = integer_automaton(NumberBound{-9007199254740991.0, false}, NumberBound{9007199254740991.0, false});
  EXPECT_TRUE(accepts(z, U"9007199254740991"));
  EXPECT_FALSE(accepts(z, U"9007199254740992"));
  EXPECT_TRUE(accepts(z, U"-9007199254740991"));
  EXPECT_THROW(integer_automaton(NumberBound{5, false}, NumberBound{4, false}), SchemaError);
}

TEST(GrammarNumbers, DecimalBoundsAgreeWithDoubles) {
  struct Case {
    std::optional<NumberBound> lo, hi;
  };
  const std::vector<Case> cases = {
      {NumberBound{0, true}, std::nullopt},          {NumberBound{0, false}, NumberBound{1, false}},
      {NumberBound{1.5, true}, std::nullopt},        {std::nullopt, NumberBound{-2.25, false}},
      {NumberBound{-3.5, false}, NumberBound{2, true}}, {NumberBound{-0.125, true}, NumberBound{0.125, true}},
      {NumberBound{10, false}, NumberBound{10, false}}, {std::nullopt, NumberBound{0, true}},
  };
  std::mt19937 rng(11);
  for (const auto& c : cases) {
    const Automaton a = number_automaton(c.lo, c.hi);
    auto in = [&](double v) {
      if (c.lo && (c.lo->exclusive ? !(v > c.lo->value) : !(v >= c.lo->value))) return false;
      if (c.hi && (c.hi->exclusive ? !(v < c.hi->value) : !(v <= c.hi->value))) return false;
      return true;
    };
    for (int n = 0; n < 4000; ++n) {
      std::string s = rng() % 2 ? "-" : "";
      const int ip = static_cast<int>(rng() % 3);
      s += ip == 0 ? "0" : std::to_string(rng() % (ip == 1 ? 10 : 100));
      if (rng() % 3) {
        s += ".";
        for (int k = 0, f = 1 + static_cast<int>(rng() % 4); k < f; ++k) s += static_cast<char>('0' + rng() % 10);
      }
      const bool canonical = !(s == "-0" || (s.rfind("-0", 0) == 0 && s.find_first_not_of("-0.") == std::string::npos));
      const bool want = canonical && in(std::stod(s));
      EXPECT_EQ(accepts(a, ascii32(s)), want) << s;
    }
    EXPECT_FALSE(accepts(a, U"1e5"));
  }
  EXPECT_THROW(number_automaton(NumberBound{2, false}, NumberBound{1, false}), SchemaError);
  EXPECT_THROW(number_automaton(NumberBound{0.1234567890123456, false}, std::nullopt), SchemaError);
}

TEST(GrammarSchema, ObjectsInSchemaOrderWithRequiredAndOptional) {
  const auto g = compile(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"},
      "c":{"type":"boolean"}},"required":["b"]})");
  for (const char* ok : {R"({"b":1})", R"({"a":"x","b":1})", R"({"b":1,"c":true})", R"({"a":"","b":-2,"c":false})",
                         "{\n  \"a\": \"q\",\n  \"b\": 3\n}", R"({ "b" : 2 })"})
    EXPECT_TRUE(grammar_accepts(g, ok)) << ok;
  for (const char* bad : {R"({})", R"({"a":"x"})", R"({"b":1,"a":"x"})", R"({"b":1,"b":2})", R"({"b":1,"d":1})",
                          R"({"b":1,})", R"({"b":"1"})", " {\"b\":1}", "{\"b\":1} ", "{\n\n\"b\":1}"})
    EXPECT_FALSE(grammar_accepts(g, bad)) << bad;
}

TEST(GrammarSchema, AdditionalProperties) {
  const auto open = compile(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})");
  EXPECT_TRUE(grammar_accepts(open, R"({"a":1,"zz":[1,{"q":null}]})"));
  EXPECT_TRUE(grammar_accepts(open, R"({"zz":"x"})"));
  EXPECT_FALSE(grammar_accepts(open, R"({"a":1,"a":"x"})"));  // an extra key never repeats a declared one
  const auto typed = compile(R"({"type":"object","additionalProperties":{"type":"string","maxLength":2}})");
  EXPECT_TRUE(grammar_accepts(typed, R"({"k":"ab","l":""})"));
  EXPECT_FALSE(grammar_accepts(typed, R"({"k":"abc"})"));
  const auto closed = compile(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  EXPECT_FALSE(grammar_accepts(closed, R"({"a":1,"b":2})"));  // declared properties only, by default
  const auto any = compile(R"({"type":"object"})");
  EXPECT_TRUE(grammar_accepts(any, R"({"b":2,"c":{"d":[]}})"));
  EXPECT_EQ(schema_error(R"({"type":"object","required":["x"],"additionalProperties":false})")
                .find("the required property 'x' is not in 'properties'") != std::string::npos,
            true);
}

TEST(GrammarSchema, ArraysAndTuples) {
  const auto g = compile(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(grammar_accepts(g, "[1]"));
  EXPECT_TRUE(grammar_accepts(g, "[1,2]"));
  EXPECT_TRUE(grammar_accepts(g, "[1, 2, 3]"));
  EXPECT_FALSE(grammar_accepts(g, "[1,2,3,4]"));
  const auto tuple = compile(R"({"type":"array","items":[{"type":"string"},{"type":"number"}],"additionalItems":false,"minItems":2})");
  EXPECT_TRUE(grammar_accepts(tuple, R"(["a",1.5])"));
  EXPECT_FALSE(grammar_accepts(tuple, R"([1.5,"a"])"));
  EXPECT_FALSE(grammar_accepts(tuple, R"(["a",1,2])"));
  const auto prefix = compile(R"({"type":"array","prefixItems":[{"const":"x"}],"items":{"type":"null"}})");
  EXPECT_TRUE(grammar_accepts(prefix, R"(["x",null,null])"));
  EXPECT_TRUE(grammar_accepts(prefix, "[]"));
  EXPECT_FALSE(grammar_accepts(prefix, "[null]"));
  const auto any = compile(R"({"type":"array"})");
  EXPECT_TRUE(grammar_accepts(any, R"([1,"a",[true,{}],null])"));
}

TEST(GrammarSchema, StringsLengthsPatternsFormats) {
  const auto len = compile(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(grammar_accepts(len, "\"a\""));
  EXPECT_TRUE(grammar_accepts(len, "\"ab\""));
  EXPECT_TRUE(grammar_accepts(len, "\"é\\n\""));  // characters, not bytes
  EXPECT_TRUE(grammar_accepts(len, "\"\U0001F600ab\""));
  EXPECT_FALSE(grammar_accepts(len, "\"abcd\""));
  const auto pat = compile(R"({"type":"string","pattern":"^[a-z]+-\\d{2}$","maxLength":5})");
  EXPECT_TRUE(grammar_accepts(pat, "\"ab-12\""));
  EXPECT_FALSE(grammar_accepts(pat, "\"abc-12\""));
  const auto date = compile(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(grammar_accepts(date, "\"2024-05-31T23:59:59.5+02:00\""));
  EXPECT_FALSE(grammar_accepts(date, "\"2024-05-31 23:59:59Z\""));
  EXPECT_FALSE(grammar_accepts(date, "\"2024-04-31T00:00:00Z\""));
  const auto uuid = compile(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(grammar_accepts(uuid, "\"123e4567-e89b-12d3-a456-426614174000\""));
  const auto email = compile(R"({"type":"string","format":"email"})");
  EXPECT_TRUE(grammar_accepts(email, "\"a.b@ex-ample.com\""));
  EXPECT_FALSE(grammar_accepts(email, "\"a@b\""));
  // A pattern with an unknown format: the pattern decides.
  const auto cuid = compile(R"({"type":"string","format":"cuid","pattern":"^c[0-9a-z]{6,}$"})");
  EXPECT_TRUE(grammar_accepts(cuid, "\"c123abc\""));
  EXPECT_NE(schema_error(R"({"type":"string","format":"color"})").find("format 'color' is not supported"), std::string::npos);
  // No generated string contains the end-of-sentence text the chat parser stops at.
  EXPECT_FALSE(grammar_accepts(compile(R"({"type":"string"})"), "\"a<｜end▁of▁sentence｜>\""));
  EXPECT_TRUE(grammar_accepts(compile(R"({"type":"string"})"), "\"a<｜end\""));
}

TEST(GrammarSchema, UnionsEnumsRefsNullable) {
  const auto u = compile(R"({"anyOf":[{"type":"string"},{"type":"integer","minimum":0}]})");
  EXPECT_TRUE(grammar_accepts(u, "\"x\""));
  EXPECT_TRUE(grammar_accepts(u, "5"));
  EXPECT_FALSE(grammar_accepts(u, "-5"));
  const auto types = compile(R"({"type":["boolean","null"]})");
  EXPECT_TRUE(grammar_accepts(types, "null"));
  EXPECT_FALSE(grammar_accepts(types, "0"));
  const auto e = compile(R"({"type":"string","enum":["red","green",3]})");
  EXPECT_TRUE(grammar_accepts(e, "\"green\""));
  EXPECT_FALSE(grammar_accepts(e, "3"));  // not a string: filtered out by "type"
  const auto c = compile(R"({"const":{"a":[1,2]}})");
  EXPECT_TRUE(grammar_accepts(c, R"({"a":[1,2]})"));
  const auto n = compile(R"({"type":"string","nullable":true})");
  EXPECT_TRUE(grammar_accepts(n, "null"));
  const auto rec = compile(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}},"$ref":"#/$defs/node"})");
  EXPECT_TRUE(grammar_accepts(rec, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(grammar_accepts(rec, R"({"v":1,"kids":[{"v":2}]})"));
  const auto all = compile(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
      {"properties":{"b":{"type":"string"}},"required":["b"]}]})");
  EXPECT_TRUE(grammar_accepts(all, R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(grammar_accepts(all, R"({"a":1})"));
  const auto one = compile(R"({"oneOf":[{"const":"a"},{"const":"b"}]})");
  EXPECT_TRUE(grammar_accepts(one, "\"b\""));
  const auto boolean = compile(R"({"type":"object","properties":{"x":true,"y":false}})");
  EXPECT_TRUE(grammar_accepts(boolean, R"({"x":[{}]})"));
  EXPECT_FALSE(grammar_accepts(boolean, R"({"y":1})"));
}

TEST(GrammarSchema, UnsupportedFeaturesAreNamed) {
  EXPECT_NE(schema_error(R"({"type":"object","patternProperties":{"^a":{}}})").find("'patternProperties' is not supported"), std::string::npos);
  EXPECT_NE(schema_error(R"({"not":{"type":"string"}})").find("'not'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"if":{},"then":{}})").find("'if'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"array","uniqueItems":true})").find("uniqueItems"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"integer","multipleOf":3})").find("multipleOf"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref":"other.json#/a"})").find("only local $ref"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$ref":"#/$defs/missing"})").find("points to nothing"), std::string::npos);
  EXPECT_NE(schema_error(R"J({"type":"string","pattern":"(?=x)"})J").find("lookahead"), std::string::npos);
  EXPECT_NE(schema_error(R"({"type":"wat"})").find("unknown type 'wat'"), std::string::npos);
  EXPECT_NE(schema_error(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})").find("circular"),
            std::string::npos);
  EXPECT_NE(schema_error(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})"),
            "(compiled)");
  EXPECT_NE(schema_error(R"({"type":"string","minLength":5,"maxLength":2})").find("minLength 5 is above maxLength 2"), std::string::npos);
  // Where: the JSON pointer of the offending node.
  EXPECT_NE(schema_error(R"({"type":"object","properties":{"a/b":{"type":"array","items":{"not":{}}}}})").find("#/properties/a~1b/items"),
            std::string::npos);
}

TEST(GrammarSchema, WhitespaceIsBounded) {
  const auto g = compile(R"({"type":"array","items":{"type":"integer"}})");
  EXPECT_TRUE(grammar_accepts(g, "[\n  1,\n  2\n]"));
  EXPECT_TRUE(grammar_accepts(g, "[\n" + std::string(20, ' ') + "1]"));
  EXPECT_FALSE(grammar_accepts(g, "[\n" + std::string(21, ' ') + "1]"));
  EXPECT_FALSE(grammar_accepts(g, "[\t1]"));
  const auto none = compile(R"({"type":"array","items":{"type":"integer"}})", false);
  EXPECT_FALSE(grammar_accepts(none, "[1, 2]"));
  EXPECT_TRUE(grammar_accepts(none, "[1,2]"));
}
