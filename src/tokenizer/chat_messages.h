// Internal to the chat encoder: messages after validation, in the shape DeepSeek's encoder
// works on (tool results merged into user turns as blocks). Not for use outside tokenizer/.
#pragma once
#include <optional>
#include <string>
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

// Validates an array of OpenAI-shaped messages; `what` names it in errors ("messages").
std::vector<Msg> normalize_messages(const ojson& messages, const char* what);

// DeepSeek's encode_messages() on validated messages (context may be empty).
ChatPrompt render_messages(std::vector<Msg> context, std::vector<Msg> messages, const ChatOptions& opts);

}  // namespace hs::chat_detail
