// What a request asks its output to be: free text, any JSON object, JSON valid for a schema,
// or (a forced tool call) a call of one named tool whose arguments are valid for its
// parameters. Every API surface maps to this one shape: OpenAI chat `response_format`, the
// Responses API `text.format`, Anthropic `output_config.format` / beta `output_format`, and
// `tool_choice` naming one tool. The generation enforces it by schema-constrained sampling.
#pragma once
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

}  // namespace hs::server
