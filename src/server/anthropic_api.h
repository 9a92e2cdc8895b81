// The Anthropic Messages API: POST /v1/messages (stream and non-stream) and
// /v1/messages/count_tokens. Requests are converted to the OpenAI-shaped messages the chat
// encoder takes (anthropic_convert.cpp); answers come back as content blocks (text, thinking,
// tool_use) or as the SSE event sequence the Anthropic SDKs expect.
#pragma once
#include <string>

#include "server/chat_request.h"
#include "server/output_format.h"
#include "server/reply.h"
#include "server/service.h"

namespace hs::server {

// system, messages (text / tool_use / tool_result / thinking blocks), tools, tool_choice and
// thinking -> the chat input. 400 ApiError on anything malformed or unsupported.
ChatInput anthropic_chat_input(const Service& svc, const ojson& req);
// What the output must be: a forced tool call (tool_choice "tool", or "any" with one tool), else
// output_config.format / the beta output_format (json_schema), else text.
OutputFormat anthropic_output_spec(const ojson& req, const ChatInput& in);

Reply anthropic_messages(Service& svc, const std::string& body, const RequestInfo& info);
Reply anthropic_count_tokens(Service& svc, const std::string& body);

}  // namespace hs::server
