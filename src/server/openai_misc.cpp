// GET /v1/models, POST /tokenize and /detokenize, and the small pieces the OpenAI handlers share.
#include <ctime>

#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/validation.h"

namespace hs::server {

ojson openai_token_logprob(const Tokenizer& tok, int32_t id, float logprob) {
  std::string_view bytes;
  if (id >= 0 && id < tok.vocab_size()) bytes = tok.token_bytes(id);
  ojson b = ojson::array();
  for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
  return {{"token", lossy_utf8(bytes)}, {"logprob", logprob}, {"bytes", std::move(b)}};
}

const char* openai_finish_reason(Finish f) {
  switch (f) {
    case Finish::length: return "length";
    case Finish::tool_calls: return "tool_calls";
    default: return "stop";
  }
}

ApiError outcome_error(const GenOutcome& o) {
  if (o.finish == Finish::cancelled)
    return ApiError(503, "the generation was cancelled (the server is shutting down)", {}, "cancelled");
  return ApiError(o.error_status, "the generation failed: " + o.error);
}

ojson openai_usage(const GenOutcome& o) {
  ojson u = {{"prompt_tokens", o.prompt_tokens},
             {"completion_tokens", o.completion_tokens},
             {"total_tokens", o.prompt_tokens + o.completion_tokens},
             {"prompt_tokens_details", {{"cached_tokens", o.cached_tokens}}}};
  // Speculative decoding (--draft) in OpenAI's predicted-output fields: drafts the model kept / rejected.
  if (o.drafted_tokens > 0)
    u["completion_tokens_details"] = {{"accepted_prediction_tokens", o.accepted_tokens},
                                      {"rejected_prediction_tokens", o.drafted_tokens - o.accepted_tokens}};
  return u;
}

std::string openai_stream_end(const GenOutcome& o, const std::string& final_chunk, ojson base, bool include_usage) {
  if (o.finish == Finish::cancelled || o.finish == Finish::error)
    return sse_data(ojson::parse(error_body(ApiFlavor::openai, outcome_error(o)))) + "data: [DONE]\n\n";
  std::string out = final_chunk;
  if (include_usage) {
    base["choices"] = ojson::array();
    base["usage"] = openai_usage(o);
    out += sse_data(base);
  }
  return out + "data: [DONE]\n\n";
}

namespace {

// One card per id the model answers to. The Anthropic shape (a request carrying
// `anthropic-version`, as Claude Code's model checks do) has type/display_name/created_at.
ojson model_card(const Service& svc, const std::string& id, bool anthropic) {
  if (anthropic) return {{"type", "model"}, {"id", id}, {"display_name", id}, {"created_at", "1970-01-01T00:00:00Z"}};
  return {{"id", id}, {"object", "model"}, {"created", 0}, {"owned_by", "hyperstream"}, {"max_model_len", svc.ctx_size()}};
}

Reply json_reply(const ojson& v) {
  Reply r;
  r.body = dump_json(v);
  return r;
}

}  // namespace

Reply openai_models(const Service& svc, bool anthropic) {
  ojson data = ojson::array({model_card(svc, svc.config().model_name, anthropic)});
  for (const auto& alias : svc.config().model_aliases) data.push_back(model_card(svc, alias, anthropic));
  if (!anthropic) return json_reply({{"object", "list"}, {"data", std::move(data)}});
  const std::string first = data.front()["id"], last = data.back()["id"];
  return json_reply({{"data", std::move(data)}, {"has_more", false}, {"first_id", first}, {"last_id", last}});
}

Reply openai_model(const Service& svc, const std::string& id, bool anthropic) {
  if (!svc.serves(id))
    throw ApiError(404, cat("the model '", id, "' does not exist; this server serves '", svc.config().model_name, "'"),
                   "model", "model_not_found");
  return json_reply(model_card(svc, id, anthropic));
}

// {"prompt": "text"} (or llama.cpp's "content") or a chat request {"messages": [...], "tools":
// [...], ...} -> the ids the server would run. A prompt is tokenized as /v1/completions does it,
// special-token text parsed as control tokens (llama.cpp's parse_special, default true; false
// keeps it plain text); add_special (default false) prepends BOS. A chat request is rendered
// exactly as /v1/chat/completions renders it: template tokens special, the request's text never.
Reply tokenize_endpoint(Service& svc, const std::string& body) {
  const ojson req = parse_body(body);
  const auto parse_special = opt_bool(req, "parse_special");
  const auto add_special = opt_bool(req, "add_special");
  std::vector<int32_t> ids;
  if (field(req, "messages")) {
    for (const char* key : {"parse_special", "add_special"})
      if (field(req, key))
        bad_request(key, "'", key, "' applies to 'prompt' only: in a chat request the template's tokens are always "
                    "special and the messages' text never is");
    ids = svc.chat_prompt(openai_chat_input(svc, req), ApiStyle::chat).ids;
  } else {
    svc.check_model(opt_string(req, "model"));
    auto prompt = opt_string(req, "prompt");
    const auto content = opt_string(req, "content");
    if (prompt && content) bad_request("content", "give 'prompt' or 'content', not both");
    if (!prompt) prompt = content;
    if (!prompt) bad_request("prompt", "'prompt' (a string) or 'messages' is required");
    const int32_t bos = svc.tokenizer().special_ids().bos;
    if (add_special.value_or(false) && bos >= 0) ids.push_back(bos);
    svc.text_prompt(*prompt, parse_special.value_or(true), ApiStyle::completions, ids);
  }
  ojson out = {{"count", ids.size()}, {"max_model_len", svc.ctx_size()}, {"tokens", ids}};
  if (opt_bool(req, "return_token_strs").value_or(false)) {
    ojson strs = ojson::array();
    for (int32_t id : ids) strs.push_back(lossy_utf8(svc.tokenizer().token_bytes(id)));
    out["token_strs"] = std::move(strs);
  }
  return json_reply(out);
}

Reply detokenize_endpoint(Service& svc, const std::string& body) {
  const ojson req = parse_body(body);
  svc.check_model(opt_string(req, "model"));
  const ojson* tokens = opt_array(req, "tokens");
  if (!tokens) bad_request("tokens", "'tokens' (an array of token ids) is required");
  std::vector<int32_t> ids;
  for (const auto& t : *tokens) {
    if (!t.is_number_integer()) bad_request("tokens", "'tokens' must hold only integers, got ", describe_type(t));
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= svc.tokenizer().vocab_size())
      bad_request("tokens", "token id ", id, " is outside the vocabulary [0, ", svc.tokenizer().vocab_size(), ")");
    ids.push_back(static_cast<int32_t>(id));
  }
  return json_reply({{"prompt", lossy_utf8(svc.tokenizer().decode(ids))}});
}

}  // namespace hs::server
