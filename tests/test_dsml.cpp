// tokenizer/dsml_parser: the streaming DSML parser. Supplementary parse cases from DeepSeek's
// parser, round trips of random arguments through the encoder, split invariance (any deltas,
// down to single bytes, give the same result), and a table of malformed outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <random>

#include "tokenizer/chat.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/dsml_parser.h"

using namespace hs;

namespace {

const std::string kDir = std::string(HS_TEST_DATA) + "/chat/";
const std::string kEos(ds4::kEos);

std::vector<ojson> parse_cases() {
  std::ifstream f(kDir + "supplementary_cases.jsonl");
  std::vector<ojson> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    ojson c = ojson::parse(line);
    if (c["kind"] == "parse") out.push_back(std::move(c));
  }
  return out;
}

// The tables below provoke hundreds of warnings; keep them off the test log (HS_LOG is read
// at each log call). LogsWarnings checks that they are logged.
class QuietLogs {
 public:
  QuietLogs() {
    if (const char* v = std::getenv("HS_LOG")) saved_ = v;
    setenv("HS_LOG", "error", 1);
  }
  ~QuietLogs() {
    if (saved_) setenv("HS_LOG", saved_->c_str(), 1);
    else unsetenv("HS_LOG");
  }
  QuietLogs(const QuietLogs&) = delete;
  QuietLogs& operator=(const QuietLogs&) = delete;

 private:
  std::optional<std::string> saved_;
};

DsmlParserOptions opts_for(bool thinking, uint64_t seed = 0) {
  DsmlParserOptions o;
  o.start_in_reasoning = thinking;
  o.id_seed = seed;
  return o;
}

// Everything observable about a parse, as one comparable string.
std::string describe(const ParsedCompletion& r) {
  ojson j = {{"reasoning", r.reasoning_content}, {"content", r.content}, {"eos", r.saw_eos},
             {"calls", ojson::array()}, {"warnings", r.warnings}};
  for (const auto& c : r.tool_calls) j["calls"].push_back(tool_call_to_openai(c));
  return py_json_dumps(j);
}

// Feeds `text` cut at `cuts` (sorted offsets) and checks that the events add up to the result.
ParsedCompletion feed_split(const std::string& text, const std::vector<size_t>& cuts, const DsmlParserOptions& o) {
  DsmlParser p(o);
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  auto take = [&](const std::vector<ParseEvent>& ev) {
    for (const auto& e : ev) {
      if (e.kind == ParseEvent::Kind::reasoning_delta) reasoning += e.text;
      else if (e.kind == ParseEvent::Kind::content_delta) content += e.text;
      else calls.push_back(e.call);
    }
  };
  size_t prev = 0;
  for (size_t c : cuts) {
    take(p.feed(std::string_view(text).substr(prev, c - prev)));
    prev = c;
  }
  take(p.feed(std::string_view(text).substr(prev)));
  take(p.finish());
  const ParsedCompletion& r = p.result();
  EXPECT_EQ(reasoning, r.reasoning_content);
  EXPECT_EQ(content, r.content);
  EXPECT_EQ(calls.size(), r.tool_calls.size());
  for (size_t i = 0; i < calls.size() && i < r.tool_calls.size(); ++i) {
    EXPECT_EQ(calls[i].arguments, r.tool_calls[i].arguments);
    EXPECT_EQ(calls[i].id, r.tool_calls[i].id);
  }
  return r;
}

// Whole text, single bytes, and random cuts for many seeds all give the same result.
void expect_split_invariant(const std::string& text, const DsmlParserOptions& o, int seeds = 40) {
  const std::string whole = describe(feed_split(text, {}, o));
  std::vector<size_t> bytes;
  for (size_t i = 1; i < text.size(); ++i) bytes.push_back(i);
  ASSERT_EQ(describe(feed_split(text, bytes, o)), whole) << "1-byte deltas of " << text;
  for (int seed = 0; seed < seeds; ++seed) {
    std::mt19937_64 rng(seed);
    std::vector<size_t> cuts;
    const size_t n = text.empty() ? 0 : rng() % (text.size() / 2 + 2);
    for (size_t i = 0; i < n; ++i) cuts.push_back(rng() % (text.size() + 1));
    std::sort(cuts.begin(), cuts.end());
    ASSERT_EQ(describe(feed_split(text, cuts, o)), whole) << "seed " << seed << " of " << text;
  }
}

// Random JSON for arguments: nested values, unicode, quotes, escapes, tag look-alikes.
class ArgGen {
 public:
  explicit ArgGen(uint64_t seed) : rng_(seed) {}

  std::string text(bool allow_tags = true) {
    static const char* kPieces[] = {"a",  "Z", "0", " ", "\"", "\\", "\n", "\t", "\r", "\x01", "é", "中文", "😀",
                                    "—", "<", ">", "/", "&amp;", "{", "}", "[1, 2]", "true", "null", "\\n"};
    static const char* kTags[] = {"<｜DSML｜invoke name=\"x\">", "</｜DSML｜invoke>", "<｜DSML｜parameter",
                                  "</｜DSML｜tool_calls>", "\n\n<｜DSML｜tool_calls>", "<think>", "</think>",
                                  "｜DSML｜", "</｜DSML｜param", "<tool_result>", "<｜User｜>", "string=\"true\">"};
    for (;;) {
      std::string s;
      const size_t n = rng_() % 12;
      for (size_t i = 0; i < n; ++i) {
        if (allow_tags && rng_() % 6 == 0) s += kTags[rng_() % std::size(kTags)];
        else s += kPieces[rng_() % std::size(kPieces)];
      }
      // The format has no escape for the closing tag, and the model stops at EOS.
      if (s.find(ds4::kParamClose) == std::string::npos && s.find(ds4::kEos) == std::string::npos) return s;
    }
  }
  std::string key() {
    std::string k = text(false);
    std::erase(k, '"');  // a key is written raw inside name="..."
    return k;
  }
  ojson value(int depth) {
    switch (rng_() % (depth > 2 ? 5 : 7)) {
      case 0: return text();
      case 1: return static_cast<int64_t>(rng_()) >> (rng_() % 64);
      case 2: {
        double d;
        do {
          uint64_t bits = rng_();
          std::memcpy(&d, &bits, sizeof d);
        } while (!std::isfinite(d));
        return rng_() % 2 ? d : static_cast<double>(static_cast<int>(rng_() % 2000) - 1000) / 8;
      }
      case 3: return rng_() % 2 == 0;
      case 4: return nullptr;
      case 5: {
        ojson a = ojson::array();
        for (size_t i = rng_() % 4; i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: return object(depth + 1);
    }
  }
  ojson object(int depth) {
    ojson o = ojson::object();
    for (size_t i = rng_() % 5; i > 0; --i) o[key()] = value(depth);
    return o;
  }
  uint64_t next() { return rng_(); }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

TEST(DsmlParse, SupplementaryCases) {
  QuietLogs quiet;
  const auto cases = parse_cases();
  EXPECT_EQ(cases.size(), 11u);
  for (const ojson& c : cases) {
    const std::string text = c["completion"];
    const auto o = opts_for(c["thinking_mode"] == "thinking");
    const ParsedCompletion r = parse_completion(text, o);
    if (c.value("expected_error", false)) {
      // DeepSeek's strict parser raises; ours returns text and reports the problem.
      EXPECT_TRUE(!r.warnings.empty() || !r.saw_eos) << c["name"];
      EXPECT_TRUE(r.tool_calls.empty()) << c["name"];
      // No text is lost: all of it comes back but the </think> separator and EOS.
      std::string raw = text;
      if (size_t q = raw.find(kEos); q != std::string::npos) raw.erase(q, kEos.size());
      if (size_t q = raw.find(ds4::kThinkEnd); o.start_in_reasoning && q != std::string::npos)
        raw.erase(q, ds4::kThinkEnd.size());
      EXPECT_EQ(r.reasoning_content + r.content, raw) << c["name"];
    } else {
      const ojson& e = c["expected"];
      EXPECT_EQ(r.reasoning_content, e["reasoning_content"]) << c["name"];
      EXPECT_EQ(r.content, e["content"]) << c["name"];
      ASSERT_EQ(r.tool_calls.size(), e["tool_calls"].size()) << c["name"];
      for (size_t k = 0; k < r.tool_calls.size(); ++k) {
        EXPECT_EQ(r.tool_calls[k].name, e["tool_calls"][k]["function"]["name"]) << c["name"];
        EXPECT_EQ(r.tool_calls[k].arguments, e["tool_calls"][k]["function"]["arguments"]) << c["name"];
      }
      EXPECT_TRUE(r.warnings.empty()) << c["name"];
      EXPECT_TRUE(r.saw_eos) << c["name"];
    }
    expect_split_invariant(text, o);
  }
}

// Encoder -> DSML text -> parser gives back the same calls, for random arguments.
TEST(DsmlParse, RoundTripRandomArguments) {
  QuietLogs quiet;
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    ArgGen g(seed);
    ojson calls = ojson::array();
    std::vector<ojson> args;
    for (size_t i = 1 + g.next() % 3; i > 0; --i) {
      args.push_back(g.object(0));
      // (std::string(...) + ...: "literal" + std::string trips a GCC 12 -Wrestrict false positive)
      const std::string name = std::string("tool_") + std::to_string(g.next() % 100);
      // Alternate the two accepted forms of OpenAI arguments.
      const ojson a = i % 2 ? ojson(py_json_dumps(args.back())) : args.back();
      calls.push_back({{"id", std::string("c") + std::to_string(i)}, {"type", "function"},
                       {"function", {{"name", name}, {"arguments", a}}}});
    }
    const bool thinking = seed % 2 == 0;
    std::string content = seed % 3 ? g.text(false) : "";
    std::string reasoning = thinking ? g.text(false) : "";
    ojson msgs = ojson::array({{{"role", "user"}, {"content", "q"}}});
    ChatOptions o;
    o.thinking_mode = thinking ? ThinkingMode::thinking : ThinkingMode::chat;
    const ChatPrompt before = encode_messages(msgs, o);
    msgs.push_back({{"role", "assistant"}, {"content", content}, {"reasoning_content", reasoning}, {"tool_calls", calls}});
    const std::string prompt = encode_messages(msgs, o).text;
    ASSERT_EQ(prompt.substr(0, before.text.size()), before.text);
    const std::string turn = prompt.substr(before.text.size());

    const auto po = opts_for(before.starts_in_reasoning, seed);
    const ParsedCompletion r = parse_completion(turn, po);
    ASSERT_TRUE(r.warnings.empty()) << turn;
    EXPECT_EQ(r.reasoning_content, reasoning);
    EXPECT_EQ(r.content, content);
    ASSERT_EQ(r.tool_calls.size(), calls.size());
    for (size_t k = 0; k < calls.size(); ++k) {
      EXPECT_EQ(r.tool_calls[k].name, calls[k]["function"]["name"]);
      EXPECT_EQ(r.tool_calls[k].arguments, py_json_dumps(args[k])) << turn;
      EXPECT_EQ(ojson::parse(r.tool_calls[k].arguments), args[k]);
      EXPECT_EQ(r.tool_calls[k].id, make_tool_call_id(seed, k));
    }
    if (seed % 5 == 0) expect_split_invariant(turn, po, 10);
  }
}

TEST(DsmlParse, StreamsTextAsSoonAsItCannotBeATag) {
  DsmlParser p(opts_for(true));
  auto ev = p.feed("Let me think");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ParseEvent::Kind::reasoning_delta);
  EXPECT_EQ(ev[0].text, "Let me think");
  ev = p.feed(" a<b </th");  // "</th" may be the start of </think>
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, " a<b ");
  ev = p.feed("ink>Hi\n");  // reasoning ends; "\n" may start "\n\n<｜DSML｜tool_calls"
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ParseEvent::Kind::content_delta);
  EXPECT_EQ(ev[0].text, "Hi");
  ev = p.feed("\xC3");  // the "\n" cannot start a block any more; half of "é" is held back
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\n");
  ev = p.feed("\xA9!");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "é!");
  ev = p.feed("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n");
  EXPECT_TRUE(ev.empty());  // calls are sent once the block is complete
  ev = p.feed("<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n</｜DSML｜invoke>\n");
  EXPECT_TRUE(ev.empty());
  ev = p.feed("</｜DSML｜tool_calls>" + kEos);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, ParseEvent::Kind::tool_call);
  EXPECT_EQ(ev[0].call.name, "f");
  EXPECT_EQ(ev[0].call.arguments, "{\"a\": 1}");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.result().content, "Hi\né!");
  EXPECT_TRUE(p.result().saw_eos);
  EXPECT_TRUE(p.result().warnings.empty());
}

TEST(DsmlParse, ToolCallIdsAreDeterministic) {
  EXPECT_EQ(make_tool_call_id(1, 0), make_tool_call_id(1, 0));
  EXPECT_NE(make_tool_call_id(1, 0), make_tool_call_id(1, 1));
  EXPECT_NE(make_tool_call_id(1, 0), make_tool_call_id(2, 0));
  const std::string id = make_tool_call_id(42, 3);
  EXPECT_EQ(id.size(), 29u);
  EXPECT_EQ(id.substr(0, 5), "call_");
  const std::string two = "</think>\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n\n</｜DSML｜invoke>\n"
                          "<｜DSML｜invoke name=\"b\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos;
  const auto r = parse_completion(two, opts_for(true, 9));
  ASSERT_EQ(r.tool_calls.size(), 2u);
  EXPECT_EQ(r.tool_calls[0].id, make_tool_call_id(9, 0));
  EXPECT_EQ(r.tool_calls[1].id, make_tool_call_id(9, 1));
  const ojson j = tool_call_to_openai(r.tool_calls[1]);
  EXPECT_EQ(j.dump(), "{\"id\":\"" + make_tool_call_id(9, 1) +
                          "\",\"type\":\"function\",\"function\":{\"name\":\"b\",\"arguments\":\"{}\"}}");
}

// Malformed output: never a crash or half a call; the raw text comes back and a warning says why.
TEST(DsmlParse, MalformedTable) {
  QuietLogs quiet;
  const std::string B = "\n\n<｜DSML｜tool_calls>\n", E = "</｜DSML｜tool_calls>";
  const std::string I = "<｜DSML｜invoke name=\"f\">\n", IE = "</｜DSML｜invoke>\n";
  auto P = [](const std::string& k, const std::string& v, bool s = true) {
    return "<｜DSML｜parameter name=\"" + k + "\" string=\"" + (s ? "true" : "false") + "\">" + v +
           "</｜DSML｜parameter>\n";
  };
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters":
      {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}}}])");
  struct Case {
    const char* name;
    std::string text;      // chat-mode completion
    std::string content;   // expected content
    std::string warning;   // a substring of the first warning ("" = none)
    bool eos = true;
    bool with_tools = false;
    size_t calls = 0;
  };
  const std::string ok_block = B + I + P("a", "x") + IE + E;
  const std::vector<Case> cases = {
      {"unclosed block (cut off)", "Hi" + B + I + P("a", "x"), "Hi" + B + I + P("a", "x"), "not closed", false},
      {"unclosed parameter", "Hi" + B + I + "<｜DSML｜parameter name=\"a\" string=\"true\">xy",
       "Hi" + B + I + "<｜DSML｜parameter name=\"a\" string=\"true\">xy", "not closed", false},
      {"EOS inside a value", B + I + "<｜DSML｜parameter name=\"a\" string=\"true\">x" + kEos + "tail",
       B + I + "<｜DSML｜parameter name=\"a\" string=\"true\">x", "end of sentence inside"},
      {"duplicate parameter", B + I + P("a", "1") + P("a", "2") + IE + E + kEos,
       B + I + P("a", "1") + P("a", "2") + IE + E, "duplicate parameter"},
      {"bad JSON value", B + I + P("a", "{bad", false) + IE + E + kEos, B + I + P("a", "{bad", false) + IE + E,
       "not JSON"},
      {"empty non-string value", B + I + P("a", "", false) + IE + E + kEos, B + I + P("a", "", false) + IE + E,
       "not JSON"},
      {"unknown parameter", B + I + P("b", "1") + IE + E + kEos, B + I + P("b", "1") + IE + E,
       "unknown parameter", true, true},
      {"unknown tool", B + "<｜DSML｜invoke name=\"g\">\n" + IE + E + kEos, B + "<｜DSML｜invoke name=\"g\">\n" + IE + E,
       "unknown tool", true, true},
      {"known tool and parameter", ok_block + kEos, "", "", true, true, 1},
      {"garbage inside invoke", B + I + "hello\n" + IE + E + kEos, B + I + "hello\n" + IE + E, "expected"},
      {"missing string attribute", B + I + "<｜DSML｜parameter name=\"a\">1</｜DSML｜parameter>\n" + IE + E + kEos,
       B + I + "<｜DSML｜parameter name=\"a\">1</｜DSML｜parameter>\n" + IE + E, "expected"},
      {"bad string attribute", B + I + "<｜DSML｜parameter name=\"a\" string=\"yes\">1</｜DSML｜parameter>\n" + IE + E + kEos,
       B + I + "<｜DSML｜parameter name=\"a\" string=\"yes\">1</｜DSML｜parameter>\n" + IE + E, "expected"},
      {"empty tool name", B + "<｜DSML｜invoke name=\"\">\n" + IE + E + kEos, B + "<｜DSML｜invoke name=\"\">\n" + IE + E,
       "without a name"},
      {"text between invokes", B + I + IE + "and\n" + I + IE + E + kEos, B + I + IE + "and\n" + I + IE + E, "expected"},
      {"text after the block", "ok" + ok_block + "trailing" + kEos, "ok" + ok_block + "trailing", "text after"},
      {"no blank line before the block", "ok<｜DSML｜tool_calls>\n" + I + IE + E + kEos,
       "ok<｜DSML｜tool_calls>\n" + I + IE + E, "special string"},
      {"second invoke malformed: no call at all", B + I + P("a", "x") + IE + "<｜DSML｜invoke nam=\"f\">\n" + IE + E + kEos,
       B + I + P("a", "x") + IE + "<｜DSML｜invoke nam=\"f\">\n" + IE + E, "expected"},
      {"a later good block after a bad one stays text", B + "junk" + ok_block + kEos, B + "junk" + ok_block, "expected"},
      {"block without invokes", "a" + B + E + kEos, "a" + B + E, "without calls"},
      {"think tags in content", "a</think>b" + kEos, "a</think>b", "special string"},
      {"text after EOS", "done" + kEos + "more", "done", "ignored"},
      {"cut off after the closing tag", "ok" + ok_block + "<｜end", "ok" + ok_block + "<｜end", "text after", false},
      {"missing EOS only", "done", "done", "", false},
      {"closed block without EOS is complete", ok_block, "", "", false, false, 1},
  };
  EXPECT_GE(cases.size(), 12u);
  for (const Case& c : cases) {
    DsmlParserOptions o = opts_for(false);
    if (c.with_tools) o.tools = tools;
    const ParsedCompletion r = parse_completion(c.text, o);
    EXPECT_EQ(r.content, c.content) << c.name;
    EXPECT_EQ(r.reasoning_content, "") << c.name;
    EXPECT_EQ(r.tool_calls.size(), c.calls) << c.name;
    EXPECT_EQ(r.saw_eos, c.eos) << c.name;
    if (c.warning.empty()) {
      EXPECT_TRUE(r.warnings.empty()) << c.name << ": " << (r.warnings.empty() ? "" : r.warnings[0]);
    } else {
      ASSERT_FALSE(r.warnings.empty()) << c.name;
      EXPECT_NE(r.warnings[0].find(c.warning), std::string::npos) << c.name << ": " << r.warnings[0];
    }
    expect_split_invariant(c.text, o, 10);
  }
}

TEST(DsmlParse, ReasoningPolicy) {
  QuietLogs quiet;
  // A block inside reasoning is never a call (DeepSeek's parser raises).
  const std::string block = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  ParsedCompletion r = parse_completion("hmm" + block + kEos, opts_for(true));
  EXPECT_EQ(r.reasoning_content, "hmm" + block);
  EXPECT_TRUE(r.tool_calls.empty());
  ASSERT_FALSE(r.warnings.empty());
  EXPECT_NE(r.warnings[0].find("no </think>"), std::string::npos);
  // Cut off while reasoning: all reasoning, a warning, no EOS.
  r = parse_completion("still thinking", opts_for(true));
  EXPECT_EQ(r.reasoning_content, "still thinking");
  EXPECT_FALSE(r.saw_eos);
  EXPECT_FALSE(r.warnings.empty());
  // Empty reasoning and content with a call.
  r = parse_completion("</think>" + block + kEos, opts_for(true));
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.tool_calls.size(), 1u);
  EXPECT_EQ(r.tool_calls[0].arguments, "{}");
  // feed() after finish() is ignored.
  DsmlParser p(opts_for(false));
  p.feed("a");
  p.finish();
  EXPECT_TRUE(p.feed("b").empty());
  EXPECT_EQ(p.result().content, "a");
}

TEST(DsmlParse, LogsWarnings) {
  unsetenv("HS_LOG");  // default level: warn
  testing::internal::CaptureStderr();
  const auto r = parse_completion("\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\noops" + kEos, opts_for(false));
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(r.content, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\noops");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(log.find("warn: DSML parser: malformed DSML tool-call block"), std::string::npos) << log;
}

// Random edits of valid turns (cut, deleted/duplicated bytes, inserted tag pieces): never a
// crash, the same result for any split, and no text lost.
TEST(DsmlParse, RandomMutationsLoseNoText) {
  QuietLogs quiet;
  static const char* kBits[] = {"<｜DSML｜parameter name=\"a\" string=\"true\">", "</｜DSML｜parameter>\n",
                                "<｜DSML｜invoke name=\"g\">\n", "</｜DSML｜invoke>\n", "</｜DSML｜tool_calls>",
                                "\n\n<｜DSML｜tool_calls>\n", "</think>", "\n", "\"", "x", "\xE4\xB8", "<｜end▁of▁sentence｜>"};
  const std::string base = "Plan: call f.</think>Sure\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
                           "<｜DSML｜parameter name=\"q\" string=\"true\">a \"b\"</｜DSML｜parameter>\n"
                           "<｜DSML｜parameter name=\"n\" string=\"false\">[1, {\"k\": null}]</｜DSML｜parameter>\n"
                           "</｜DSML｜invoke>\n</｜DSML｜tool_calls>" + kEos;
  for (uint64_t seed = 0; seed < 3000; ++seed) {
    std::mt19937_64 rng(seed);
    std::string text = base;
    for (size_t edits = 1 + rng() % 3; edits > 0; --edits) {
      const size_t at = rng() % (text.size() + 1);
      switch (rng() % 4) {
        case 0: text.resize(at); break;
        case 1: text.erase(at, 1 + rng() % 8); break;
        case 2: text.insert(at, kBits[rng() % std::size(kBits)]); break;
        default: text.insert(at, text.substr(at, rng() % 16)); break;
      }
    }
    const bool thinking = seed % 3 != 0;
    const auto o = opts_for(thinking);
    const ParsedCompletion r = parse_completion(text, o);
    std::string raw = text.substr(0, text.find(kEos));
    if (size_t q = raw.find(ds4::kThinkEnd); thinking && q != std::string::npos) raw.erase(q, ds4::kThinkEnd.size());
    const std::string got = r.reasoning_content + r.content;
    if (r.tool_calls.empty()) {
      EXPECT_EQ(got, raw) << text;
    } else {
      EXPECT_EQ(raw.substr(0, got.size()), got) << text;
      EXPECT_EQ(raw.substr(got.size(), ds4::kBlockStart.size()), ds4::kBlockStart) << text;
    }
    if (seed % 4 == 0) expect_split_invariant(text, o, 5);
  }
}
