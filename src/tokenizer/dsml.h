// DSML, DeepSeek-V4's tool-call markup (docs/chat-format.md §6): rendering calls into the
// text the model writes, and the conversion of their arguments both ways. The streaming
// parser of model output is in dsml_parser.h.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat_json.h"
#include "tokenizer/tokenizer_added.h"

namespace hs {

struct DsmlCall {
  std::string name;
  ojson arguments;  // a JSON object: one DSML parameter per key, in order
};

// OpenAI `function.arguments` (a JSON string, or an object) -> the object whose keys become
// parameters. As DeepSeek's encoder does, text that is not a JSON object becomes the single
// string parameter "arguments" holding it. null gives {}.
ojson dsml_arguments_object(const ojson& arguments);

// One parameter per key: strings raw with string="true", anything else as Python JSON with
// string="false"; joined with "\n" ("" when there are none). `literal` (optional) receives the
// spans of the returned text that come from the call (names, keys, values), as
// ChatPrompt::literal describes them.
std::string render_dsml_parameters(const ojson& arguments, std::vector<TextSpan>* literal = nullptr);
// The whole block as it follows the content of an assistant turn:
// "\n\n<｜DSML｜tool_calls>\n" invoke {"\n" invoke} "\n</｜DSML｜tool_calls>". "" for no calls.
std::string render_dsml_block(const std::vector<DsmlCall>& calls, std::vector<TextSpan>* literal = nullptr);

// DSML parameters -> OpenAI arguments text, as DeepSeek's decoder builds it: `{` + entries
// joined by ", " + `}`, each `json(key): value` where a string="true" value is JSON-quoted
// and a string="false" value is copied verbatim.
struct DsmlParam {
  std::string key;
  std::string value;
  bool is_string = true;
};
std::string dsml_arguments_json(const std::vector<DsmlParam>& params);

// Tool-call id "call_" + 24 alphanumerics, a pure function of (seed, index): the caller owns
// the seed (e.g. a request id) and the index (the call's position in the response).
std::string make_tool_call_id(uint64_t seed, uint64_t index);

}  // namespace hs
