// Grammar rules for the DeepSeek-V4 assistant turn around a constrained answer
// (docs/chat-format.md §3, §6): the reasoning of thinking mode, and a forced DSML tool call
// whose parameters follow the tool's schema.
#pragma once
#include <string>
#include <vector>

#include "grammar/json_schema.h"

namespace hs::grammar {

// Reasoning text (any text without "</think>" or one of `forbidden`), then "</think>".
int32_t reasoning_rule(GrammarBuilder& g, const std::vector<std::string>& forbidden);

// "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"NAME\">\n" params "\n</｜DSML｜invoke>\n
// </｜DSML｜tool_calls>": one parameter per property of `parameters` (in order; the required
// ones always), a string parameter as string="true" with the raw text or string="false" with
// JSON, others string="false" with JSON valid for the property's schema. The compiler's
// options must forbid "</｜DSML｜parameter" in strings.
int32_t tool_call_rule(GrammarBuilder& g, SchemaCompiler& c, const std::string& name, const ojson& parameters);

// The texts no generated string may contain inside a tool call.
inline constexpr const char* kDsmlParamClose = "</｜DSML｜parameter";

}  // namespace hs::grammar
