// Server pieces the coding-agent clients need, below HTTP: each API's context-overflow wording
// and --clamp-max-tokens, model names, the structured-output surfaces (-> OutputFormat),
// /v1/messages with system messages, media blocks and signed thinking, the thinking budget, and
// the held-back prefill of the keep-alive tests.
#include <gtest/gtest.h>

#include <chrono>

#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/openai_api.h"
#include "server/output_format.h"
#include "server/thinking_signature.h"
#include "server_util.h"
#include "tokenizer/chat_tokens.h"

using namespace hs;
using namespace hs::server;

namespace {

// The message of the ApiError that `fn` throws ("" when it throws none).
template <typename Fn>
std::string api_error_of(Fn&& fn, int* status = nullptr) {
  try {
    fn();
  } catch (const ApiError& e) {
    if (status) *status = e.status();
    return e.what();
  }
  return "";
}

TEST(ContextLimit, EachApiWordsTheOverflowItsOwnWay) {
  Builtin& b = builtin();
  auto overflow = [&](ApiStyle api, int max_tokens) {
    GenerationSpec s = forced_chat("x");
    s.max_tokens = max_tokens;
    const size_t p = s.prompt.size();
    int status = 0;
    const std::string msg = api_error_of([&] { b.svc.start(std::move(s), "test", api); }, &status);
    EXPECT_EQ(status, 400) << msg;
    return std::make_pair(msg, p);
  };
  auto [anth, p] = overflow(ApiStyle::messages, 5000);
  // Claude Code parses exactly this sentence and retries with a smaller max_tokens.
  EXPECT_EQ(anth, cat("input length and `max_tokens` exceed context limit: ", p, " + 5000 > 1024, decrease input length or "
                      "`max_tokens` and try again"));
  EXPECT_EQ(overflow(ApiStyle::chat, 5000).first,
            cat("This model's maximum context length is 1024 tokens. However, you requested ", p + 5000, " tokens (", p,
                " in the messages, 5000 in the completion). Please reduce the length of the messages or completion."));
  EXPECT_NE(overflow(ApiStyle::completions, 5000).first.find("(" + std::to_string(p) + " in your prompt, 5000 for the completion)"),
            std::string::npos);
  const std::string resp = overflow(ApiStyle::responses, 5000).first;
  EXPECT_EQ(resp.rfind("Your input exceeds the context window of this model.", 0), 0u) << resp;
  EXPECT_NE(resp.find(cat(p, " input tokens + 5000 max_output_tokens > the context size of 1024 tokens")), std::string::npos) << resp;

  // A prompt with no room left: Anthropic's "prompt is too long", OpenAI's "resulted in".
  GenerationSpec big = forced_chat("x");
  big.prompt.resize(1024, big.prompt.back());
  EXPECT_EQ(api_error_of([&] { b.svc.start(GenerationSpec(big), "test", ApiStyle::messages); }),
            "prompt is too long: 1024 tokens > 1023 maximum");
  EXPECT_NE(api_error_of([&] { b.svc.default_max_tokens(1024, ApiStyle::chat); }).find("your messages resulted in 1024 tokens"),
            std::string::npos);
  // The code OpenAI clients (Codex) look for.
  try {
    b.svc.start(GenerationSpec(big), "test", ApiStyle::responses);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), "context_length_exceeded");
    EXPECT_EQ(e.param(), "input");
  }
}

TEST(ContextLimit, ClampShrinksMaxTokensToTheRoomLeft) {
  Builtin& b = builtin();
  ServiceConfig cfg;
  cfg.clamp_max_tokens = true;
  Service clamping(b.sched, b.tok, cfg);
  GenerationSpec s = forced_chat("one two three");
  s.forced.reset();
  s.ignore_eos = true;
  s.max_tokens = 100000;
  const int64_t room = 1024 - static_cast<int64_t>(s.prompt.size());
  auto [ev, o] = drain(clamping.start(std::move(s), "test", ApiStyle::messages));
  EXPECT_EQ(o.finish, Finish::length);
  EXPECT_EQ(o.completion_tokens, room);
  // Clamping never makes room that is not there.
  GenerationSpec full = forced_chat("x");
  full.prompt.resize(1024, full.prompt.back());
  EXPECT_NE(api_error_of([&] { clamping.start(std::move(full), "test", ApiStyle::messages); }).find("prompt is too long"),
            std::string::npos);
}

TEST(ModelNames, AnyNameUnlessStrictAliasesAlwaysServed) {
  Builtin& b = builtin();
  EXPECT_NO_THROW(b.svc.check_model(std::string("claude-opus-5-5")));
  ServiceConfig cfg;
  cfg.model_name = "ds4";
  cfg.model_aliases = {"claude-sonnet-4-5"};
  cfg.strict_model_name = true;
  Service strict(b.sched, b.tok, cfg);
  EXPECT_NO_THROW(strict.check_model(std::string("ds4")));
  EXPECT_NO_THROW(strict.check_model(std::string("claude-sonnet-4-5")));
  EXPECT_NO_THROW(strict.check_model(std::nullopt));
  int status = 0;
  EXPECT_NE(api_error_of([&] { strict.check_model(std::string("gpt-9")); }, &status).find("'gpt-9' does not exist"),
            std::string::npos);
  EXPECT_EQ(status, 404);
  // /v1/models lists the name then the aliases, in either API's shape.
  const ojson oa = ojson::parse(openai_models(strict, false).body);
  ASSERT_EQ(oa["data"].size(), 2u);
  EXPECT_EQ(oa["data"][1]["id"], "claude-sonnet-4-5");
  EXPECT_EQ(oa["data"][0]["object"], "model");
  const ojson an = ojson::parse(openai_models(strict, true).body);
  EXPECT_EQ(an["data"][0]["type"], "model");
  EXPECT_EQ(an["data"][0]["display_name"], "ds4");
  EXPECT_EQ(an["first_id"], "ds4");
  EXPECT_EQ(an["last_id"], "claude-sonnet-4-5");
  EXPECT_EQ(an["has_more"], false);
  EXPECT_EQ(ojson::parse(openai_model(strict, "claude-sonnet-4-5", true).body)["id"], "claude-sonnet-4-5");
  EXPECT_THROW(openai_model(strict, "gpt-9", false), ApiError);
}

TEST(OutputFormat, EverySurfaceMapsToOneShape) {
  const ojson schema = {{"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};
  const ojson rf = {{"type", "json_schema"}, {"json_schema", {{"name", "thing"}, {"schema", schema}, {"strict", true}}}};
  OutputFormat f = openai_response_format(&rf);
  EXPECT_EQ(f.kind, OutputFormat::Kind::json_schema);
  EXPECT_EQ(f.name, "thing");
  EXPECT_EQ(f.schema, schema);
  EXPECT_TRUE(f.strict);
  EXPECT_EQ(prompt_response_format(f), rf);  // the prompt shows what a chat request would
  const ojson jo = {{"type", "json_object"}};
  EXPECT_EQ(openai_response_format(&jo).kind, OutputFormat::Kind::json_object);
  const ojson text = {{"type", "text"}};
  EXPECT_EQ(openai_response_format(&text).kind, OutputFormat::Kind::text);
  EXPECT_EQ(openai_response_format(nullptr).kind, OutputFormat::Kind::text);

  const ojson tf = {{"type", "json_schema"}, {"name", "thing"}, {"schema", schema}, {"strict", false}};
  f = responses_text_format(&tf);
  EXPECT_EQ(f.kind, OutputFormat::Kind::json_schema);
  EXPECT_EQ(f.name, "thing");
  EXPECT_FALSE(f.strict);

  const ojson af = {{"type", "json_schema"}, {"schema", schema}};
  f = anthropic_output_format(&af, "output_config.format");
  EXPECT_EQ(f.kind, OutputFormat::Kind::json_schema);
  EXPECT_EQ(f.schema, schema);

  for (const ojson& bad : {ojson{{"type", "xml"}}, ojson{{"type", "json_schema"}}, ojson{{"type", "json_schema"}, {"json_schema", 5}},
                           ojson{{"type", "json_schema"}, {"json_schema", {{"schema", "x"}}}}})
    EXPECT_THROW(openai_response_format(&bad), ApiError) << bad.dump();
  const ojson no_schema = {{"type", "json_schema"}};
  EXPECT_NE(api_error_of([&] { anthropic_output_format(&no_schema, "output_format"); }).find("schema"), std::string::npos);

  // tool_choice naming a tool, or "required" with one tool, forces that call.
  const ojson tools = ojson::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", schema}}}},
                                    {{"type", "function"}, {"function", {{"name", "g"}}}}});
  const ojson named = {{"type", "function"}, {"function", {{"name", "f"}}}};
  EXPECT_EQ(forced_tool_name(&named, tools), "f");
  f = forced_tool_call(tools, "f");
  EXPECT_EQ(f.kind, OutputFormat::Kind::tool_call);
  EXPECT_EQ(f.name, "f");
  EXPECT_EQ(f.schema, schema);
  EXPECT_TRUE(forced_tool_call(tools, "g").schema.is_null());
  const ojson required = "required", automatic = "auto";
  EXPECT_FALSE(forced_tool_name(&required, tools));
  EXPECT_EQ(forced_tool_name(&required, ojson::array({tools[1]})), "g");
  EXPECT_FALSE(forced_tool_name(&automatic, tools));
}

TEST(AnthropicRequest, FormatsAndForcedToolsReachTheSpec) {
  Builtin& b = builtin();
  const ojson schema = {{"type", "object"}};
  ojson req = {{"max_tokens", 5},
               {"messages", ojson::array({{{"role", "user"}, {"content", "q"}}})},
               {"output_config", {{"format", {{"type", "json_schema"}, {"schema", schema}}}, {"effort", "high"}}}};
  ChatInput in = anthropic_chat_input(b.svc, req);
  EXPECT_EQ(anthropic_output_spec(req, in).kind, OutputFormat::Kind::json_schema);
  EXPECT_EQ(in.response_format["json_schema"]["schema"], schema);  // and the prompt says so
  EXPECT_EQ(in.effort, "high");
  req.erase("output_config");
  req["output_format"] = {{"type", "json_schema"}, {"schema", schema}};
  in = anthropic_chat_input(b.svc, req);
  EXPECT_EQ(anthropic_output_spec(req, in).kind, OutputFormat::Kind::json_schema);
  req["tools"] = ojson::array({{{"name", "f"}, {"input_schema", schema}}});
  req["tool_choice"] = {{"type", "tool"}, {"name", "f"}};
  in = anthropic_chat_input(b.svc, req);
  const OutputFormat f = anthropic_output_spec(req, in);
  EXPECT_EQ(f.kind, OutputFormat::Kind::tool_call);
  EXPECT_EQ(f.name, "f");
  req["output_config"] = {{"effort", "extreme"}};
  EXPECT_THROW(anthropic_chat_input(b.svc, req), ApiError);
}

TEST(ThinkingSignature, CarriesTheReasoningAndRejectsOthers) {
  for (const std::string& text : std::vector<std::string>{"", "a", "ab", "abc", "Two plus two: ｜DSML｜ </think> ünïcode\n", std::string(1000, 'x')}) {
    const std::string sig = thinking_signature(text);
    EXPECT_FALSE(sig.empty());
    EXPECT_EQ(reasoning_from_signature(sig), text);
  }
  std::string damaged = thinking_signature("hello");
  damaged.back() = damaged.back() == 'A' ? 'B' : 'A';
  EXPECT_FALSE(reasoning_from_signature(damaged));
  EXPECT_FALSE(reasoning_from_signature("EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"));  // Anthropic's
  EXPECT_FALSE(reasoning_from_signature(""));
}

TEST(AnthropicConvert, SystemMessagesMediaAndOmittedThinking) {
  Builtin& b = builtin();
  const std::string sig = thinking_signature("I reasoned.");
  const ojson req = {
      {"max_tokens", 5},
      {"messages",
       ojson::array({{{"role", "user"}, {"content", ojson::array({{{"type", "text"}, {"text", "look"}},
                                                                 {{"type", "image"}, {"source", {{"type", "base64"}}}}})}},
                     {{"role", "assistant"},
                      {"content", ojson::array({{{"type", "thinking"}, {"thinking", ""}, {"signature", sig}},
                                                {{"type", "text"}, {"text", "seen"}}})}},
                     {{"role", "user"},
                      {"content", ojson::array({{{"type", "tool_result"}, {"tool_use_id", "t"},
                                                 {"content", ojson::array({{{"type", "document"}, {"source", ojson::object()}}})}}})}},
                     {{"role", "system"}, {"content", ojson::array({{{"type", "text"}, {"text", "env"}}})}}})}};
  const ChatInput in = anthropic_chat_input(b.svc, req);
  ASSERT_EQ(in.messages.size(), 4u);
  EXPECT_EQ(in.messages[0]["content"][1]["text"], "[Unsupported image]");
  EXPECT_EQ(in.messages[1]["reasoning_content"], "I reasoned.");  // from the signature
  EXPECT_EQ(in.messages[2]["content"], "[Unsupported document]");
  EXPECT_EQ(in.messages[3], (ojson{{"role", "system"}, {"content", "env"}}));
  // The prompt ends with the generation prompt after the trailing system text.
  const std::string text = b.tok.decode(build_chat_prompt(b.tok, in).ids);
  const std::string tail = "env" + assistant_prefix(ThinkingMode::chat);
  ASSERT_GE(text.size(), tail.size());
  EXPECT_EQ(text.substr(text.size() - tail.size()), tail);
}

TEST(Generation, ReasoningBudgetEndsTheReasoning) {
  Builtin& b = builtin();
  GenerationSpec s = forced_chat("alpha beta gamma delta epsilon zeta eta theta iota kappa");
  s.prompt = b.tok.encode("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜><think>");
  s.parser.start_in_reasoning = true;
  s.reasoning_budget = 4;
  const std::vector<int32_t> ids = *s.forced;
  auto [ev, o] = drain(b.svc.start(std::move(s), "test", ApiStyle::messages));
  std::string reasoning, content;
  for (const auto& e : ev) (e.kind == GenEvent::Kind::reasoning ? reasoning : content) += e.text;
  // Four tokens of reasoning, then the forced "</think>" takes the fifth token's place.
  EXPECT_EQ(reasoning, b.tok.decode(std::vector<int32_t>(ids.begin(), ids.begin() + 4)));
  EXPECT_EQ(content, b.tok.decode(std::vector<int32_t>(ids.begin() + 5, ids.end())));
  EXPECT_EQ(o.reasoning_tokens, 5);  // the four and "</think>"
  EXPECT_EQ(o.completion_tokens, static_cast<int64_t>(ids.size()) + 1);  // + EOS
}

TEST(Generation, HeldPrefillDelaysTheFirstTokenAndCanBeCancelled) {
  Builtin& b = builtin();
  GenerationSpec s = forced_chat("hello");
  s.hold_prefill = std::chrono::milliseconds(300);
  const auto t0 = std::chrono::steady_clock::now();
  auto g = b.svc.start(std::move(s), "test", ApiStyle::chat);
  std::chrono::steady_clock::time_point first{};
  for (;;) {
    GenBatch batch = g->next(std::chrono::milliseconds(20));
    if (!batch.events.empty() && first == std::chrono::steady_clock::time_point{}) first = std::chrono::steady_clock::now();
    if (batch.done) {
      EXPECT_EQ(batch.outcome.finish, Finish::stop);
      break;
    }
  }
  EXPECT_GE(first - t0, std::chrono::milliseconds(300));
  GenerationSpec held = forced_chat("never");
  held.hold_prefill = std::chrono::milliseconds(60000);
  auto h = b.svc.start(std::move(held), "test", ApiStyle::chat);
  h->cancel();
  auto [ev, o] = drain(h);
  EXPECT_EQ(o.finish, Finish::cancelled);
  EXPECT_TRUE(ev.empty());
}

}  // namespace
