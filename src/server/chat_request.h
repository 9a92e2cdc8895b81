// The chat path every API shares: OpenAI-shaped messages and tools -> the DeepSeek-V4 prompt
// (tokenizer/chat.h) -> token ids, plus the DSML parser settings for the answer. The Anthropic
// API converts its request to this shape first; `hyperstream run --chat` uses it too.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "server/generation.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

namespace hs::server {

struct ChatInput {
  ojson messages;                    // OpenAI-shaped message array
  ojson tools;                       // validated OpenAI tools (null: none)
  ojson response_format;             // null: none
  bool thinking = false;             // thinking mode (else chat mode)
  std::optional<std::string> effort; // already mapped (map_reasoning_effort)
  ChatVariant variant = ChatVariant::v4;
};

struct ChatPromptIds {
  std::vector<int32_t> ids;
  bool starts_in_reasoning = false;
};

// Renders and tokenizes; malformed messages are a 400 ApiError naming "messages". Special-token
// text inside the request's own strings (contents, tool results, names, arguments, schemas) is
// tokenized as plain text: only the chat template's structure produces control tokens.
ChatPromptIds build_chat_prompt(const Tokenizer& tok, const ChatInput& in);

// Fills the chat part of a GenerationSpec (prompt ids, parser options).
void apply_chat(GenerationSpec& spec, const ChatPromptIds& p, const ojson& tools, uint64_t id_seed);

// Checks an OpenAI `tools` array ({"type": "function", "function": {"name", "description",
// "parameters"}}); 400 naming "tools" on any schema error. Returns it (null when absent/empty).
ojson validate_openai_tools(const ojson* tools);
// OpenAI `tool_choice`: "none" | "auto" | "required" | {"type": "function", "function":
// {"name"}} (the name must be a declared tool). Returns true when tools stay enabled.
bool check_tool_choice(const ojson* choice, const ojson& tools, const char* param = "tool_choice");

}  // namespace hs::server
