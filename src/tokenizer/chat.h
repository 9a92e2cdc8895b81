// DeepSeek-V4 prompt encoder: OpenAI-shaped messages -> the exact prompt string of DeepSeek's
// encoding_dsv4.py (docs/chat-format.md). Byte-exact against the official test vectors.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_json.h"
#include "tokenizer/tokenizer_added.h"

namespace hs {

enum class ThinkingMode { chat, thinking };
// The checkpoint family; only the reasoning-effort table differs (chat-format.md §4, §10).
enum class ChatVariant { v4, v4_0731 };

struct ChatOptions {
  ThinkingMode thinking_mode = ThinkingMode::thinking;
  // Drop the reasoning of turns before the last user message (DeepSeek's default). Ignored
  // (reasoning kept) when any message declares tools. false = CLI --keep-thinking.
  bool drop_thinking = true;
  // As DeepSeek's encoder takes it: v4 accepts "high"/"max", v4_0731 "low"/"high"/"max";
  // anything else is an error. Only thinking mode writes an effort text. For API values
  // ("none", "xhigh", unknown) use map_reasoning_effort() first.
  std::optional<std::string> reasoning_effort;
  ChatVariant variant = ChatVariant::v4;
  bool add_bos = true;  // add_default_bos_token; never written when `context` is given
  // For base-model-like checkpoints: a system message inserted at the front when the request
  // does not start with one. Off (unset) by default. encode_request only.
  std::optional<std::string> default_system;
  // Serving: system messages after a user turn (Claude Code sends its environment there)
  // stand inside that turn, so the turn's transition to the assistant follows them. DeepSeek's
  // encoder writes it only right after a user message: the next request of the same
  // conversation would not start with the one before it, and a conversation ending with a
  // system message would get no generation prompt at all. Off = the encoder, byte for byte.
  bool system_in_user_turn = false;
  // Messages already encoded (a prefix the caller holds): only `messages` are rendered, but
  // merging, result ordering and reasoning dropping see the whole conversation. null = none.
  ojson context;
};

struct ChatPrompt {
  std::string text;  // the whole prompt, BOS included
  // The byte ranges of `text` copied from the request (message contents, reasoning, tool
  // results, tool names, argument keys and values, tool schemas, response formats), in order
  // and disjoint. Tokenize with Tokenizer::encode_with_literals(text, literal) so that special
  // token text written by a client stays plain text; only the template's own structure (BOS,
  // role markers, think tags, DSML markup, EOS) becomes control tokens.
  std::vector<TextSpan> literal;
  // The assistant prefix the encoder wrote last, after which the model generates:
  // "<｜Assistant｜><think>", "<｜Assistant｜></think>", a task token sequence, or "" when the
  // prompt ends with an assistant message (prefill/continuation with wo_eos).
  std::string generation_prefix;
  // The model's output starts inside reasoning (the prefix is "<｜Assistant｜><think>"): give
  // this to the DSML parser (DsmlParserOptions::start_in_reasoning).
  bool starts_in_reasoning = false;
};

// DeepSeek's encode_messages(): `messages` is a JSON array of message objects (roles system,
// user, assistant, tool, developer, latest_reminder; tools and response_format live on a
// system/developer message). Malformed input throws hs::Error with the message index.
ChatPrompt encode_messages(const ojson& messages, const ChatOptions& opts);

// An API request: {"messages": [...], "tools": [...], "response_format": {...}} or a bare
// message array. Top-level tools (and a response_format other than {"type":"text"}) go on
// the system message at index 0, or on an empty system message inserted there.
ChatPrompt encode_request(const ojson& request, const ChatOptions& opts);

// "<｜Assistant｜><think>" in thinking mode, "<｜Assistant｜></think>" in chat mode: what a
// normal generation prompt ends with.
std::string assistant_prefix(ThinkingMode mode);

// API-level reasoning_effort as vLLM maps it: "none" selects chat mode, "xhigh" means "max",
// a value of the variant's table passes through. nullopt for anything else (a server then
// uses the default; the CLI reports an error).
struct EffortSetting {
  bool chat_mode = false;  // "none": render in chat mode
  std::optional<std::string> effort;
};
std::optional<EffortSetting> map_reasoning_effort(std::string_view value, ChatVariant variant);

ThinkingMode parse_thinking_mode(std::string_view s);  // "thinking" | "chat", else hs::Error
ChatVariant parse_chat_variant(std::string_view s);    // "v4" | "v4-0731", else hs::Error

}  // namespace hs
