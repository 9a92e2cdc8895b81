// POST /v1/responses (the Response object, or its event stream), GET and DELETE
// /v1/responses/{id} over the in-memory store.
#include "server/responses_api.h"

#include <ctime>

#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/sampling_request.h"
#include "server/validation.h"

namespace hs::server {

namespace {

struct ResponseMeta {
  std::string id, model;
  int64_t created_at = 0;
  ojson echo;          // ResponsesRequest::echo
  ojson conversation;  // the items this response continues (stored with its output)
  bool store = true;
  std::chrono::milliseconds keepalive{0};
};

ojson usage_json(const GenOutcome& o) {
  return {{"input_tokens", o.prompt_tokens},
          {"input_tokens_details", {{"cached_tokens", o.cached_tokens}}},
          {"output_tokens", o.completion_tokens},
          {"output_tokens_details", {{"reasoning_tokens", o.reasoning_tokens}}},
          {"total_tokens", o.prompt_tokens + o.completion_tokens}};
}

// The Response object, in the API's field order; `outcome` null: still in progress.
ojson response_object(const ResponseMeta& m, const ojson& output, const GenOutcome* outcome) {
  const bool failed = outcome && (outcome->finish == Finish::error || outcome->finish == Finish::cancelled);
  const bool cut = outcome && outcome->finish == Finish::length;
  ojson r = {{"id", m.id}, {"object", "response"}, {"created_at", m.created_at}};
  r["status"] = !outcome ? "in_progress" : failed ? "failed" : cut ? "incomplete" : "completed";
  r["background"] = false;
  r["error"] = failed ? ojson{{"code", "server_error"}, {"message", outcome_error(*outcome).what()}} : ojson(nullptr);
  r["incomplete_details"] = cut ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr);
  for (const char* key : {"instructions", "max_output_tokens"}) r[key] = m.echo[key];
  r["model"] = m.model;
  r["output"] = output;
  for (const char* key : {"parallel_tool_calls", "previous_response_id", "reasoning"}) r[key] = m.echo[key];
  r["service_tier"] = "default";
  for (const char* key : {"store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation"}) r[key] = m.echo[key];
  r["usage"] = outcome ? usage_json(*outcome) : ojson(nullptr);
  r["user"] = m.echo["user"];
  r["metadata"] = m.echo["metadata"];
  return r;
}

// The finished Response; stored (store: true, not failed) with the conversation it ends.
ojson finish_response(Service& svc, ResponseMeta& m, const ojson& items, const GenOutcome& o) {
  ojson r = response_object(m, items, &o);
  if (m.store && r["status"] != "failed") {
    ojson conv = std::move(m.conversation);
    conv.insert(conv.end(), items.begin(), items.end());
    svc.responses().put(m.id, {r, std::move(conv)});
  }
  return r;
}

class ResponseJsonWriter : public ResponseWriter {
 public:
  ResponseJsonWriter(Service& svc, ResponseMeta meta) : svc_(svc), m_(std::move(meta)), out_(svc) {}
  std::string on_batch(const GenBatch& b) override {
    out_.feed(b);
    if (!b.done) return {};
    if (b.outcome.finish == Finish::cancelled || b.outcome.finish == Finish::error)
      return error_body(ApiFlavor::openai, outcome_error(b.outcome));
    out_.close();
    return dump_json(finish_response(svc_, m_, out_.items(), b.outcome));
  }

 private:
  Service& svc_;
  ResponseMeta m_;
  ResponseOutput out_;
};

// response.created, response.in_progress, the items' events, then response.completed,
// response.incomplete (max_output_tokens) or response.failed.
class ResponseStreamWriter : public ResponseWriter {
 public:
  ResponseStreamWriter(Service& svc, ResponseMeta meta) : svc_(svc), m_(std::move(meta)), out_(svc) {}
  std::string begin() override {
    const ojson r = response_object(m_, ojson::array(), nullptr);
    std::string out = out_.event({{"type", "response.created"}, {"response", r}});
    return out + out_.event({{"type", "response.in_progress"}, {"response", r}});
  }
  std::string on_batch(const GenBatch& b) override {
    std::string bytes = out_.feed(b);
    if (!b.done) return bytes;
    bytes += out_.close();
    const ojson r = finish_response(svc_, m_, out_.items(), b.outcome);
    const std::string status = r["status"];
    const char* type = status == "failed" ? "response.failed" : status == "incomplete" ? "response.incomplete" : "response.completed";
    return bytes + out_.event({{"type", type}, {"response", r}});
  }
  // The Responses stream's own keep-alive event (the SDKs skip it).
  std::string keepalive(std::chrono::milliseconds silent) override {
    return m_.keepalive.count() > 0 && silent >= m_.keepalive ? out_.event({{"type", "keepalive"}}) : std::string();
  }

 private:
  Service& svc_;
  ResponseMeta m_;
  ResponseOutput out_;
};

Reply json_reply(const ojson& v) {
  Reply r;
  r.body = dump_json(v);
  return r;
}

}  // namespace

Reply openai_responses(Service& svc, const std::string& body, const RequestInfo& info) {
  const ojson req = parse_body(body);
  ResponsesRequest rr = parse_responses_request(svc, req);
  GenerationSpec spec;
  spec.sampling = parse_sampling(req, svc, 2.0, false);
  apply_chat(spec, svc.chat_prompt(rr.in, ApiStyle::responses), rr.in.tools, svc.new_seed());
  spec.format = rr.format;
  spec.max_tokens = rr.max_output_tokens ? static_cast<int>(*rr.max_output_tokens)
                                         : svc.default_max_tokens(spec.prompt.size(), ApiStyle::responses);
  svc.apply_test_hooks(spec, info);

  ResponseMeta meta{svc.new_id("resp_"), svc.config().model_name, static_cast<int64_t>(std::time(nullptr)),
                    std::move(rr.echo), std::move(rr.conversation), rr.store, svc.config().keepalive};
  Reply r;
  r.request_id = meta.id;
  r.stream = rr.stream;
  r.job = std::make_shared<Job>();
  r.job->gen = svc.start(std::move(spec), "responses", ApiStyle::responses);
  if (rr.stream) {
    r.content_type = "text/event-stream";
    r.job->writer = std::make_unique<ResponseStreamWriter>(svc, std::move(meta));
  } else {
    r.job->writer = std::make_unique<ResponseJsonWriter>(svc, std::move(meta));
  }
  return r;
}

Reply get_response(Service& svc, const std::string& id) {
  auto entry = svc.responses().get(id);
  if (!entry) throw ApiError(404, cat("Response with id '", id, "' not found."), "response_id");
  return json_reply(entry->response);
}

Reply delete_response(Service& svc, const std::string& id) {
  if (!svc.responses().erase(id)) throw ApiError(404, cat("Response with id '", id, "' not found."), "response_id");
  return json_reply({{"id", id}, {"object", "response"}, {"deleted", true}});
}

}  // namespace hs::server
