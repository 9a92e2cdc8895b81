// Incremental parser of one DeepSeek-V4 assistant turn as the model streams it: splits the
// text into reasoning, content and DSML tool calls (docs/chat-format.md §6-§8).
//
// Policy (one of those the doc allows, chosen so a client never sees half a call):
// * Text is emitted as soon as it cannot be the start of a stop string ("</think>", EOS,
//   "\n\n<｜DSML｜tool_calls"); only such a prefix (and an incomplete UTF-8 tail) is held.
// * A tool-call block is buffered and checked against the official grammar; its calls are
//   emitted together once the block is closed and followed by EOS (or the end of the
//   stream). Anything malformed (bad tag, missing string=, bad JSON value, duplicate or
//   unknown parameter, a block without calls, text after the block, truncation) gives back
//   the block's raw text as content, with a warning (hs::log_warn and
//   ParsedCompletion::warnings). So no text is ever lost: what is not a call comes back.
// * DSML inside reasoning is never a call. Text after EOS is ignored (with a warning).
// * Reasoning/content holding special strings (BOS, <think>, </think>, ｜DSML｜), which
//   DeepSeek's strict parser rejects, is kept as text and warned about.
// Splitting the same text into any deltas gives the same events' concatenation and result.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_json.h"
#include "tokenizer/dsml.h"

namespace hs {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
};
// {"id", "type": "function", "function": {"name", "arguments"}}
ojson tool_call_to_openai(const ToolCall& call);

struct ParseEvent {
  enum class Kind { reasoning_delta, content_delta, tool_call };
  Kind kind = Kind::content_delta;
  std::string text;  // the delta (reasoning/content)
  ToolCall call;     // tool_call
};

struct ParsedCompletion {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
  bool saw_eos = false;  // false: the stream ended without EOS (cut off: finish_reason "length")
  std::vector<std::string> warnings;
};

struct DsmlParserOptions {
  // The prompt ended with "<think>" (ChatPrompt::starts_in_reasoning): output starts as
  // reasoning until "</think>". false for chat mode and after task tokens.
  bool start_in_reasoning = false;
  uint64_t id_seed = 0;  // ids are make_tool_call_id(id_seed, n) for the n-th call
  // Optional OpenAI tools of the request: when given, a call to an unknown function or with
  // a parameter outside its schema's "properties" (unless additionalProperties allows it)
  // is malformed.
  ojson tools;
};

class DsmlParser {
 public:
  explicit DsmlParser(DsmlParserOptions opts = {});

  // Feed the next piece of decoded text (any split, even inside a UTF-8 character).
  std::vector<ParseEvent> feed(std::string_view delta);
  // End of stream: flushes what was held back; after this feed() is ignored.
  std::vector<ParseEvent> finish();
  const ParsedCompletion& result() const { return result_; }
  // Still inside the reasoning (before "</think>"): a thinking budget counts these tokens.
  bool in_reasoning() const { return mode_ == Mode::reasoning; }

 private:
  enum class Mode { reasoning, content, tools, raw, done };
  // Sub-states of the tool block grammar; each names what is expected next.
  enum class T {
    open_nl, item, invoke_ws, invoke_attr, invoke_name, invoke_name_end, invoke_first, param_attr,
    param_name, param_string, param_kind, param_value, param_end, after_param, after_block
  };
  enum class Step { advanced, need_more, failed };

  void run(bool final, std::vector<ParseEvent>& ev);
  bool run_text(bool final, std::vector<ParseEvent>& ev);
  void run_tools(bool final, std::vector<ParseEvent>& ev);
  Step tools_step(size_t limit);
  Step expect(size_t limit, std::initializer_list<std::string_view> alts, int& which);
  Step read_until(size_t limit, std::string_view stop, std::string& into);
  Step fail_block(std::string why);
  Step finish_name();
  Step finish_param();
  void close_invoke();
  void emit_text(std::string_view text, std::vector<ParseEvent>& ev);
  void warn(std::string msg);
  void end_at_eos(std::string_view rest);
  void final_checks();

  struct Schema {
    std::string name;
    bool any_param = true;  // no "properties", or additionalProperties allows more
    std::vector<std::string> params;
  };

  DsmlParserOptions opts_;
  ParsedCompletion result_;
  Mode mode_;
  bool finished_ = false;
  bool block_failed_ = false;
  bool ignored_tail_ = false;
  bool checked_ = false;
  std::vector<Schema> schemas_;  // from opts_.tools; empty: no checks
  bool check_schemas_ = false;
  std::string pending_;  // reasoning/content/raw: text not yet emitted (a held-back tail)
  // Tool block state: its raw text from "\n\n<｜DSML｜tool_calls", the parse position, and
  // where the first EOS inside it is (npos: none yet).
  std::string block_;
  size_t pos_ = 0;
  size_t eos_at_ = std::string::npos;
  size_t eos_scanned_ = 0;
  T t_ = T::open_nl;
  std::string name_;
  std::string key_;
  std::string value_;
  bool value_is_string_ = true;
  std::vector<DsmlParam> params_;
  std::vector<ToolCall> calls_;  // complete calls of the block, sent when it ends well
  std::string fail_why_;
};

// The whole text at once (DeepSeek's parse_message_from_completion_text, lenient).
ParsedCompletion parse_completion(std::string_view text, const DsmlParserOptions& opts);

}  // namespace hs
