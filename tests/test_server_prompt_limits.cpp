// The request path's bounds (issue 18): a prompt that cannot fit the context is refused by its
// bytes before tokenization or by tokenization that stops at the context, answering each API's
// context-exceeded 400; tool results are reordered in O(n log n) (16K results in a 2.2 MB
// Anthropic request). The built-in model's Service has a context of 1,024 tokens.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/responses_api.h"
#include "server/service.h"
#include "server_util.h"
#include "tokenizer/chat_tokens.h"

using namespace hs;
using namespace hs::server;

namespace {

ChatInput user_message(const std::string& text) {
  ChatInput in;
  in.messages = ojson::array({{{"role", "user"}, {"content", text}}});
  return in;
}

// The ApiError that `fn` throws (a test failure when it throws none).
template <typename Fn>
ApiError refusal(Fn&& fn) {
  try {
    fn();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted";
  return ApiError(0, "");
}

// The number in "prompt is too long: N tokens > M maximum" (Anthropic's wording).
int64_t anthropic_count(const ApiError& e) {
  const std::string m = e.what(), head = "prompt is too long: ";
  EXPECT_EQ(m.rfind(head, 0), 0u) << m;
  return std::stoll(m.substr(head.size()));
}

}  // namespace

// 50 MB of text in a context of 1,024 tokens is refused from its size alone, in every API's
// words: the count is the byte bound, ceil(bytes / max_token_bytes), so at least the context.
TEST(PromptLimits, AFiftyMegabyteMessageIsRefusedByItsBytes) {
  Builtin& b = builtin();
  const ChatInput in = user_message(std::string(50u << 20, 'a'));
  const size_t bytes = render_chat_prompt(in).text.size();
  const size_t per_token = b.tok.max_token_bytes();
  const ApiError e = refusal([&] { b.svc.chat_prompt(in, ApiStyle::messages); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(e.code(), "context_length_exceeded");
  EXPECT_EQ(anthropic_count(e), static_cast<int64_t>((bytes + per_token - 1) / per_token));
  EXPECT_NE(std::string(e.what()).find("> 1023 maximum"), std::string::npos) << e.what();
  const ApiError chat = refusal([&] { b.svc.chat_prompt(in, ApiStyle::chat); });
  EXPECT_NE(std::string(chat.what()).find("maximum context length is 1024 tokens"), std::string::npos) << chat.what();
  EXPECT_EQ(chat.param(), "messages");
  const ApiError resp = refusal([&] { b.svc.chat_prompt(in, ApiStyle::responses); });
  EXPECT_NE(std::string(resp.what()).find("exceeds the context window"), std::string::npos) << resp.what();
  // The completions prompt (and /tokenize) take the same bound.
  std::vector<int32_t> ids;
  const ApiError text = refusal([&] { b.svc.text_prompt(std::string(50u << 20, 'a'), true, ApiStyle::completions, ids); });
  EXPECT_NE(std::string(text.what()).find("your prompt resulted in"), std::string::npos) << text.what();
  EXPECT_TRUE(ids.empty());
}

// Below the byte bound, tokenization stops at the context: the error names fewer tokens than
// the whole prompt has (so the rest was never tokenized), and at least the context.
TEST(PromptLimits, TokenizationStopsAtTheContext) {
  Builtin& b = builtin();
  std::string text;
  for (int i = 0; i < 3000; ++i) text += " w" + std::to_string(i % 97);
  const ChatInput in = user_message(text);
  ASSERT_LT(render_chat_prompt(in).text.size(), 1023 * b.tok.max_token_bytes()) << "the byte bound would refuse it";
  const size_t full = build_chat_prompt(b.tok, in).ids.size();
  ASSERT_GT(full, 3000u);
  const int64_t named = anthropic_count(refusal([&] { b.svc.chat_prompt(in, ApiStyle::messages); }));
  EXPECT_GE(named, 1024);
  EXPECT_LT(named, static_cast<int64_t>(full));
}

// The boundary is exact: the longest prompt of at most 1,023 tokens is accepted with the ids of
// the unbounded encoding; the next one (1,024 tokens or more) is refused.
TEST(PromptLimits, ThePromptThatFillsTheContextLessOneIsAccepted) {
  Builtin& b = builtin();
  std::string text, last_fit;
  size_t last_fit_ids = 0;
  for (int i = 0;; ++i) {
    text += " v" + std::to_string(i % 13);
    const size_t n = build_chat_prompt(b.tok, user_message(text)).ids.size();
    if (n >= 1024) break;
    last_fit = text;
    last_fit_ids = n;
  }
  ASSERT_GT(last_fit_ids, 1000u);
  const ChatPromptIds fit = b.svc.chat_prompt(user_message(last_fit), ApiStyle::chat);
  EXPECT_EQ(fit.ids, build_chat_prompt(b.tok, user_message(last_fit)).ids);
  const ApiError e = refusal([&] { b.svc.chat_prompt(user_message(text), ApiStyle::messages); });
  EXPECT_GE(anthropic_count(e), 1024);
  EXPECT_EQ(b.svc.default_max_tokens(fit.ids.size(), ApiStyle::chat), static_cast<int>(1024 - last_fit_ids));
}

// The request: 16K tool results (2.2 MB) in one user turn, in reverse call order. Each
// result must land in its call's place; with the old linear search per comparison this took
// 9.5 s of CPU, now well under a second (nothing here measures time).
TEST(PromptLimits, SixteenThousandAnthropicToolResultsFollowTheCallOrder) {
  constexpr int kN = 16384;
  ojson uses = ojson::array(), results = ojson::array();
  for (int i = 0; i < kN; ++i)
    uses.push_back({{"type", "tool_use"}, {"id", "toolu_" + std::to_string(i)}, {"name", "read"}, {"input", {{"i", i}}}});
  for (int i = kN; i-- > 0;)
    results.push_back({{"type", "tool_result"}, {"tool_use_id", "toolu_" + std::to_string(i)},
                       {"content", "file " + std::to_string(i) + " " + std::string(64, 'x')}});
  ojson req = {{"max_tokens", 16},
               {"tools", {{{"name", "read"}, {"input_schema", {{"type", "object"}}}}}},
               {"messages", {{{"role", "user"}, {"content", "read them all"}},
                             {{"role", "assistant"}, {"content", uses}},
                             {{"role", "user"}, {"content", results}}}}};
  ASSERT_GT(req.dump().size(), 2'000'000u);
  const ChatPrompt p = render_chat_prompt(anthropic_chat_input(builtin().svc, req));
  const std::string open(ds4::kToolResultOpen);
  size_t at = 0;
  for (int i = 0; i < kN; ++i) {
    at = p.text.find(open, at);
    ASSERT_NE(at, std::string::npos) << i;
    at += open.size();
    const std::string want = "file " + std::to_string(i) + " ";
    ASSERT_EQ(p.text.compare(at, want.size(), want), 0) << "result " << i << " out of place";
  }
  EXPECT_EQ(p.text.find(open, at), std::string::npos);
}

// The Responses route's many-item requests stay linear too: 16K function calls and outputs in
// one turn, and 16K assistant message parts joined in place.
TEST(PromptLimits, SixteenThousandResponsesItemsConvert) {
  constexpr int kN = 16384;
  ojson input = ojson::array({{{"role", "user"}, {"content", "go"}}});
  for (int i = 0; i < kN; ++i)
    input.push_back({{"type", "function_call"}, {"call_id", "c" + std::to_string(i)}, {"name", "f"}, {"arguments", "{}"}});
  for (int i = kN; i-- > 0;)
    input.push_back({{"type", "function_call_output"}, {"call_id", "c" + std::to_string(i)}, {"output", "out " + std::to_string(i) + "."}});
  input.push_back({{"role", "user"}, {"content", "and"}});
  for (int i = 0; i < kN; ++i) input.push_back({{"role", "assistant"}, {"content", "p" + std::to_string(i % 10)}});
  const ojson req = {{"input", input}, {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
  const ResponsesRequest rr = parse_responses_request(builtin().svc, req);
  const ojson& last = rr.in.messages.back();
  ASSERT_EQ(last["role"], "assistant");
  std::string want;
  for (int i = 0; i < kN; ++i) want += "p" + std::to_string(i % 10);
  EXPECT_EQ(last["content"], want);
  const std::string text = render_chat_prompt(rr.in).text;
  size_t at = 0;
  for (int i = 0; i < kN; ++i) {
    at = text.find("out " + std::to_string(i) + ".", at);
    ASSERT_NE(at, std::string::npos) << "output " << i << " out of place";
  }
}
