// POST /v1/completions (the legacy text completion API): a raw prompt (string or token ids),
// no chat template, no DSML parsing.
#include <chrono>
#include <ctime>

#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/sampling_request.h"
#include "server/validation.h"

namespace hs::server {

namespace {

// "prompt": a string, token ids, or a one-element array of either (n = 1 only).
std::vector<int32_t> read_prompt(const Service& svc, const ojson& req, std::string& text) {
  const ojson* p = field(req, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  auto ids_of = [&](const ojson& arr) {
    std::vector<int32_t> ids;
    for (const auto& t : arr) {
      if (!t.is_number_integer()) bad_request("prompt", "a token-id prompt must hold only integers, got ", describe_type(t));
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= svc.tokenizer().vocab_size())
        bad_request("prompt", "prompt token ", id, " is outside the vocabulary [0, ", svc.tokenizer().vocab_size(), ")");
      ids.push_back(static_cast<int32_t>(id));
    }
    text = svc.tokenizer().decode(ids);
    return ids;
  };
  std::vector<int32_t> ids;
  if (p->is_string()) {
    text = p->get<std::string>();
    svc.text_prompt(text, true, ApiStyle::completions, ids);
  } else if (p->is_array() && !p->empty() && (p->front().is_string() || p->front().is_array())) {
    if (p->size() != 1) bad_request("prompt", "only one prompt per request is supported (got ", p->size(), ")");
    if (p->front().is_string()) {
      text = p->front().get<std::string>();
      svc.text_prompt(text, true, ApiStyle::completions, ids);
    } else {
      ids = ids_of(p->front());
    }
  } else if (p->is_array()) {
    ids = ids_of(*p);
  } else {
    bad_request("prompt", "'prompt' must be a string or an array of token ids, got ", describe_type(*p));
  }
  if (ids.empty()) bad_request("prompt", "the prompt is empty");
  return ids;
}

struct CompletionMeta {
  std::string id, model;
  int64_t created = 0;
  int logprobs = -1;  // -1: off; else the number of alternatives
  std::string echo;   // the prompt text when echo is on
  std::chrono::milliseconds keepalive{0};  // 0: no keep-alive chunks
};

// The legacy logprobs object: parallel arrays over the tokens.
class LegacyLogprobs {
 public:
  void add(const Tokenizer& tok, const TokenInfo& t, size_t offset) {
    const std::string s = lossy_utf8(t.id >= 0 && t.id < tok.vocab_size() ? tok.token_bytes(t.id) : std::string_view());
    tokens_.push_back(s);
    lps_.push_back(t.logprob);
    ojson top = ojson::object();
    for (const auto& a : t.top)
      top[lossy_utf8(a.token >= 0 && a.token < tok.vocab_size() ? tok.token_bytes(a.token) : std::string_view())] = a.logprob;
    top_.push_back(std::move(top));
    offsets_.push_back(offset);
  }
  ojson take() {
    ojson out = {{"tokens", tokens_}, {"token_logprobs", lps_}, {"top_logprobs", top_}, {"text_offset", offsets_}};
    *this = LegacyLogprobs();
    return out;
  }

 private:
  ojson tokens_ = ojson::array(), lps_ = ojson::array(), top_ = ojson::array(), offsets_ = ojson::array();
};

class CompletionWriter : public ResponseWriter {
 public:
  CompletionWriter(CompletionMeta meta, const Tokenizer& tok, bool stream, bool include_usage)
      : m_(std::move(meta)), tok_(tok), stream_(stream), include_usage_(include_usage), offset_(m_.echo.size()) {}

  std::string begin() override { return stream_ && !m_.echo.empty() ? chunk(m_.echo, nullptr, false) : std::string(); }

  std::string on_batch(const GenBatch& b) override {
    for (const auto& t : b.tokens) {
      if (m_.logprobs >= 0) lp_.add(tok_, t, offset_);
      if (t.id >= 0 && t.id < tok_.vocab_size()) offset_ += tok_.token_bytes(t.id).size();
    }
    std::string text;
    for (const auto& e : b.events) text += e.text;
    if (!stream_) {
      text_ += text;
      if (!b.done) return {};
      if (b.outcome.finish == Finish::cancelled || b.outcome.finish == Finish::error)
        return error_body(ApiFlavor::openai, outcome_error(b.outcome));
      ojson out = base();
      out["choices"] = ojson::array({choice(m_.echo + text_, openai_finish_reason(b.outcome.finish), true)});
      out["usage"] = openai_usage(b.outcome);
      return dump_json(out);
    }
    std::string out;
    if (!text.empty()) out += chunk(text, nullptr, true);
    if (!b.done) return out;
    return out + openai_stream_end(b.outcome, chunk("", openai_finish_reason(b.outcome.finish), true), base(),
                                   include_usage_);
  }

  // A chunk with empty text, as the chat stream sends an empty delta.
  std::string keepalive(std::chrono::milliseconds silent) override {
    return stream_ && m_.keepalive.count() > 0 && silent >= m_.keepalive ? chunk("", nullptr, false) : std::string();
  }

 private:
  ojson base() const {
    return {{"id", m_.id}, {"object", "text_completion"}, {"created", m_.created}, {"model", m_.model}};
  }
  ojson choice(const std::string& text, const char* finish, bool with_logprobs) {
    ojson c = {{"index", 0}, {"text", text}};
    c["logprobs"] = m_.logprobs >= 0 && with_logprobs ? lp_.take() : ojson(nullptr);
    c["finish_reason"] = finish ? ojson(finish) : ojson(nullptr);
    return c;
  }
  std::string chunk(const std::string& text, const char* finish, bool with_logprobs) {
    ojson c = base();
    c["choices"] = ojson::array({choice(text, finish, with_logprobs)});
    if (include_usage_) c["usage"] = nullptr;
    return sse_data(c);
  }

  CompletionMeta m_;
  const Tokenizer& tok_;
  bool stream_, include_usage_;
  size_t offset_;
  std::string text_;
  LegacyLogprobs lp_;
};

}  // namespace

Reply openai_completions(Service& svc, const std::string& body, const RequestInfo& info) {
  const ojson req = parse_body(body);
  check_field_types(req, {{"user", "string"}, {"logit_bias", "object"}, {"stream_options", "object"}});
  svc.check_model(opt_string(req, "model"));
  if (opt_int(req, "n", 1, INT32_MAX).value_or(1) != 1) bad_request("n", "only n = 1 is supported");
  if (opt_int(req, "best_of", 1, INT32_MAX).value_or(1) != 1) bad_request("best_of", "only best_of = 1 is supported");
  if (opt_string(req, "suffix")) bad_request("suffix", "'suffix' is not supported");

  CompletionMeta meta;
  std::string prompt_text;
  GenerationSpec spec;
  spec.prompt = read_prompt(svc, req, prompt_text);
  spec.sampling = parse_sampling(req, svc, 2.0, true);
  meta.logprobs = static_cast<int>(opt_int(req, "logprobs", 0, 5).value_or(-1));
  spec.logprobs = meta.logprobs >= 0;
  spec.sampling.top_logprobs = std::max(meta.logprobs, 0);
  if (opt_bool(req, "echo").value_or(false)) {
    if (spec.logprobs) bad_request("echo", "'echo' together with 'logprobs' is not supported");
    meta.echo = prompt_text;
  }
  spec.stop = opt_stop_list(req, "stop", 16, true);
  spec.ignore_eos = opt_bool(req, "ignore_eos").value_or(false);
  spec.max_tokens = static_cast<int>(opt_int(req, "max_tokens", 1, INT32_MAX).value_or(16));
  svc.apply_test_hooks(spec, info);
  const bool stream = opt_bool(req, "stream").value_or(false);
  bool include_usage = false;
  if (const ojson* so = opt_object(req, "stream_options")) {
    if (!stream) bad_request("stream_options", "'stream_options' is only allowed with \"stream\": true");
    include_usage = opt_bool(*so, "include_usage").value_or(false);
  }

  meta.id = svc.new_id("cmpl-");
  meta.model = svc.config().model_name;
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.keepalive = svc.config().keepalive;
  Reply r;
  r.request_id = meta.id;
  r.stream = stream;
  r.job = std::make_shared<Job>();
  r.job->gen = svc.start(std::move(spec), "completions", ApiStyle::completions);
  if (stream) r.content_type = "text/event-stream";
  r.job->writer = std::make_unique<CompletionWriter>(std::move(meta), svc.tokenizer(), stream, include_usage);
  return r;
}

}  // namespace hs::server
