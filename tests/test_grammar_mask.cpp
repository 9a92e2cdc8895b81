// The token mask against a brute-force oracle (every token fed to a copy of the matcher) over
// the built-in tokenizer and the real DeepSeek-V4 vocabulary; real tokenizations of valid
// values pass the mask; the constraint's contract (EOS, finished, refusals); a forced tool call
// and a thinking-mode answer end to end through the DSML parser.
#include <gtest/gtest.h>

#include <random>

#include "grammar/regex.h"
#include "grammar/structured_output.h"
#include "model/synthetic.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/dsml_parser.h"
#include "util/error.h"

using namespace hs;
using namespace hs::grammar;

namespace {

const Tokenizer& synthetic() {
  static const Tokenizer t = make_synthetic_tokenizer();
  return t;
}
std::shared_ptr<const Vocabulary> synthetic_vocab() {
  static const auto v = std::make_shared<const Vocabulary>(synthetic());
  return v;
}
const Tokenizer& v4() {
  static const Tokenizer t = Tokenizer::load(std::string(HS_TEST_DATA) + "/tokenizer/v4/tokenizer.json");
  return t;
}
std::shared_ptr<const Vocabulary> v4_vocab() {
  static const auto v = std::make_shared<const Vocabulary>(v4());
  return v;
}

OutputSpec json_spec(const std::string& schema) {
  OutputSpec s;
  s.kind = OutputSpec::Kind::json_schema;
  s.schema = ojson::parse(schema);
  return s;
}

std::vector<int32_t> allowed(const TokenBits& bits, int32_t n) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i)
    if (test_bit(bits, i)) out.push_back(i);
  return out;
}

// Samples a random allowed token per step (EOS as soon as it is allowed, with probability
// p_eos; `pick` may override) and checks every mask against the brute force. Returns the text.
std::string random_walk(const std::shared_ptr<const CompiledOutput>& out, const Vocabulary& v, uint64_t seed, int steps,
                        bool check_brute, bool& finished,
                        const std::function<int32_t(const std::vector<int32_t>&, std::mt19937_64&)>& pick = {}) {
  GrammarConstraint c(out);
  std::mt19937_64 rng(seed);
  std::string text;
  TokenBits brute;
  finished = false;
  for (int s = 0; s < steps && !c.finished(); ++s) {
    c.compute();
    if (check_brute) {
      brute_force_mask(c.matcher(), v, out->specials, brute);
      const auto a = allowed(c.last_mask(), v.size()), b = allowed(brute, v.size());
      EXPECT_EQ(a, b) << "step " << s << " after '" << text << "'";
      if (a != b) return text;
    }
    const auto ids = allowed(c.last_mask(), v.size());
    EXPECT_FALSE(ids.empty()) << "no token allowed after '" << text << "'";
    if (ids.empty()) return text;
    int32_t tok = pick ? pick(ids, rng) : -1;
    if (tok < 0) tok = test_bit(c.last_mask(), v.eos()) && rng() % 3 == 0 ? v.eos() : ids[rng() % ids.size()];
    c.accept(tok);
    if (tok != v.eos()) text += v.bytes(tok);
  }
  finished = c.finished();
  return text;
}

const std::vector<std::string> kSchemas = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},"age":{"type":"integer","minimum":0,"maximum":150},
        "ok":{"type":"boolean"}},"required":["name","age"],"additionalProperties":false})",
    R"({"type":"array","items":{"enum":["red","green",null,7]},"maxItems":4})",
    R"({"anyOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"number"}},"required":["k","x"]},
                 {"type":"object","properties":{"k":{"const":"b"},"y":{"type":"string","maxLength":3}},"required":["k","y"]}]})",
    R"({"type":"object","additionalProperties":{"type":"integer","minimum":-9,"maximum":9},"properties":{}})",
    R"({"type":"string","format":"date-time"})",
    R"({"type":"object","properties":{"s":{"type":"string"},"n":{"type":["number","null"]}},"required":["s"]})",
    R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"tags":{"type":"array","items":{"type":"string",
        "pattern":"^[a-z]{1,4}$"},"minItems":1,"maxItems":2}},"required":["id","tags"]})",
};

}  // namespace

TEST(GrammarMask, MatchesBruteForceOnTheBuiltinVocabulary) {
  const auto v = synthetic_vocab();
  for (size_t k = 0; k < kSchemas.size(); ++k) {
    const auto out = compile_output(json_spec(kSchemas[k]), v);
    int done = 0;
    for (uint64_t seed = 0; seed < 6; ++seed) {
      bool finished = false;
      const std::string text = random_walk(out, *v, seed * 31 + k, 120, true, finished);
      if (finished) {
        ++done;
        EXPECT_TRUE(ojson::accept(text)) << kSchemas[k] << "\n -> " << text;
      }
    }
    if (k != 5) {
      EXPECT_GT(done, 0) << "no walk of schema " << k << " finished";
    }
  }
}

TEST(GrammarMask, MatchesBruteForceOnTheV4Vocabulary) {
  const auto v = v4_vocab();
  EXPECT_EQ(v->size(), 129280);
  for (const auto& schema : {kSchemas[0], kSchemas[2], kSchemas[5]}) {
    const auto out = compile_output(json_spec(schema), v);
    bool finished = false;
    random_walk(out, *v, 5, 12, true, finished);
  }
}

TEST(GrammarMask, RealTokenizationsOfValidValuesPass) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {kSchemas[0], R"({"name": "Ada", "age": 36, "ok": true})"},
      {kSchemas[0], "{\n  \"name\": \"x\\n\\\"y\",\n  \"age\": 0\n}"},
      {kSchemas[2], R"({"k": "b", "y": "été"})"},
      {kSchemas[5], R"({"s": "The quick brown fox: \"jumps\" over\tthe lazy dog, twice.", "n": -12.5e+3})"},
      {kSchemas[4], R"("2026-11-29T08:15:00.25Z")"},
  };
  for (const auto& tok : {&synthetic(), &v4()}) {
    const auto v = tok == &synthetic() ? synthetic_vocab() : v4_vocab();
    for (const auto& [schema, text] : cases) {
      const auto out = compile_output(json_spec(schema), v);
      GrammarConstraint c(out);
      for (int32_t id : tok->encode_plain(text)) {
        c.compute();
        ASSERT_TRUE(test_bit(c.last_mask(), id)) << "token '" << v->bytes(id) << "' of " << text;
        c.accept(id);
      }
      EXPECT_TRUE(c.finished()) << text;
    }
  }
}

TEST(GrammarMask, ConstraintContract) {
  const auto v = synthetic_vocab();
  const auto out = compile_output(json_spec(R"({"type":"integer","minimum":0,"maximum":50})"), v);
  GrammarConstraint c(out);
  std::vector<float> logits(static_cast<size_t>(v->size()), 0.0f);
  c.mask(logits.data(), v->size());
  EXPECT_TRUE(std::isinf(logits[static_cast<size_t>(v->eos())]));  // nothing generated yet
  const auto four = synthetic().encode_plain("4");
  ASSERT_EQ(four.size(), 1u);
  EXPECT_EQ(logits[static_cast<size_t>(four[0])], 0.0f);
  EXPECT_THROW(c.accept(v->eos()), Error);
  EXPECT_THROW(c.accept(synthetic().encode_plain("x")[0]), Error);
  c.accept(four[0]);
  EXPECT_FALSE(c.finished());  // "4" may go on ("42")
  std::fill(logits.begin(), logits.end(), 0.0f);
  c.mask(logits.data(), v->size());
  EXPECT_EQ(logits[static_cast<size_t>(v->eos())], 0.0f);
  c.accept(synthetic().encode_plain("9")[0]);  // "49": at most two digits below 51
  EXPECT_TRUE(c.finished());
  // Added tokens are never part of a JSON value.
  const auto obj = compile_output(json_spec(R"({"type":"string"})"), v);
  GrammarConstraint s(obj);
  s.accept(synthetic().encode_plain("\"")[0]);
  s.compute();
  EXPECT_FALSE(test_bit(s.last_mask(), synthetic().special_ids().think_end));
  EXPECT_FALSE(test_bit(s.last_mask(), synthetic().special_ids().user));
}

TEST(GrammarMask, ForcedToolCallParsesWithValidArguments) {
  const auto v = synthetic_vocab();
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::tool_call;
  spec.tool_name = "get_weather";
  spec.schema = ojson::parse(R"({"type":"object","properties":{"location":{"type":"string","maxLength":8},
      "unit":{"enum":["c","f"]},"days":{"type":"integer","minimum":1,"maximum":7},"when":{"type":"string","format":"date"}},
      "required":["location","days"]})");
  const auto out = compile_output(spec, v);
  ASSERT_EQ(out->specials.size(), 1u);  // ｜DSML｜
  DsmlParserOptions opts;
  opts.tools = ojson::array({{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", spec.schema}}}}});
  int finished_walks = 0;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    bool finished = false;
    // Prefer the special ｜DSML｜ token where it is allowed, as a trained model would.
    const std::string text = random_walk(out, *v, seed, 400, seed < 2, finished, [&](const std::vector<int32_t>& ids, std::mt19937_64&) {
      return std::find(ids.begin(), ids.end(), out->specials[0]) != ids.end() ? out->specials[0] : -1;
    });
    if (!finished) continue;
    ++finished_walks;
    const ParsedCompletion p = parse_completion(text, opts);
    ASSERT_EQ(p.tool_calls.size(), 1u) << text;
    EXPECT_TRUE(p.warnings.empty()) << text;
    EXPECT_EQ(p.tool_calls[0].name, "get_weather");
    const ojson args = ojson::parse(p.tool_calls[0].arguments);
    ASSERT_TRUE(args.contains("location") && args["location"].is_string()) << args.dump();
    EXPECT_LE(utf8_to_codepoints(args["location"].get<std::string>()).size(), 8u);
    ASSERT_TRUE(args.contains("days") && args["days"].is_number_integer()) << args.dump();
    EXPECT_GE(args["days"].get<int>(), 1);
    EXPECT_LE(args["days"].get<int>(), 7);
    if (args.contains("unit")) {
      EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f");
    }
    for (const auto& [k, _] : args.items()) EXPECT_TRUE(k == "location" || k == "unit" || k == "days" || k == "when") << k;
  }
  EXPECT_GE(finished_walks, 4);
}

TEST(GrammarMask, ThinkingConstrainsOnlyTheAnswer) {
  const auto v = synthetic_vocab();
  OutputSpec spec = json_spec(R"({"type":"object","properties":{"a":{"type":"boolean"}},"required":["a"]})");
  spec.reasoning_first = true;
  const auto out = compile_output(spec, v);
  const int32_t think_end = synthetic().special_ids().think_end;
  ASSERT_EQ(out->specials, std::vector<int32_t>{think_end});
  int steps = 0;
  bool finished = false;
  const std::string text = random_walk(out, *v, 3, 200, true, finished, [&](const std::vector<int32_t>& ids, std::mt19937_64&) {
    const bool can_end = std::find(ids.begin(), ids.end(), think_end) != ids.end();
    return ++steps == 15 && can_end ? think_end : -1;
  });
  ASSERT_TRUE(finished) << text;
  DsmlParserOptions opts;
  opts.start_in_reasoning = true;
  const ParsedCompletion p = parse_completion(text, opts);
  EXPECT_FALSE(p.reasoning_content.empty());
  const ojson answer = ojson::parse(p.content);
  EXPECT_TRUE(answer["a"].is_boolean()) << p.content;
  EXPECT_EQ(p.reasoning_content.find(ds4::kEos), std::string::npos);
}

TEST(GrammarMask, JsonObjectIsAnyObject) {
  const auto v = synthetic_vocab();
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::json_object;
  const auto out = compile_output(spec, v);
  int done = 0;
  for (uint64_t seed = 0; seed < 10; ++seed) {
    bool finished = false;
    const std::string text = random_walk(out, *v, seed, 150, seed < 3, finished);
    if (!finished) continue;
    ++done;
    const ojson j = ojson::parse(text);
    EXPECT_TRUE(j.is_object()) << text;
  }
  EXPECT_GT(done, 0);
}

TEST(GrammarMask, DeepNestingKeepsTheStateExact) {
  // Thousands of open arrays: the matcher's frame arena is compacted many times meanwhile.
  const auto v = synthetic_vocab();
  OutputSpec spec;
  spec.kind = OutputSpec::Kind::json_object;
  const auto out = compile_output(spec, v);
  GrammarConstraint c(out);
  const int32_t open = synthetic().encode_plain("[")[0], close = synthetic().encode_plain("]")[0];
  c.accept(synthetic().encode_plain("{")[0]);
  for (int32_t id : synthetic().encode_plain("\"a\":")) c.accept(id);
  for (int i = 0; i < 5000; ++i) c.accept(open);
  c.compute();
  TokenBits brute;
  brute_force_mask(c.matcher(), *v, out->specials, brute);
  EXPECT_EQ(allowed(c.last_mask(), v->size()), allowed(brute, v->size()));
  EXPECT_THROW(c.accept(synthetic().encode_plain("}")[0]), Error);  // arrays still open
  for (int i = 0; i < 5000; ++i) c.accept(close);
  EXPECT_FALSE(c.finished());
  c.accept(synthetic().encode_plain("}")[0]);
  EXPECT_TRUE(c.finished());
}
