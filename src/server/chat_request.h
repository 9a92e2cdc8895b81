// The chat path every API shares: OpenAI-shaped messages and tools -> the DeepSeek-V4 prompt
// (tokenizer/chat.h) -> token ids, plus the DSML parser settings for the answer. The Anthropic
// API converts its request to this shape first; `hyperstream run --chat` uses it too.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/generation.h"
#include "server/validation.h"
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

// Renders the prompt text; malformed messages are a 400 ApiError naming "messages".
ChatPrompt render_chat_prompt(const ChatInput& in);
// Renders and tokenizes. Special-token text inside the request's own strings (contents, tool
// results, names, arguments, schemas) is tokenized as plain text: only the chat template's
// structure produces control tokens. Unbounded: the server goes through Service::chat_prompt,
// which bounds the work by the context.
ChatPromptIds build_chat_prompt(const Tokenizer& tok, const ChatInput& in);

// fn(tool, where) for each element of a request's `tools` (400 naming "tools" unless it is an
// array of objects); `where` is "tools[i]".
template <typename Fn>
void for_each_tool(const ojson& tools, Fn&& fn) {
  if (!tools.is_array()) bad_request("tools", "'tools' must be an array, got ", describe_type(tools));
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = cat("tools[", i, "]");
    if (!tools[i].is_object()) bad_request("tools", where, " must be an object, got ", describe_type(tools[i]));
    fn(tools[i], where);
  }
}

// The text of `content`: a string, or an array of typed parts joined with `joiner`, each made
// text by part_text(part, where, type) (400 naming `param` when a part is not an object with a
// string type). `what` names the content in errors.
template <typename Fn>
std::string content_parts_text(const ojson& content, const char* param, const std::string& what, const char* joiner,
                               Fn&& part_text) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param, what, " must be a string or an array of content parts, got ", describe_type(content));
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& part = content[i];
    const std::string where = cat(what, "[", i, "]");
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
      bad_request(param, where, " must be a content part object with a string 'type'");
    if (i) out += joiner;
    out += part_text(part, where, part["type"].get<std::string>());
  }
  return out;
}

// DS4-Flash reads text only: an image, document, file or audio part becomes the placeholder
// the encoder gives other parts ("[Unsupported TYPE]", chat.cpp), and the log says so.
std::string media_placeholder(const std::string& type, const std::string& where);

// An OpenAI reasoning effort (chat `reasoning_effort`, Responses `reasoning.effort`), as vLLM
// maps it: "none" selects chat mode; a level of the checkpoint's table (in.variant), thinking
// with it; any other level, thinking with the default effort.
void apply_reasoning_effort(const std::string& effort, ChatInput& in);

// Fills the chat part of a GenerationSpec (prompt ids, parser options).
void apply_chat(GenerationSpec& spec, const ChatPromptIds& p, const ojson& tools, uint64_t id_seed);

// Checks an OpenAI `tools` array ({"type": "function", "function": {"name", "description",
// "parameters"}}); 400 naming "tools" on any schema error. Returns it (null when absent/empty).
ojson validate_openai_tools(const ojson* tools);
// OpenAI `tool_choice`: "none" | "auto" | "required" | {"type": "function", "function":
// {"name"}} (the name must be a declared tool). Returns true when tools stay enabled.
bool check_tool_choice(const ojson* choice, const ojson& tools, const char* param = "tool_choice");

}  // namespace hs::server
