// POST /v1/messages and /v1/messages/count_tokens: request checks and the response shapes.
#include "server/anthropic_api.h"

#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/thinking_signature.h"
#include "server/sampling_request.h"
#include "server/validation.h"

namespace hs::server {

namespace {

const char* stop_reason(Finish f) {
  switch (f) {
    case Finish::length: return "max_tokens";
    case Finish::tool_calls: return "tool_use";
    case Finish::stop_sequence: return "stop_sequence";
    default: return "end_turn";
  }
}

std::string tool_use_id(const ToolCall& c) {
  return "toolu_" + (c.id.rfind("call_", 0) == 0 ? c.id.substr(5) : c.id);
}

ojson tool_input(const ToolCall& c) {
  try {
    ojson v = ojson::parse(c.arguments);
    if (v.is_object()) return v;
  } catch (const ojson::exception&) {
  }
  return ojson::object();
}

// Anthropic counts the cached part of the input apart: input_tokens are the ones computed.
ojson usage_json(const GenOutcome& o) {
  return {{"input_tokens", o.prompt_tokens - o.cached_tokens},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", o.cached_tokens},
          {"output_tokens", o.completion_tokens}};
}

struct MessageMeta {
  std::string id, model;
  int64_t prompt_tokens = 0;
  bool omit_thinking = false;              // thinking.display "omitted": the text rides in the signature only
  std::chrono::milliseconds keepalive{0};  // 0: no ping while silent
};

ojson message_object(const MessageMeta& m) {
  return {{"id", m.id}, {"type", "message"}, {"role", "assistant"}, {"model", m.model}, {"content", ojson::array()}};
}

class MessageJsonWriter : public ResponseWriter {
 public:
  explicit MessageJsonWriter(MessageMeta meta) : m_(std::move(meta)) {}
  std::string on_batch(const GenBatch& b) override {
    for (const auto& e : b.events) {
      if (e.kind == GenEvent::Kind::tool_call) {
        blocks_.push_back({{"type", "tool_use"}, {"id", tool_use_id(e.call)}, {"name", e.call.name}, {"input", tool_input(e.call)}});
        continue;
      }
      const char* type = e.kind == GenEvent::Kind::reasoning ? "thinking" : "text";
      if (blocks_.empty() || blocks_.back()["type"] != type) blocks_.push_back({{"type", type}, {type, ""}});
      blocks_.back()[type] = blocks_.back()[type].get<std::string>() + e.text;
    }
    if (!b.done) return {};
    if (b.outcome.finish == Finish::cancelled || b.outcome.finish == Finish::error)
      return error_body(ApiFlavor::anthropic, outcome_error(b.outcome));
    for (auto& block : blocks_)
      if (block["type"] == "thinking") {
        block["signature"] = thinking_signature(block["thinking"].get<std::string>());
        if (m_.omit_thinking) block["thinking"] = "";
      }
    ojson out = message_object(m_);
    out["content"] = std::move(blocks_);
    out["stop_reason"] = stop_reason(b.outcome.finish);
    out["stop_sequence"] = b.outcome.finish == Finish::stop_sequence ? ojson(b.outcome.stop_sequence) : ojson(nullptr);
    out["usage"] = usage_json(b.outcome);
    return dump_json(out);
  }

 private:
  MessageMeta m_;
  ojson blocks_ = ojson::array();
};

// message_start, then per block content_block_start / _delta... / _stop, then message_delta
// (stop_reason, usage) and message_stop.
class MessageStreamWriter : public ResponseWriter {
 public:
  explicit MessageStreamWriter(MessageMeta meta) : m_(std::move(meta)) {}

  std::string begin() override {
    ojson msg = message_object(m_);
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = {{"input_tokens", m_.prompt_tokens},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", 0},
                    {"output_tokens", 0}};
    return sse_event("message_start", {{"type", "message_start"}, {"message", std::move(msg)}}) +
           sse_event("ping", {{"type", "ping"}});
  }

  std::string on_batch(const GenBatch& b) override {
    std::string out;
    for (size_t i = 0; i < b.events.size();) {
      const GenEvent& e = b.events[i];
      if (e.kind == GenEvent::Kind::tool_call) {
        close_block(out);
        out += sse_event("content_block_start",
                         {{"type", "content_block_start"},
                          {"index", index_},
                          {"content_block",
                           {{"type", "tool_use"}, {"id", tool_use_id(e.call)}, {"name", e.call.name}, {"input", ojson::object()}}}});
        out += delta({{"type", "input_json_delta"}, {"partial_json", dump_json(tool_input(e.call))}});
        open_ = Open::tool;
        close_block(out);
        ++i;
        continue;
      }
      const bool thinking = e.kind == GenEvent::Kind::reasoning;
      std::string text;
      for (; i < b.events.size() && b.events[i].kind == e.kind; ++i) text += b.events[i].text;
      const Open want = thinking ? Open::thinking : Open::text;
      if (open_ != want) {
        close_block(out);
        ojson block = thinking ? ojson{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                               : ojson{{"type", "text"}, {"text", ""}};
        out += sse_event("content_block_start", {{"type", "content_block_start"}, {"index", index_}, {"content_block", block}});
        open_ = want;
      }
      if (thinking) thinking_ += text;
      if (!thinking) out += delta({{"type", "text_delta"}, {"text", text}});
      else if (!m_.omit_thinking) out += delta({{"type", "thinking_delta"}, {"thinking", text}});
    }
    if (!b.done) return out;
    if (b.outcome.finish == Finish::cancelled || b.outcome.finish == Finish::error) {
      const ApiError err = outcome_error(b.outcome);
      return out + sse_event("error", ojson::parse(error_body(ApiFlavor::anthropic, err)));
    }
    close_block(out);
    const bool seq = b.outcome.finish == Finish::stop_sequence;
    out += sse_event("message_delta",
                     {{"type", "message_delta"},
                      {"delta", {{"stop_reason", stop_reason(b.outcome.finish)},
                                 {"stop_sequence", seq ? ojson(b.outcome.stop_sequence) : ojson(nullptr)}}},
                      {"usage", usage_json(b.outcome)}});
    return out + sse_event("message_stop", {{"type", "message_stop"}});
  }

  // Anthropic's own keep-alive event (the SDKs skip it; an SSE comment would not count).
  std::string keepalive(std::chrono::milliseconds silent) override {
    return m_.keepalive.count() > 0 && silent >= m_.keepalive ? sse_event("ping", {{"type", "ping"}}) : std::string();
  }

 private:
  enum class Open { none, text, thinking, tool };
  std::string delta(ojson d) {
    return sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
  }
  void close_block(std::string& out) {
    if (open_ == Open::none) return;
    if (open_ == Open::thinking) {  // the signature goes last, as Anthropic sends it
      out += delta({{"type", "signature_delta"}, {"signature", thinking_signature(thinking_)}});
      thinking_.clear();
    }
    out += sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}});
    ++index_;
    open_ = Open::none;
  }

  MessageMeta m_;
  Open open_ = Open::none;
  int index_ = 0;
  std::string thinking_;  // the open thinking block's text, for its signature
};

}  // namespace

Reply anthropic_messages(Service& svc, const std::string& body, const RequestInfo& info) {
  const ojson req = parse_body(body);
  check_field_types(req, {{"metadata", "object"}, {"service_tier", "string"}});
  const ChatInput in = anthropic_chat_input(svc, req);
  const auto max_tokens = opt_int(req, "max_tokens", 1, INT32_MAX);
  if (!max_tokens) bad_request("max_tokens", "'max_tokens' is required");

  GenerationSpec spec;
  spec.sampling = parse_sampling(req, svc, 1.0, false);
  spec.stop = opt_stop_list(req, "stop_sequences", 64, false);
  spec.max_tokens = static_cast<int>(*max_tokens);
  spec.ignore_eos = opt_bool(req, "ignore_eos").value_or(false);  // extension, as on the OpenAI routes
  const ChatPromptIds prompt = svc.chat_prompt(in, ApiStyle::messages);
  apply_chat(spec, prompt, in.tools, svc.new_seed());
  spec.format = anthropic_output_spec(req, in);
  bool omit_thinking = false;
  if (const ojson* th = field(req, "thinking"); th && in.thinking) {
    // A budget of max_tokens or more never binds (interleaved thinking allows it: accepted).
    if (auto budget = opt_int(*th, "budget_tokens", 1, INT32_MAX); budget && prompt.starts_in_reasoning) spec.reasoning_budget = *budget;
    omit_thinking = opt_string(*th, "display") == "omitted";
  }
  svc.apply_test_hooks(spec, info);
  const bool stream = opt_bool(req, "stream").value_or(false);

  MessageMeta meta{svc.new_id("msg_"), svc.config().model_name, static_cast<int64_t>(spec.prompt.size()), omit_thinking,
                   svc.config().keepalive};
  Reply r;
  r.request_id = meta.id;
  r.stream = stream;
  r.job = std::make_shared<Job>();
  r.job->gen = svc.start(std::move(spec), "messages", ApiStyle::messages);
  if (stream) {
    r.content_type = "text/event-stream";
    r.job->writer = std::make_unique<MessageStreamWriter>(std::move(meta));
  } else {
    r.job->writer = std::make_unique<MessageJsonWriter>(std::move(meta));
  }
  return r;
}

Reply anthropic_count_tokens(Service& svc, const std::string& body) {
  const ojson req = parse_body(body);
  const ChatInput in = anthropic_chat_input(svc, req);
  Reply r;
  r.body = dump_json({{"input_tokens", svc.chat_prompt(in, ApiStyle::messages).ids.size()}});
  return r;
}

}  // namespace hs::server
