// The OpenAI Responses API: POST /v1/responses (one Response object, or the typed SSE event
// sequence), GET and DELETE /v1/responses/{id}. A request (input items, instructions, tools,
// text.format, reasoning) becomes the chat input every API shares (responses_convert.cpp); the
// answer's reasoning, text and tool calls become output items (responses_output.cpp).
#pragma once
#include <optional>
#include <string>

#include "server/chat_request.h"
#include "server/output_format.h"
#include "server/reply.h"
#include "server/service.h"

namespace hs::server {

// A parsed request, before its prompt is built.
struct ResponsesRequest {
  ChatInput in;
  OutputFormat format;
  ojson conversation;  // the earlier items (previous_response_id), then this request's input items
  ojson echo;          // the request fields a Response object repeats (instructions, tools, ...)
  std::optional<int64_t> max_output_tokens;
  bool stream = false, store = true;
};

// 400 ApiError (OpenAI shape) on anything malformed; 400 for an unknown previous_response_id.
ResponsesRequest parse_responses_request(Service& svc, const ojson& req);

Reply openai_responses(Service& svc, const std::string& body, const RequestInfo& info);
Reply get_response(Service& svc, const std::string& id);
Reply delete_response(Service& svc, const std::string& id);

// The response's output items and its streamed events, built from a generation's events.
class ResponseOutput {
 public:
  explicit ResponseOutput(Service& svc) : svc_(svc) {}
  // The SSE events for a batch (a caller that does not stream discards them).
  std::string feed(const GenBatch& b);
  // Closes the item still open (its *.done events).
  std::string close();
  const ojson& items() const { return items_; }
  // "event: TYPE\ndata: {...}" with the next sequence_number.
  std::string event(ojson data);

 private:
  enum class Open { none, reasoning, message };
  std::string open_item(Open kind);
  std::string add_call(const ToolCall& call);

  Service& svc_;
  ojson items_ = ojson::array();
  Open open_ = Open::none;
  std::string text_;  // the open item's text so far
  int64_t seq_ = 0;
};

}  // namespace hs::server
