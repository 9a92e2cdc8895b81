// What a request asks its output to be: free text, any JSON object, JSON valid for a schema,
// or (a forced tool call) a call of one named tool whose arguments are valid for its
// parameters. Every API surface maps to this one shape: OpenAI chat `response_format`, the
// Responses API `text.format`, Anthropic `output_config.format` / beta `output_format`, and
// `tool_choice` naming one tool. The generation enforces it by schema-constrained sampling.
#pragma once
#include <optional>
#include <string>

#include "server/json_util.h"

namespace hs::server {

struct OutputFormat {
  enum class Kind { text, json_object, json_schema, tool_call };
  Kind kind = Kind::text;
  ojson schema;       // json_schema: the schema; tool_call: the tool's `parameters` (null: any object)
  std::string name;   // json_schema: its name (may be empty); tool_call: the tool's name
  bool strict = false;  // json_schema: the client asked for strict adherence
};

// The request surfaces, parsed (400 ApiError naming the field when malformed). Absent: text.
// OpenAI chat `response_format`: {"type": "text" | "json_object" | "json_schema", "json_schema":
// {"name", "schema", "strict", "description"}}.
OutputFormat openai_response_format(const ojson* rf);
// Responses API `text.format`: the same types, with name/schema/strict beside the type.
OutputFormat responses_text_format(const ojson* format);
// Anthropic `output_config.format` or beta `output_format` (`param` names it): {"type":
// "json_schema", "schema"}.
OutputFormat anthropic_output_format(const ojson* format, const char* param);
// The tool a validated OpenAI `tool_choice` forces: a named function, or "required" when there
// is exactly one tool. nullopt: none forced.
std::optional<std::string> forced_tool_name(const ojson* tool_choice, const ojson& tools);
// A forced call of `name`, one of the OpenAI-shaped `tools` (its parameters are the schema).
OutputFormat forced_tool_call(const ojson& tools, const std::string& name);
// The format as the chat encoder renders it into the prompt (chat-shaped `response_format`,
// which DeepSeek's template prints), so every API tells the model the same; null for text and
// tool calls (the tools block already describes those).
ojson prompt_response_format(const OutputFormat& f);

}  // namespace hs::server
