// The special strings and fixed texts of the DeepSeek-V4 prompt format (chat-format.md §1,
// §4, §5). The long texts are byte copies of fixtures/chat/strings/*.txt, which the tests
// compare against the stored files.
#pragma once
#include <string_view>

namespace hs::ds4 {

inline constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
inline constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
inline constexpr std::string_view kUser = "<｜User｜>";
inline constexpr std::string_view kAssistant = "<｜Assistant｜>";
inline constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
inline constexpr std::string_view kThinkStart = "<think>";
inline constexpr std::string_view kThinkEnd = "</think>";
inline constexpr std::string_view kDsml = "｜DSML｜";

// DSML tags (§6). The block opener as the official parser looks for it includes the blank
// line that separates it from the content.
inline constexpr std::string_view kBlockStart = "\n\n<｜DSML｜tool_calls";
inline constexpr std::string_view kBlockOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kBlockClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
inline constexpr std::string_view kInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kParamOpen = "<｜DSML｜parameter";
inline constexpr std::string_view kParamClose = "</｜DSML｜parameter";

inline constexpr std::string_view kToolResultOpen = "<tool_result>";
inline constexpr std::string_view kToolResultClose = "</tool_result>";

// Quick-instruction task tokens (§2, `task` field), in DeepSeek's order.
struct TaskToken {
  std::string_view task, token;
};
inline constexpr TaskToken kTaskTokens[] = {
    {"action", "<｜action｜>"}, {"query", "<｜query｜>"},  {"authority", "<｜authority｜>"},
    {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"},
};

// strings/reasoning_effort_absolute_max.txt: V4 "max", V4-Flash-0731 "high".
inline constexpr std::string_view kEffortAbsoluteMax =
    R"TXT(Reasoning Effort: Absolute maximum with no shortcuts permitted.
You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial scenarios.
Explicitly write out your entire deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.

)TXT";
// strings/reasoning_effort_beyond_max.txt: V4-Flash-0731 "max".
inline constexpr std::string_view kEffortBeyondMax =
    R"TXT(Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.
You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather than any surface symptom.
Do not stop reasoning until you have independently verified the solution from multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.

)TXT";
// strings/response_format_prefix.txt, followed by the schema as JSON.
inline constexpr std::string_view kResponseFormatPrefix =
    R"TXT(## Response Format:

You MUST strictly adhere to the following schema to reply:
)TXT";
// strings/tools_block_prefix.txt + the function schemas (one JSON line each) + suffix.
inline constexpr std::string_view kToolsBlockPrefix =
    R"TXT(## Tools

You have access to a set of tools to help answer the user's question. You can invoke tools by writing a "<｜DSML｜tool_calls>" block like the following:

<｜DSML｜tool_calls>
<｜DSML｜invoke name="$TOOL_NAME">
<｜DSML｜parameter name="$PARAMETER_NAME" string="true|false">$PARAMETER_VALUE</｜DSML｜parameter>
...
</｜DSML｜invoke>
<｜DSML｜invoke name="$TOOL_NAME2">
...
</｜DSML｜invoke>
</｜DSML｜tool_calls>

String parameters should be specified as is and set `string="true"`. For all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set `string="false"`.

If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.

Otherwise, output directly after </think> with tool calls or final response.

### Available Tool Schemas

)TXT";
inline constexpr std::string_view kToolsBlockSuffix =
    R"TXT(

You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.
)TXT";

}  // namespace hs::ds4
