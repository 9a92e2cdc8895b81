// tokenizer/chat: the DeepSeek-V4 prompt encoder against DeepSeek's official test vectors and
// the supplementary cases produced by the official encoder (tests/data/chat, copied from
// fixtures/chat), plus input errors, variants, options and the `render` CLI.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "tokenizer/chat.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/dsml_parser.h"
#include "util/error.h"

using namespace hs;

namespace {

const std::string kDir = std::string(HS_TEST_DATA) + "/chat/";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f) << path;
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<ojson> supplementary(const std::string& kind) {
  std::ifstream f(kDir + "supplementary_cases.jsonl");
  std::vector<ojson> out;
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    ojson c = ojson::parse(line);
    if (c["kind"] == kind) out.push_back(std::move(c));
  }
  return out;
}

ChatOptions options_of(const ojson& o) {
  ChatOptions opts;
  opts.thinking_mode = parse_thinking_mode(o.at("thinking_mode").get<std::string>());
  if (o.contains("drop_thinking")) opts.drop_thinking = o["drop_thinking"].get<bool>();
  if (o.contains("reasoning_effort") && !o["reasoning_effort"].is_null())
    opts.reasoning_effort = o["reasoning_effort"].get<std::string>();
  if (o.contains("add_default_bos_token")) opts.add_bos = o["add_default_bos_token"].get<bool>();
  if (o.contains("context")) opts.context = o["context"];
  return opts;
}

// The official test's calls: vector 4 is chat mode, the others thinking; drop_thinking on.
ChatOptions official_options(int n) {
  ChatOptions o;
  o.thinking_mode = n == 4 ? ThinkingMode::chat : ThinkingMode::thinking;
  return o;
}

// The assistant turns of a prompt: the text after each "<｜Assistant｜><think>" up to the next
// user turn (DeepSeek's test parses exactly these segments).
std::vector<std::string> thinking_turns(const std::string& prompt) {
  const std::string open = assistant_prefix(ThinkingMode::thinking);
  std::vector<std::string> out;
  for (size_t at = prompt.find(open); at != std::string::npos; at = prompt.find(open, at + 1)) {
    const size_t from = at + open.size();
    const size_t to = prompt.find(ds4::kUser, from);
    if (from == prompt.size()) break;  // the generation prompt at the end: no turn yet
    out.push_back(prompt.substr(from, to == std::string::npos ? std::string::npos : to - from));
  }
  return out;
}

ParsedCompletion parse_thinking(const std::string& turn) {
  DsmlParserOptions o;
  o.start_in_reasoning = true;
  return parse_completion(turn, o);
}

}  // namespace

TEST(ChatStrings, MatchFixtureFiles) {
  EXPECT_EQ(ds4::kEffortAbsoluteMax, read_file(kDir + "strings/reasoning_effort_absolute_max.txt"));
  EXPECT_EQ(ds4::kEffortBeyondMax, read_file(kDir + "strings/reasoning_effort_beyond_max.txt"));
  EXPECT_EQ(ds4::kResponseFormatPrefix, read_file(kDir + "strings/response_format_prefix.txt"));
  EXPECT_EQ(ds4::kToolsBlockPrefix, read_file(kDir + "strings/tools_block_prefix.txt"));
  EXPECT_EQ(ds4::kToolsBlockSuffix, read_file(kDir + "strings/tools_block_suffix.txt"));
}

TEST(ChatEncode, OfficialVectorsByteExact) {
  for (int n = 1; n <= 4; ++n) {
    const ojson input = ojson::parse(read_file(kDir + "test_input_" + std::to_string(n) + ".json"));
    const std::string expected = read_file(kDir + "test_output_" + std::to_string(n) + ".txt");
    // As DeepSeek's test loads them: top-level tools go to messages[0].
    ojson messages = input.is_object() ? input["messages"] : input;
    if (input.is_object() && input.contains("tools")) messages[0]["tools"] = input["tools"];
    EXPECT_EQ(encode_messages(messages, official_options(n)).text, expected) << "vector " << n;
    // The API-level request form gives the same bytes.
    EXPECT_EQ(encode_request(input, official_options(n)).text, expected) << "vector " << n;
  }
}

TEST(ChatEncode, SupplementaryCasesByteExact) {
  const auto cases = supplementary("encode");
  EXPECT_EQ(cases.size(), 28u);
  for (const ojson& c : cases) {
    const ChatPrompt p = encode_messages(c["messages"], options_of(c["options"]));
    EXPECT_EQ(p.text, c["expected"].get<std::string>()) << c["name"];
  }
}

TEST(ChatEncode, OfficialVector1TurnsParseBack) {
  const std::string prompt = read_file(kDir + "test_output_1.txt");
  const auto turns = thinking_turns(prompt);
  ASSERT_EQ(turns.size(), 2u);
  const ParsedCompletion t1 = parse_thinking(turns[0]);
  EXPECT_EQ(t1.reasoning_content,
            "The user wants to know the weather in Beijing. I should use the get_weather tool.");
  EXPECT_EQ(t1.content, "");
  ASSERT_EQ(t1.tool_calls.size(), 1u);
  EXPECT_EQ(t1.tool_calls[0].name, "get_weather");
  EXPECT_EQ(ojson::parse(t1.tool_calls[0].arguments), ojson::parse(R"({"location": "Beijing", "unit": "celsius"})"));
  EXPECT_TRUE(t1.warnings.empty());
  EXPECT_TRUE(t1.saw_eos);
  const ParsedCompletion t2 = parse_thinking(turns[1]);
  EXPECT_EQ(t2.reasoning_content, "Got the weather data. Let me format a nice response.");
  EXPECT_NE(t2.content.find("22°C"), std::string::npos);
  EXPECT_TRUE(t2.tool_calls.empty());
  EXPECT_TRUE(t2.warnings.empty());
}

TEST(ChatEncode, OfficialVector2DropsEarlierReasoning) {
  const std::string prompt = read_file(kDir + "test_output_2.txt");
  EXPECT_EQ(prompt.find("The user said hello"), std::string::npos);
  const auto turns = thinking_turns(prompt);
  ASSERT_EQ(turns.size(), 1u);
  const ParsedCompletion t = parse_thinking(turns[0]);
  EXPECT_EQ(t.reasoning_content, "The user asks about the capital of France. It is Paris.");
  EXPECT_EQ(t.content, "The capital of France is Paris.");
  EXPECT_TRUE(t.tool_calls.empty());
}

// Every assistant turn rendered with its reasoning parses back to the input message.
TEST(ChatEncode, RenderedAssistantTurnsParseBackToInput) {
  std::vector<std::pair<ojson, std::string>> convs;  // (messages with reasoning kept, prompt)
  for (int n : {1, 3}) {
    ojson input = ojson::parse(read_file(kDir + "test_input_" + std::to_string(n) + ".json"));
    ojson msgs = input.is_object() ? input["messages"] : input;
    convs.emplace_back(msgs, read_file(kDir + "test_output_" + std::to_string(n) + ".txt"));
  }
  for (const ojson& c : supplementary("encode"))
    if (c["name"] == "tools_final_answer_keeps_all_reasoning") convs.emplace_back(c["messages"], c["expected"]);
  for (const auto& [msgs, prompt] : convs) {
    std::vector<ojson> assistants;
    for (const ojson& m : msgs)
      if (m["role"] == "assistant") assistants.push_back(m);
    const auto turns = thinking_turns(prompt);
    ASSERT_EQ(turns.size(), assistants.size());
    for (size_t i = 0; i < turns.size(); ++i) {
      const ParsedCompletion r = parse_thinking(turns[i]);
      const ojson& m = assistants[i];
      EXPECT_EQ(r.reasoning_content, m.value("reasoning_content", ""));
      EXPECT_EQ(r.content, m.value("content", ""));
      const ojson calls = m.value("tool_calls", ojson::array());
      ASSERT_EQ(r.tool_calls.size(), calls.size());
      for (size_t k = 0; k < calls.size(); ++k) {
        EXPECT_EQ(r.tool_calls[k].name, calls[k]["function"]["name"]);
        EXPECT_EQ(ojson::parse(r.tool_calls[k].arguments),
                  ojson::parse(calls[k]["function"]["arguments"].get<std::string>()));
      }
      EXPECT_TRUE(r.warnings.empty());
    }
  }
}

TEST(ChatEncode, OfficialVector4ChatTurnParsesBack) {
  const ojson input = ojson::parse(read_file(kDir + "test_input_4.json"));
  const std::string prompt = read_file(kDir + "test_output_4.txt");
  const std::string open = assistant_prefix(ThinkingMode::chat);
  const size_t from = prompt.find(open) + open.size();
  const std::string turn = prompt.substr(from, prompt.find(ds4::kUser, from) - from);
  const ParsedCompletion r = parse_completion(turn, DsmlParserOptions{});
  EXPECT_EQ(r.content, input[3]["content"]);
  EXPECT_EQ(r.reasoning_content, "");
  EXPECT_TRUE(r.tool_calls.empty());
  EXPECT_TRUE(r.saw_eos);
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ChatEncode, GenerationPrefix) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  ChatOptions o;
  ChatPrompt p = encode_messages(msgs, o);
  EXPECT_EQ(p.generation_prefix, "<｜Assistant｜><think>");
  EXPECT_EQ(p.generation_prefix, assistant_prefix(ThinkingMode::thinking));
  EXPECT_TRUE(p.starts_in_reasoning);
  o.thinking_mode = ThinkingMode::chat;
  p = encode_messages(msgs, o);
  EXPECT_EQ(p.generation_prefix, "<｜Assistant｜></think>");
  EXPECT_FALSE(p.starts_in_reasoning);
  // Prefill: the prompt ends inside the assistant turn, nothing is appended.
  p = encode_messages(ojson::parse(R"([{"role": "user", "content": "a"},
      {"role": "assistant", "content": "Sure,", "wo_eos": true}])"), o);
  EXPECT_EQ(p.generation_prefix, "");
  EXPECT_FALSE(p.starts_in_reasoning);
  // An action task writes <think> but its answer has no reasoning part.
  o.thinking_mode = ThinkingMode::thinking;
  p = encode_messages(ojson::parse(R"([{"role": "user", "content": "a", "task": "action"}])"), o);
  EXPECT_EQ(p.generation_prefix, "<｜Assistant｜><think><｜action｜>");
  EXPECT_FALSE(p.starts_in_reasoning);
}

// Serving option: a system message after the user's prompt stays in that user turn, so each
// request of a conversation starts with the whole prompt of the one before (the prefix cache
// depends on it). The encoder itself writes no transition after a system message.
TEST(ChatEncode, SystemInUserTurnKeepsEachPromptAPrefixOfTheNext) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "read",
      "description": "Read a file", "parameters": {"type": "object", "properties": {}}}}])");
  const ojson turn1 = ojson::parse(R"([{"role": "user", "content": "read it"},
      {"role": "system", "content": "ENV"}])");
  ojson turn2 = turn1;
  turn2.push_back(ojson::parse(R"({"role": "assistant", "reasoning_content": "I will read.",
      "content": "", "tool_calls": [{"id": "c1", "type": "function",
      "function": {"name": "read", "arguments": "{}"}}]})"));
  turn2.push_back(ojson::parse(R"({"role": "tool", "tool_call_id": "c1", "content": "42"})"));
  ChatOptions o;
  const auto encode = [&](const ojson& msgs) {
    return encode_request(ojson{{"messages", msgs}, {"tools", tools}}, o);
  };
  // The encoder: no generation prompt after the system text, none before the assistant turn.
  ChatPrompt a = encode(turn1);
  EXPECT_EQ(a.generation_prefix, "");
  EXPECT_NE(encode(turn2).text.find("ENVI will read."), std::string::npos);

  o.system_in_user_turn = true;
  a = encode(turn1);
  EXPECT_EQ(a.generation_prefix, "<｜Assistant｜><think>");
  EXPECT_TRUE(a.starts_in_reasoning);
  const ChatPrompt b = encode(turn2);
  EXPECT_EQ(b.text.substr(0, a.text.size()), a.text);
  EXPECT_NE(b.text.find("ENV<｜Assistant｜><think>I will read.</think>"), std::string::npos);
  EXPECT_EQ(b.generation_prefix, "<｜Assistant｜><think>");

  // A system message with no user turn before it still gets a generation prompt; one before
  // the first user message is unchanged.
  a = encode(ojson::parse(R"([{"role": "system", "content": "only"}])"));
  EXPECT_EQ(a.generation_prefix, "<｜Assistant｜><think>");
  const ojson lead = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "u"}])");
  ChatOptions plain;
  EXPECT_EQ(encode(lead).text, encode_request(ojson{{"messages", lead}, {"tools", tools}}, plain).text);
}

TEST(ChatEncode, ReasoningEffortVariants) {
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  const std::string tail = "<｜User｜>Hi<｜Assistant｜><think>";
  const std::string bos(ds4::kBos);
  auto render = [&](ChatVariant v, std::optional<std::string> e) {
    ChatOptions o;
    o.variant = v;
    o.reasoning_effort = std::move(e);
    return encode_messages(msgs, o).text;
  };
  EXPECT_EQ(render(ChatVariant::v4, std::nullopt), bos + tail);
  EXPECT_EQ(render(ChatVariant::v4, "high"), bos + tail);
  EXPECT_EQ(render(ChatVariant::v4, "max"), bos + std::string(ds4::kEffortAbsoluteMax) + tail);
  EXPECT_THROW(render(ChatVariant::v4, "low"), Error);
  EXPECT_THROW(render(ChatVariant::v4, "xhigh"), Error);
  EXPECT_EQ(render(ChatVariant::v4_0731, std::nullopt), bos + tail);
  EXPECT_EQ(render(ChatVariant::v4_0731, "low"), bos + tail);
  EXPECT_EQ(render(ChatVariant::v4_0731, "high"), bos + std::string(ds4::kEffortAbsoluteMax) + tail);
  EXPECT_EQ(render(ChatVariant::v4_0731, "max"), bos + std::string(ds4::kEffortBeyondMax) + tail);
  EXPECT_THROW(render(ChatVariant::v4_0731, "medium"), Error);

  auto s = map_reasoning_effort("none", ChatVariant::v4);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->chat_mode);
  s = map_reasoning_effort("xhigh", ChatVariant::v4);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->effort, "max");
  EXPECT_FALSE(map_reasoning_effort("low", ChatVariant::v4));
  EXPECT_EQ(map_reasoning_effort("low", ChatVariant::v4_0731)->effort, "low");
  EXPECT_FALSE(map_reasoning_effort("medium", ChatVariant::v4_0731));
}

TEST(ChatEncode, RequestToolsAndDefaultSystem) {
  const ojson tools = ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {}}}])");
  const std::string block = std::string(ds4::kToolsBlockPrefix) + R"({"name": "f", "parameters": {}})" +
                            std::string(ds4::kToolsBlockSuffix);
  const std::string bos(ds4::kBos), gen = "<｜User｜>q<｜Assistant｜></think>";
  ChatOptions o;
  o.thinking_mode = ThinkingMode::chat;
  ojson req = {{"messages", ojson::parse(R"([{"role": "user", "content": "q"}])")}, {"tools", tools}};
  EXPECT_EQ(encode_request(req, o).text, bos + "\n\n" + block + gen);  // an empty system is inserted
  o.default_system = "You are DeepSeek.";
  EXPECT_EQ(encode_request(req, o).text, bos + "You are DeepSeek.\n\n" + block + gen);
  req.erase("tools");
  EXPECT_EQ(encode_request(req, o).text, bos + "You are DeepSeek." + gen);
  req["messages"] = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "q"}])");
  EXPECT_EQ(encode_request(req, o).text, bos + "S" + gen);  // an existing system wins
  o.default_system.reset();
  EXPECT_EQ(encode_request(req, o).text, bos + "S" + gen);
  // response_format at the top level; {"type": "text"} means none.
  req["response_format"] = ojson::parse(R"({"type": "json_object"})");
  EXPECT_EQ(encode_request(req, o).text,
            bos + "S\n\n" + std::string(ds4::kResponseFormatPrefix) + R"({"type": "json_object"})" + gen);
  req["response_format"] = ojson::parse(R"({"type": "text"})");
  EXPECT_EQ(encode_request(req, o).text, bos + "S" + gen);
  // Tools both at the top level and on messages[0] is ambiguous.
  req["tools"] = tools;
  req["messages"][0]["tools"] = tools;
  EXPECT_THROW(encode_request(req, o), Error);
}

TEST(ChatEncode, ArgumentsAsObjectOrString) {
  ChatOptions o;
  o.thinking_mode = ThinkingMode::chat;
  ojson a = ojson::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
      "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{\"x\": [1, 2.0], \"y\": \"s\"}"}}]}])");
  ojson b = a;
  b[1]["tool_calls"][0]["function"]["arguments"] = ojson::parse(R"({"x": [1, 2.0], "y": "s"})");
  EXPECT_EQ(encode_messages(a, o).text, encode_messages(b, o).text);
  EXPECT_NE(encode_messages(a, o).text.find(R"(<｜DSML｜parameter name="x" string="false">[1, 2.0]</｜DSML｜parameter>)"),
            std::string::npos);
}

// Everything copied from the request is a literal span (tokenized without control tokens);
// the template's structure around it is not.
TEST(ChatEncode, LiteralSpansAreTheRequestsText) {
  const ojson req = ojson::parse(R"({
    "tools": [{"type": "function", "function": {"name": "f", "description": "D</think>", "parameters": {"type": "object"}}}],
    "messages": [
      {"role": "system", "content": "SYS<｜User｜>"},
      {"role": "user", "content": "U<｜Assistant｜>"},
      {"role": "assistant", "reasoning_content": "R<think>", "content": "C",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"k\": \"V｜DSML｜\", \"n\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "T<｜end▁of▁sentence｜>"},
      {"role": "latest_reminder", "content": "L<｜latest_reminder｜>"}]})");
  const ChatPrompt p = encode_request(req, ChatOptions{});
  std::vector<std::string> spans;
  size_t prev = 0;
  for (const TextSpan& s : p.literal) {
    EXPECT_LT(s.begin, s.end);
    EXPECT_GE(s.begin, prev);
    prev = s.end;
    spans.push_back(p.text.substr(s.begin, s.end - s.begin));
  }
  const std::vector<std::string> want = {
      "SYS<｜User｜>", R"({"name": "f", "description": "D</think>", "parameters": {"type": "object"}})",
      "U<｜Assistant｜>", "R<think>", "C", "f", "k", "V｜DSML｜", "n", "1", "T<｜end▁of▁sentence｜>",
      "L<｜latest_reminder｜>"};
  EXPECT_EQ(spans, want);
  // Outside the spans: only the template (BOS, markers, tools text, DSML markup, EOS).
  std::string outside;
  prev = 0;
  for (const TextSpan& s : p.literal) outside += p.text.substr(prev, s.begin - prev), prev = s.end;
  outside += p.text.substr(prev);
  EXPECT_EQ(outside.find("SYS"), std::string::npos);
  EXPECT_EQ(outside.find("V｜DSML｜"), std::string::npos);
  EXPECT_EQ(outside.rfind(std::string(ds4::kBos), 0), 0u);
  // The text itself is what the official encoder writes (render stays byte-exact).
  ojson messages = req["messages"];
  messages[0]["tools"] = req["tools"];
  EXPECT_EQ(p.text, encode_messages(messages, ChatOptions{}).text);
}

TEST(ChatEncode, MalformedInputIsAnError) {
  ChatOptions o;
  const char* bad[] = {
      R"({"role": "user", "content": "q"})",                                   // not an array
      R"([{"role": "wizard", "content": "q"}])",                               // unknown role
      R"([{"content": "q"}])",                                                 // no role
      R"([{"role": 3, "content": "q"}])",                                      // role not a string
      R"([{"role": "user", "content": 42}])",                                  // content of a wrong type
      R"([{"role": "user", "content": [{"type": "text"}]}])",                  // text part without text
      R"(["hello"])",                                                          // message not an object
      R"([{"role": "developer", "content": ""}])",                             // developer without content
      R"([{"role": "user", "content": "q", "task": "dance"}])",                // unknown task
      R"([{"role": "system", "content": "s", "tools": {"name": "f"}}])",       // tools not an array
      R"([{"role": "system", "content": "s", "tools": [{"type": "function"}]}])",  // tool without function
      R"([{"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]}])",  // no name
      R"([{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": 5}}]}])",
      R"([{"role": "assistant", "content": "", "tool_calls": {"function": {"name": "f"}}}])",
      R"([{"role": "assistant", "content": "", "reasoning_content": 7}])",
      R"([{"role": "assistant", "content": "a", "wo_eos": "yes"}])",
      R"([{"role": "tool", "content": "r", "tool_call_id": 12}])",
  };
  for (const char* b : bad) {
    try {
      encode_messages(ojson::parse(b), o);
      ADD_FAILURE() << "accepted: " << b;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("messages"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(encode_request(ojson::parse(R"({"tools": []})"), o), Error);
  EXPECT_THROW(encode_request(ojson::parse(R"({"messages": [], "tools": {"a": 1}})"), o), Error);
  // Absurd nesting is refused before anything recursive touches it.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  ojson req = {{"messages", ojson::array({{{"role", "user"}, {"content", "q"}}})}};
  req["tools"] = ojson::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  req["tools"][0]["function"]["parameters"] = ojson::parse(deep);
  EXPECT_THROW(encode_request(req, o), Error);
  EXPECT_THROW(encode_request(ojson::parse(R"("hi")"), o), Error);
  EXPECT_THROW(parse_json("{oops", "request"), Error);
  EXPECT_THROW(parse_thinking_mode("fast"), Error);
  EXPECT_THROW(parse_chat_variant("v5"), Error);
}

TEST(ChatJson, PythonJsonDumps) {
  EXPECT_EQ(py_json_dumps(ojson::parse(R"({"a": [1, 2.5, true, null], "b": {}, "c": []})")),
            R"({"a": [1, 2.5, true, null], "b": {}, "c": []})");
  EXPECT_EQ(py_json_dumps(ojson("a\"b\\c/d\n\r\t\b\f\x01\x1f\x7f é中😀")),
            "\"a\\\"b\\\\c/d\\n\\r\\t\\b\\f\\u0001\\u001f\x7f é中😀\"");
  EXPECT_EQ(py_json_dumps(ojson(std::string("bad\xff byte"))), "\"bad\xEF\xBF\xBD byte\"");
  const std::pair<double, const char*> floats[] = {
      {1.0, "1.0"},       {-0.0, "-0.0"},         {0.1, "0.1"},          {1e-7, "1e-07"},
      {1e16, "1e+16"},    {1e15, "1000000000000000.0"}, {0.0001, "0.0001"}, {0.00001, "1e-05"},
      {123.456, "123.456"}, {1.5e300, "1.5e+300"}, {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"},
      {12345678901234567.0, "1.2345678901234568e+16"}, {2.5e-5, "2.5e-05"},
  };
  for (const auto& [d, s] : floats) EXPECT_EQ(py_float_repr(d), s) << s;
  EXPECT_EQ(py_json_dumps(ojson::parse("[18446744073709551615, -9223372036854775808, 1E2]")),
            "[18446744073709551615, -9223372036854775808, 100.0]");
}

namespace {

// Runs the CLI with `args`, returns its stdout bytes and exit status.
std::pair<std::string, int> run_cli(const std::string& args) {
  const std::string cmd = std::string(HS_CLI_PATH) + " " + args;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"", -1};
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return {out, pclose(p)};
}

}  // namespace

TEST(ChatCli, RenderOfficialVector) {
  for (int n : {1, 4}) {
    const std::string mode = n == 4 ? "chat" : "thinking";
    auto [out, rc] = run_cli("render --in " + kDir + "test_input_" + std::to_string(n) + ".json --thinking-mode " + mode);
    EXPECT_EQ(rc, 0);
    EXPECT_EQ(out, read_file(kDir + "test_output_" + std::to_string(n) + ".txt")) << n;
  }
  auto [help, rc] = run_cli("render --help");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(help.find("--keep-thinking"), std::string::npos);
  EXPECT_NE(run_cli("render --in /nonexistent.json 2>/dev/null").second, 0);
}

TEST(ChatCli, ParseCompletion) {
  const auto path = std::filesystem::temp_directory_path() / ("hs_chat_cli_" + std::to_string(getpid()) + ".txt");
  for (const ojson& c : supplementary("parse")) {
    if (c["name"] != "thinking_two_invokes") continue;
    std::ofstream(path, std::ios::binary) << c["completion"].get<std::string>();
    auto [out, rc] = run_cli("parse-completion --thinking-mode thinking --seed 7 --in " + path.string());
    EXPECT_EQ(rc, 0);
    const ojson got = ojson::parse(out);
    const ojson& want = c["expected"];
    EXPECT_EQ(got["reasoning_content"], want["reasoning_content"]);
    EXPECT_EQ(got["content"], want["content"]);
    ASSERT_EQ(got["tool_calls"].size(), want["tool_calls"].size());
    for (size_t k = 0; k < got["tool_calls"].size(); ++k) {
      EXPECT_EQ(got["tool_calls"][k]["function"], want["tool_calls"][k]["function"]);
      EXPECT_EQ(got["tool_calls"][k]["type"], "function");
      EXPECT_EQ(got["tool_calls"][k]["id"], make_tool_call_id(7, k));
    }
  }
  std::filesystem::remove(path);
  EXPECT_EQ(run_cli("parse-completion --help").second, 0);
}

namespace {

// The tool-result texts of a prompt, in the order they appear.
std::vector<std::string> result_texts(const std::string& prompt) {
  std::vector<std::string> out;
  const std::string open(ds4::kToolResultOpen), close(ds4::kToolResultClose);
  for (size_t at = prompt.find(open); at != std::string::npos; at = prompt.find(open, at)) {
    at += open.size();
    const size_t end = prompt.find(close, at);
    out.push_back(prompt.substr(at, end - at));
  }
  return out;
}

ojson call(const std::string& id) {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{}"}}}};
}
ojson result(const std::string& id, const std::string& text) {
  return {{"role", "tool"}, {"tool_call_id", id}, {"content", text}};
}

}  // namespace

// sort_tool_results_by_call_order() as DeepSeek's encoder does it: results follow the order of
// the last assistant message's calls; an id no call has sorts as position 0 (stable, so before
// the first call's result in arrival order); a repeated call id takes its later position; a
// text block between results keeps its place.
TEST(ChatEncode, ToolResultsFollowTheCallOrder) {
  ChatOptions o;
  o.thinking_mode = ThinkingMode::chat;
  ojson msgs = ojson::array();
  msgs.push_back({{"role", "user"}, {"content", "go"}});
  msgs.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", {call("a"), call("b"), call("c"), call("a")}}});
  for (const char* id : {"c", "zz", "b", "a"}) msgs.push_back(result(id, std::string("r-") + id));
  EXPECT_EQ(result_texts(encode_messages(msgs, o).text), (std::vector<std::string>{"r-zz", "r-b", "r-c", "r-a"}));

  // A user text between two results stays in its slot; the results around it swap.
  ojson mixed = ojson::array();
  mixed.push_back({{"role", "user"}, {"content", "go"}});
  mixed.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", {call("x"), call("y")}}});
  mixed.push_back(result("y", "r-y"));
  mixed.push_back({{"role", "user"}, {"content", "NOTE"}});
  mixed.push_back(result("x", "r-x"));
  const std::string p = encode_messages(mixed, o).text;
  EXPECT_EQ(result_texts(p), (std::vector<std::string>{"r-x", "r-y"}));
  const size_t note = p.find("NOTE");
  EXPECT_TRUE(note > p.find("r-x") && note < p.find("r-y")) << p;

  // The order of the latest calls counts: a later assistant message resets it.
  msgs.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", {call("q"), call("p")}}});
  msgs.push_back(result("p", "r-p"));
  msgs.push_back(result("q", "r-q"));
  const std::vector<std::string> all = result_texts(encode_messages(msgs, o).text);
  EXPECT_EQ(std::vector<std::string>(all.end() - 2, all.end()), (std::vector<std::string>{"r-q", "r-p"}));
}

// 16K results in one turn, sent in reverse call order (the issue's 2.2 MB request took 9.5 s of
// CPU with a linear search per comparison): every result lands in its call's place. This runs
// in well under a second with the hash map; nothing here measures time.
TEST(ChatEncode, SixteenThousandToolResultsAreReordered) {
  constexpr int kN = 16384;
  ChatOptions o;
  o.thinking_mode = ThinkingMode::chat;
  ojson calls = ojson::array();
  for (int i = 0; i < kN; ++i) calls.push_back(call("call_" + std::to_string(i)));
  ojson msgs = ojson::array();
  msgs.push_back({{"role", "user"}, {"content", "go"}});
  msgs.push_back({{"role", "assistant"}, {"content", ""}, {"tool_calls", std::move(calls)}});
  for (int i = kN; i-- > 0;) msgs.push_back(result("call_" + std::to_string(i), "result " + std::to_string(i)));
  const std::vector<std::string> got = result_texts(encode_messages(msgs, o).text);
  ASSERT_EQ(got.size(), static_cast<size_t>(kN));
  for (int i = 0; i < kN; ++i) ASSERT_EQ(got[static_cast<size_t>(i)], "result " + std::to_string(i)) << i;
}
