// The Responses API below HTTP: request items -> chat messages (one assistant turn per run of
// reasoning / message / function_call items), tools and tool_choice, formats and effort, the
// bounded store with previous_response_id, the output items and their event stream; and the
// test-only forced-output script the agent-CLI tests drive the server with.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "server/forced_script.h"
#include "server/json_util.h"
#include "server/response_store.h"
#include "server/responses_api.h"
#include "server_util.h"
#include "tokenizer/chat_tokens.h"

using namespace hs;
using namespace hs::server;

namespace {

ResponsesRequest parse(const ojson& req) { return parse_responses_request(builtin().svc, req); }

TEST(ResponsesConvert, ItemsBecomeChatMessages) {
  const ojson req = ojson::parse(R"({
    "model": "gpt-5-codex", "instructions": "Be careful.",
    "input": [
      {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Repo rules."}]},
      {"role": "user", "content": [{"type": "input_text", "text": "Fix it"}, {"type": "input_text", "text": "now"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "short"}],
       "content": [{"type": "reasoning_text", "text": "I should look."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
      {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "{\"cmd\": \"ls\"}"},
      {"type": "function_call", "call_id": "c2", "name": "sh", "arguments": ""},
      {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "b.txt"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "from the summary"}]},
      {"type": "message", "role": "assistant", "content": "Done"}]})");
  const ResponsesRequest r = parse(req);
  const ojson want = ojson::parse(R"([
    {"role": "system", "content": "Be careful.\n\nRepo rules."},
    {"role": "user", "content": "Fix it\n\nnow"},
    {"role": "assistant", "content": "Looking.", "reasoning_content": "I should look.",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "sh", "arguments": "{\"cmd\": \"ls\"}"}},
                    {"id": "c2", "type": "function", "function": {"name": "sh", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    {"role": "tool", "tool_call_id": "c2", "content": "b.txt"},
    {"role": "assistant", "content": "Done", "reasoning_content": "from the summary", "wo_eos": true}])");
  EXPECT_EQ(r.in.messages, want);
  EXPECT_EQ(r.conversation.size(), 10u);  // the input items as sent, for the store
  EXPECT_TRUE(r.store);
  EXPECT_FALSE(r.stream);
  // The messages render (the chat encoder takes them as they are).
  EXPECT_FALSE(build_chat_prompt(builtin().tok, r.in).ids.empty());
}

TEST(ResponsesConvert, ToolsChoiceFormatAndEffort) {
  const ojson fn = {{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}};
  ojson req = {{"input", "hi"},
               {"tools", ojson::array({fn, {{"type", "web_search"}}, {{"type", "namespace"}, {"name", "ns"}, {"tools", ojson::array()}}})}};
  ResponsesRequest r = parse(req);
  ASSERT_EQ(r.in.tools.size(), 1u);
  EXPECT_EQ(r.in.tools[0]["function"]["name"], "f");
  EXPECT_EQ(r.echo["tools"].size(), 3u);  // the Response repeats what was sent
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::text);

  req["tool_choice"] = {{"type", "function"}, {"name", "f"}};
  r = parse(req);
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::tool_call);
  EXPECT_EQ(r.format.name, "f");
  req["tool_choice"] = {{"type", "allowed_tools"}, {"mode", "auto"}, {"tools", ojson::array({{{"type", "function"}, {"name", "g"}}})}};
  EXPECT_TRUE(parse(req).in.tools.is_null());
  req["tool_choice"] = "none";
  EXPECT_TRUE(parse(req).in.tools.is_null());
  req["tool_choice"] = {{"type", "web_search"}};
  EXPECT_THROW(parse(req), ApiError);

  const ojson schema = {{"type", "object"}, {"properties", {{"a", {{"type", "string"}}}}}};
  const ojson format = {{"type", "json_schema"}, {"name", "x"}, {"schema", schema}, {"strict", true}};
  r = parse({{"input", "hi"}, {"text", {{"format", format}}}});
  EXPECT_EQ(r.format.kind, OutputFormat::Kind::json_schema);
  EXPECT_EQ(r.in.response_format["json_schema"]["schema"], schema);

  EXPECT_FALSE(parse({{"input", "hi"}}).in.thinking);  // the server's default
  r = parse({{"input", "hi"}, {"reasoning", {{"effort", "xhigh"}}}});
  EXPECT_TRUE(r.in.thinking);
  EXPECT_EQ(r.in.effort, "max");
  EXPECT_FALSE(parse({{"input", "hi"}, {"reasoning", {{"effort", "none"}}}}).in.thinking);
  r = parse({{"input", "hi"}, {"reasoning", {{"effort", "medium"}}}});
  EXPECT_TRUE(r.in.thinking);
  EXPECT_FALSE(r.in.effort);  // not in the v4 table: the default effort
}

TEST(ResponsesConvert, PreviousResponseContinuesItsConversation) {
  Builtin& b = builtin();
  const ojson earlier = ojson::array({{{"type", "message"}, {"role", "user"}, {"content", "q1"}},
                                      {{"type", "message"}, {"role", "assistant"}, {"content", "a1"}}});
  b.svc.responses().put("resp_prev", {{{"id", "resp_prev"}}, earlier});
  const ResponsesRequest r = parse({{"previous_response_id", "resp_prev"}, {"input", "q2"}});
  ASSERT_EQ(r.in.messages.size(), 3u);
  EXPECT_EQ(r.in.messages[0]["content"], "q1");
  EXPECT_EQ(r.in.messages[1]["content"], "a1");
  EXPECT_FALSE(r.in.messages[1].contains("wo_eos"));  // not the last: a finished turn
  EXPECT_EQ(r.in.messages[2]["content"], "q2");
  EXPECT_EQ(r.conversation.size(), 3u);
  try {
    parse({{"previous_response_id", "resp_gone"}, {"input", "q"}});
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param(), "previous_response_id");
  }
}

TEST(ResponseStore, BoundedByCountAndBytesOldestFirst) {
  ResponseStore s(2, 1 << 20);
  s.put("a", {{{"n", 1}}, ojson::array()});
  s.put("b", {{{"n", 2}}, ojson::array()});
  ASSERT_TRUE(s.get("a"));  // a is now the most recent
  s.put("c", {{{"n", 3}}, ojson::array()});
  EXPECT_TRUE(s.get("a"));
  EXPECT_FALSE(s.get("b"));
  EXPECT_TRUE(s.get("c"));
  EXPECT_TRUE(s.erase("a"));
  EXPECT_FALSE(s.erase("a"));
  EXPECT_EQ(s.size(), 1u);
  ResponseStore tiny(10, 64);  // bytes: only the newest stays
  tiny.put("x", {{{"text", std::string(50, 'x')}}, ojson::array()});
  tiny.put("y", {{{"text", std::string(50, 'y')}}, ojson::array()});
  EXPECT_FALSE(tiny.get("x"));
  EXPECT_TRUE(tiny.get("y"));
  ResponseStore none(0, 1 << 20);
  none.put("z", {{{"n", 1}}, ojson::array()});
  EXPECT_FALSE(none.get("z"));
}

// The events a stream carries, parsed back.
std::vector<ojson> events_of(const std::string& sse) {
  std::vector<ojson> out;
  for (size_t at = sse.find("data: "); at != std::string::npos; at = sse.find("data: ", at + 1)) {
    const size_t end = sse.find('\n', at);
    out.push_back(ojson::parse(sse.substr(at + 6, end - at - 6)));
  }
  return out;
}

TEST(ResponseOutput, ItemsAndTheirEventsInOrder) {
  ResponseOutput out(builtin().svc);
  GenBatch b;
  b.events = {{GenEvent::Kind::reasoning, "Hm", {}}, {GenEvent::Kind::reasoning, "m.", {}}, {GenEvent::Kind::text, "Hi", {}}};
  std::string sse = out.feed(b);
  b.events = {{GenEvent::Kind::text, "!", {}}, {GenEvent::Kind::tool_call, {}, {"call_x", "f", "{\"a\": 1}"}}};
  sse += out.feed(b);
  sse += out.close();
  EXPECT_EQ(out.close(), "");  // nothing open any more
  const ojson& items = out.items();
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0]["type"], "reasoning");
  EXPECT_EQ(items[0]["content"][0]["text"], "Hmm.");
  EXPECT_EQ(items[1]["content"][0]["text"], "Hi!");
  EXPECT_EQ(items[1]["status"], "completed");
  EXPECT_EQ(items[2]["type"], "function_call");
  EXPECT_EQ(items[2]["call_id"], "call_x");
  EXPECT_EQ(items[2]["arguments"], "{\"a\": 1}");
  std::vector<std::string> types;
  const auto ev = events_of(sse);
  for (size_t i = 0; i < ev.size(); ++i) {
    EXPECT_EQ(ev[i]["sequence_number"], i);
    types.push_back(ev[i]["type"]);
  }
  const std::vector<std::string> want = {
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done"};
  EXPECT_EQ(types, want);
  EXPECT_EQ(ev[2]["delta"], "Hmm.");  // one delta for a batch's run of one kind
  EXPECT_EQ(ev[5]["item"]["id"], items[0]["id"]);
}

TEST(ForcedScript, FirstRuleMatchingTheLastUserTurnWins) {
  const std::string path = testing::TempDir() + "forced_script.json";
  std::ofstream(path) << R"([{"when": "RESULT", "output": "done"}, {"when": "task", "output": "call", "hold_ms": 5},
                              {"output": "other"}])";
  const auto rules = load_forced_script(path);
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[1].hold_ms, 5);
  const std::string u(ds4::kUser);
  // Only the last user turn counts: the task in an earlier turn does not.
  EXPECT_EQ(match_forced_rule(rules, u + "do the task" + u + "<tool_result>RESULT</tool_result>")->output, "done");
  EXPECT_EQ(match_forced_rule(rules, u + "RESULT" + u + "do the task")->output, "call");
  EXPECT_EQ(match_forced_rule(rules, u + "chat")->output, "other");
  EXPECT_EQ(match_forced_rule({rules[0]}, u + "chat"), nullptr);
  std::ofstream(path) << R"([{"when": 5, "output": "x"}])";
  EXPECT_THROW(load_forced_script(path), Error);
  std::ofstream(path) << R"({"output": "x"})";
  EXPECT_THROW(load_forced_script(path), Error);
  EXPECT_THROW(load_forced_script(path + ".missing"), Error);
  std::remove(path.c_str());
}

}  // namespace
