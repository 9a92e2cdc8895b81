// The OpenAI-compatible endpoints: /v1/chat/completions, /v1/completions, /v1/models, and the
// vLLM-style /tokenize and /detokenize. Handlers throw ApiError for a bad request.
#pragma once
#include <string>

#include "server/chat_request.h"
#include "server/reply.h"
#include "server/service.h"

namespace hs::server {

// A parsed chat completion request (also what `hyperstream run --chat` builds).
struct ChatRequest {
  GenerationSpec spec;
  bool stream = false;
  bool include_usage = false;
  int top_logprobs = 0;  // with spec.logprobs
};
ChatRequest parse_openai_chat(Service& svc, const ojson& req, const RequestInfo& info);
// Just the prompt part of a chat request (model, messages, tools, tool_choice, thinking).
ChatInput openai_chat_input(const Service& svc, const ojson& req);

Reply openai_chat_completions(Service& svc, const std::string& body, const RequestInfo& info);
Reply openai_completions(Service& svc, const std::string& body, const RequestInfo& info);
// GET /v1/models and /v1/models/{id}: the served name and its aliases; `anthropic` (the request
// carries anthropic-version) gives Anthropic's shape.
Reply openai_models(const Service& svc, bool anthropic);
Reply openai_model(const Service& svc, const std::string& id, bool anthropic);
Reply tokenize_endpoint(Service& svc, const std::string& body);
Reply detokenize_endpoint(Service& svc, const std::string& body);

// A token as OpenAI's logprobs show it: {"token", "logprob", "bytes"}.
ojson openai_token_logprob(const Tokenizer& tok, int32_t id, float logprob);
// The OpenAI finish_reason of an outcome ("stop", "length", "tool_calls"; stop sequences: "stop").
const char* openai_finish_reason(Finish f);
// The error body/SSE event for a generation that ended with an error or was cancelled.
ApiError outcome_error(const GenOutcome& o);
// {"prompt_tokens", "completion_tokens", "total_tokens"}
ojson openai_usage(const GenOutcome& o);
// The end of an OpenAI SSE stream: `final_chunk` (the chunk with the finish_reason) or, when the
// generation failed or was cancelled, an error event; then (include_usage) a chunk `base` with
// no choices and the usage; then [DONE].
std::string openai_stream_end(const GenOutcome& o, const std::string& final_chunk, ojson base, bool include_usage);

}  // namespace hs::server
