// Internal to the chat encoder: messages after validation, in the shape DeepSeek's encoder
// works on (tool results merged into user turns as blocks). Not for use outside tokenizer/.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat.h"
#include "tokenizer/dsml.h"

namespace hs::chat_detail {

struct Block {
  bool is_tool_result = false;
  std::string text;         // the text, or the tool result's content
  std::string tool_use_id;  // tool results: the tool_call_id they answer
};

struct ToolCallIn {
  std::string id;
  DsmlCall call;
};

struct Msg {
  std::string role;  // system, user, developer, assistant, latest_reminder (tool before merge)
  std::string content;
  std::vector<Block> blocks;  // user turns after merging
  ojson tools;                // null, or the `function` objects of the declared tools
  ojson response_format;      // null when absent
  std::vector<ToolCallIn> tool_calls;
  std::string reasoning;
  std::optional<std::string> task;
  bool wo_eos = false;
  std::string tool_call_id;  // role "tool"
};

// Prompt text being built, with the spans that came from the request (ChatPrompt::literal).
struct PromptText {
  std::string text;
  std::vector<TextSpan> literal;

  // Template structure: special-token text here becomes control tokens.
  void tmpl(std::string_view s) { text += s; }
  // Request text: never control tokens.
  void lit(std::string_view s) { add_span(text.size(), text.size() + s.size()), text += s; }
  // `s` whose own literal spans are `spans` (offsets into `s`).
  void append(std::string_view s, const std::vector<TextSpan>& spans) {
    const size_t base = text.size();
    text += s;
    for (const TextSpan& sp : spans) add_span(base + sp.begin, base + sp.end);
  }
  void append(const PromptText& o) { append(o.text, o.literal); }

 private:
  void add_span(size_t b, size_t e) {
    if (b == e) return;
    if (!literal.empty() && literal.back().end == b) literal.back().end = e;  // adjacent: merge
    else literal.push_back({b, e});
  }
};

// Validates an array of OpenAI-shaped messages; `what` names it in errors ("messages").
std::vector<Msg> normalize_messages(const ojson& messages, const char* what);

// DeepSeek's encode_messages() on validated messages (context may be empty).
ChatPrompt render_messages(std::vector<Msg> context, std::vector<Msg> messages, const ChatOptions& opts);

}  // namespace hs::chat_detail
