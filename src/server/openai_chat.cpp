// POST /v1/chat/completions: request parsing and the two response shapes (one JSON object, or
// SSE chunks ending with [DONE]).
#include <chrono>
#include <ctime>

#include "server/chat_request.h"
#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/output_format.h"
#include "server/sampling_request.h"
#include "server/validation.h"

namespace hs::server {

namespace {

// Thinking mode: chat_template_kwargs.thinking / enable_thinking, else a DeepSeek/Anthropic-style
// {"thinking": {"type": "enabled"|"disabled"}}, else reasoning_effort ("none": off), else the default.
void resolve_thinking(const ojson& req, const Service& svc, ChatInput& in) {
  in.thinking = svc.config().default_thinking;
  if (auto e = opt_string(req, "reasoning_effort")) apply_reasoning_effort(*e, in);
  if (const ojson* th = opt_object(req, "thinking")) {
    const auto type = opt_string(*th, "type");
    if (type != "enabled" && type != "disabled")
      bad_request("thinking", "'thinking.type' must be \"enabled\" or \"disabled\"");
    in.thinking = *type == "enabled";
  }
  if (const ojson* kw = opt_object(req, "chat_template_kwargs")) {
    for (const char* key : {"enable_thinking", "thinking"})
      if (auto b = opt_bool(*kw, key)) in.thinking = *b;
  }
}

ojson logprob_entries(const Tokenizer& tok, const std::vector<TokenInfo>& tokens) {
  ojson out = ojson::array();
  for (const auto& t : tokens) {
    ojson e = openai_token_logprob(tok, t.id, t.logprob);
    e["top_logprobs"] = ojson::array();
    for (const auto& alt : t.top) e["top_logprobs"].push_back(openai_token_logprob(tok, alt.token, alt.logprob));
    out.push_back(std::move(e));
  }
  return out;
}

struct ChatMeta {
  std::string id, model;
  int64_t created = 0;
  bool logprobs = false;
  std::chrono::milliseconds keepalive{0};  // 0: no keep-alive chunks
};

class ChatJsonWriter : public ResponseWriter {
 public:
  ChatJsonWriter(ChatMeta meta, const Tokenizer& tok) : m_(std::move(meta)), tok_(tok) {}
  std::string on_batch(const GenBatch& b) override {
    for (const auto& e : b.events) {
      if (e.kind == GenEvent::Kind::reasoning) reasoning_ += e.text;
      else if (e.kind == GenEvent::Kind::text) content_ += e.text;
      else calls_.push_back(tool_call_to_openai(e.call));
    }
    tokens_.insert(tokens_.end(), b.tokens.begin(), b.tokens.end());
    if (!b.done) return {};
    if (b.outcome.finish == Finish::cancelled || b.outcome.finish == Finish::error)
      return error_body(ApiFlavor::openai, outcome_error(b.outcome));
    ojson msg = ojson::object();
    msg["role"] = "assistant";
    msg["content"] = content_.empty() && !calls_.empty() ? ojson(nullptr) : ojson(content_);
    msg["reasoning_content"] = reasoning_.empty() ? ojson(nullptr) : ojson(reasoning_);
    if (!calls_.empty()) msg["tool_calls"] = calls_;
    ojson choice = {{"index", 0}, {"message", std::move(msg)}};
    choice["logprobs"] = m_.logprobs ? ojson{{"content", logprob_entries(tok_, tokens_)}} : ojson(nullptr);
    choice["finish_reason"] = openai_finish_reason(b.outcome.finish);
    ojson out = {{"id", m_.id}, {"object", "chat.completion"}, {"created", m_.created}, {"model", m_.model}};
    out["choices"] = ojson::array({std::move(choice)});
    out["usage"] = openai_usage(b.outcome);
    return dump_json(out);
  }

 private:
  ChatMeta m_;
  const Tokenizer& tok_;
  std::string reasoning_, content_;
  ojson calls_ = ojson::array();
  std::vector<TokenInfo> tokens_;
};

class ChatStreamWriter : public ResponseWriter {
 public:
  ChatStreamWriter(ChatMeta meta, const Tokenizer& tok, bool include_usage)
      : m_(std::move(meta)), tok_(tok), include_usage_(include_usage) {}

  std::string begin() override { return chunk(ojson{{"role", "assistant"}, {"content", ""}}, nullptr); }

  std::string on_batch(const GenBatch& b) override {
    std::string out;
    pending_.insert(pending_.end(), b.tokens.begin(), b.tokens.end());
    // Consecutive deltas of one kind go out as one chunk.
    for (size_t i = 0; i < b.events.size();) {
      const GenEvent& e = b.events[i];
      ojson delta = ojson::object();
      if (e.kind == GenEvent::Kind::tool_call) {
        ojson call = tool_call_to_openai(e.call);
        call["index"] = n_calls_++;
        delta["tool_calls"] = ojson::array({std::move(call)});
        ++i;
      } else {
        std::string text;
        const auto kind = e.kind;
        for (; i < b.events.size() && b.events[i].kind == kind; ++i) text += b.events[i].text;
        delta[kind == GenEvent::Kind::reasoning ? "reasoning_content" : "content"] = std::move(text);
      }
      out += chunk(std::move(delta), nullptr);
    }
    if (!b.done) return out;
    return out + openai_stream_end(b.outcome, chunk(ojson::object(), openai_finish_reason(b.outcome.finish)), base(),
                                   include_usage_);
  }

  // A chunk with an empty delta: the SDKs skip it, but it is bytes (an SSE comment would be
  // dropped before any idle timer sees it).
  std::string keepalive(std::chrono::milliseconds silent) override {
    return m_.keepalive.count() > 0 && silent >= m_.keepalive ? chunk(ojson::object(), nullptr) : std::string();
  }

 private:
  ojson base() const {
    return {{"id", m_.id}, {"object", "chat.completion.chunk"}, {"created", m_.created}, {"model", m_.model}};
  }
  // One chunk; the logprobs of the tokens seen so far ride on it.
  std::string chunk(ojson delta, const char* finish) {
    ojson c = base();
    ojson choice = {{"index", 0}, {"delta", std::move(delta)}};
    if (m_.logprobs && !pending_.empty()) {
      choice["logprobs"] = {{"content", logprob_entries(tok_, pending_)}};
      pending_.clear();
    } else {
      choice["logprobs"] = nullptr;
    }
    choice["finish_reason"] = finish ? ojson(finish) : ojson(nullptr);
    c["choices"] = ojson::array({std::move(choice)});
    if (include_usage_) c["usage"] = nullptr;
    return sse_data(c);
  }

  ChatMeta m_;
  const Tokenizer& tok_;
  bool include_usage_;
  int n_calls_ = 0;
  std::vector<TokenInfo> pending_;
};

}  // namespace

ChatInput openai_chat_input(const Service& svc, const ojson& req) {
  svc.check_model(opt_string(req, "model"));
  ChatInput in;
  in.variant = svc.config().variant;
  in.messages = required_list(req, "messages");
  for (size_t i = 0; i < in.messages.size(); ++i) {
    ojson& m = in.messages[i];
    if (!m.is_object()) continue;  // the encoder reports it
    if (m.contains("role") && m["role"] == "developer") m["role"] = "system";  // DeepSeek's developer is internal
    if (const ojson* name = field(m, "name"); name && !name->is_string())  // accepted, ignored, but typed
      bad_request("messages", "messages[", i, "].name must be a string, got ", describe_type(*name));
  }
  in.tools = validate_openai_tools(opt_array(req, "tools"));
  if (!check_tool_choice(field(req, "tool_choice"), in.tools)) in.tools = nullptr;
  if (const ojson* rf = opt_object(req, "response_format")) {
    const auto type = opt_string(*rf, "type");
    if (type != "text" && type != "json_object" && type != "json_schema")
      bad_request("response_format", "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    in.response_format = *rf;
  }
  resolve_thinking(req, svc, in);
  return in;
}

ChatRequest parse_openai_chat(Service& svc, const ojson& req, const RequestInfo& info) {
  check_field_types(req, {{"user", "string"},
                          {"metadata", "object"},
                          {"store", "boolean"},
                          {"parallel_tool_calls", "boolean"},
                          {"logit_bias", "object"},
                          {"service_tier", "string"},
                          {"modalities", "array"},
                          {"prediction", "object"},
                          {"stream_options", "object"},
                          {"response_format", "object"}});
  ChatInput in = openai_chat_input(svc, req);
  if (opt_int(req, "n", 1, INT32_MAX).value_or(1) != 1) bad_request("n", "only n = 1 is supported");

  ChatRequest out;
  out.stream = opt_bool(req, "stream").value_or(false);
  if (const ojson* so = opt_object(req, "stream_options")) {
    if (!out.stream) bad_request("stream_options", "'stream_options' is only allowed with \"stream\": true");
    out.include_usage = opt_bool(*so, "include_usage").value_or(false);
  }

  GenerationSpec& spec = out.spec;
  spec.sampling = parse_sampling(req, svc, 2.0, true);
  spec.logprobs = opt_bool(req, "logprobs").value_or(false);
  if (auto n = opt_int(req, "top_logprobs", 0, 20)) {
    if (!spec.logprobs) bad_request("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
    out.top_logprobs = static_cast<int>(*n);
  }
  spec.sampling.top_logprobs = out.top_logprobs;
  spec.stop = opt_stop_list(req, "stop", 16, true);
  spec.ignore_eos = opt_bool(req, "ignore_eos").value_or(false);
  auto max_tokens = opt_int(req, "max_completion_tokens", 1, INT32_MAX);
  if (!max_tokens) max_tokens = opt_int(req, "max_tokens", 1, INT32_MAX);
  else opt_int(req, "max_tokens", 1, INT32_MAX);  // still type-checked

  apply_chat(spec, svc.chat_prompt(in, ApiStyle::chat), in.tools, svc.new_seed());
  spec.format = openai_response_format(opt_object(req, "response_format"));
  if (auto forced = forced_tool_name(field(req, "tool_choice"), in.tools)) spec.format = forced_tool_call(in.tools, *forced);
  spec.max_tokens = max_tokens ? static_cast<int>(*max_tokens) : svc.default_max_tokens(spec.prompt.size(), ApiStyle::chat);
  svc.apply_test_hooks(spec, info);
  return out;
}

Reply openai_chat_completions(Service& svc, const std::string& body, const RequestInfo& info) {
  const ojson req = parse_body(body);
  ChatRequest cr = parse_openai_chat(svc, req, info);
  ChatMeta meta{svc.new_id("chatcmpl-"), svc.config().model_name, static_cast<int64_t>(std::time(nullptr)),
                cr.spec.logprobs, svc.config().keepalive};
  Reply r;
  r.request_id = meta.id;
  r.stream = cr.stream;
  r.job = std::make_shared<Job>();
  r.job->gen = svc.start(std::move(cr.spec), "chat", ApiStyle::chat);
  if (cr.stream) {
    r.content_type = "text/event-stream";
    r.job->writer = std::make_unique<ChatStreamWriter>(std::move(meta), svc.tokenizer(), cr.include_usage);
  } else {
    r.job->writer = std::make_unique<ChatJsonWriter>(std::move(meta), svc.tokenizer());
  }
  return r;
}

}  // namespace hs::server
