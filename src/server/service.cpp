#include "server/service.h"

#include <algorithm>

#include "engine/rank_link.h"
#include "server/metrics.h"
#include "util/log.h"

namespace hs::server {

Service::Service(Scheduler& scheduler, const Tokenizer& tokenizer, ServiceConfig config, Metrics* metrics)
    : scheduler_(scheduler),
      tok_(tokenizer),
      cfg_(std::move(config)),
      metrics_(metrics),
      responses_(cfg_.stored_responses, cfg_.stored_bytes),
      structured_(tokenizer),
      rng_(std::random_device{}()) {}

bool Service::serves(const std::string& id) const {
  return id == cfg_.model_name || std::find(cfg_.model_aliases.begin(), cfg_.model_aliases.end(), id) != cfg_.model_aliases.end();
}

void Service::check_model(const std::optional<std::string>& model) const {
  if (model && cfg_.strict_model_name && !serves(*model))
    throw ApiError(404, cat("the model '", *model, "' does not exist; this server serves '", cfg_.model_name, "'"),
                   "model", "model_not_found");
}

std::string Service::new_id(std::string_view prefix) {
  static constexpr char kAlnum[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::string id(prefix);
  std::lock_guard<std::mutex> lk(mu_);
  for (int i = 0; i < 24; ++i) id += kAlnum[rng_() % (sizeof(kAlnum) - 1)];
  return id;
}

uint64_t Service::new_seed() {
  std::lock_guard<std::mutex> lk(mu_);
  return rng_();
}

void Service::apply_test_hooks(GenerationSpec& spec, const RequestInfo& info) const {
  // The forced text is model output: its DSML and think tags are meant as tokens.
  const ForcedRule* rule = nullptr;
  if (!(cfg_.test_hooks && info.force_output) && !cfg_.forced_script.empty()) {
    rule = match_forced_rule(cfg_.forced_script, tok_.decode(spec.prompt));
    log_info("test script: ", rule ? "forcing \"" + rule->output.substr(0, 60) + "\"" : "no rule matches; sampling");
  }
  if (cfg_.test_hooks && info.force_output) spec.forced = tok_.encode(*info.force_output);
  else if (rule) spec.forced = tok_.encode(rule->output);
  else if (cfg_.forced_output) spec.forced = tok_.encode(*cfg_.forced_output);
  if (spec.forced) spec.prefill_tail = cfg_.test_prefill_tail;
  if (cfg_.test_hooks && info.fail_after) spec.fail_after = *info.fail_after;
  if (rule && rule->hold_ms > 0) spec.hold_prefill = std::chrono::milliseconds(rule->hold_ms);
  if (cfg_.test_hooks && info.hold_prefill_ms) spec.hold_prefill = std::chrono::milliseconds(*info.hold_prefill_ms);
}

namespace {

// The 400 of a request that does not fit the context, in the words of its API (clients parse
// them: Claude Code retries with a smaller max_tokens on Anthropic's, Qwen Code reads the
// limit from OpenAI's). max_tokens < 0: the prompt alone leaves no room.
ApiError context_error(ApiStyle api, int64_t prompt, int64_t max_tokens, int64_t ctx) {
  const char* code = "context_length_exceeded";
  const bool prompt_only = max_tokens < 0;
  switch (api) {
    case ApiStyle::messages:
      if (prompt_only) return ApiError(400, cat("prompt is too long: ", prompt, " tokens > ", ctx - 1, " maximum"), "messages", code);
      return ApiError(400,
                      cat("input length and `max_tokens` exceed context limit: ", prompt, " + ", max_tokens, " > ", ctx,
                          ", decrease input length or `max_tokens` and try again"),
                      "max_tokens", code);
    case ApiStyle::responses:
      return ApiError(400,
                      cat("Your input exceeds the context window of this model. Please adjust your input and try again. (",
                          prompt, " input tokens", prompt_only ? "" : cat(" + ", max_tokens, " max_output_tokens"),
                          prompt_only ? " leave no room in " : " > ", "the context size of ", ctx, " tokens)"),
                      "input", code);
    case ApiStyle::chat:
    case ApiStyle::completions: {
      const bool chat = api == ApiStyle::chat;
      const std::string head = cat("This model's maximum context length is ", ctx, " tokens. However, ");
      if (prompt_only)
        return ApiError(400,
                        cat(head, chat ? "your messages" : "your prompt", " resulted in ", prompt, " tokens, which leave no room ",
                            "for the completion. Please reduce the length of the ", chat ? "messages." : "prompt."),
                        chat ? "messages" : "prompt", code);
      return ApiError(400,
                      cat(head, "you requested ", prompt + max_tokens, " tokens (", prompt, chat ? " in the messages, " : " in your prompt, ",
                          max_tokens, chat ? " in the completion)" : " for the completion)", ". Please reduce the length of the ",
                          chat ? "messages or completion." : "prompt or completion."),
                      chat ? "messages" : "prompt", code);
    }
  }
  return ApiError(400, "the request does not fit the context");
}

}  // namespace

size_t Service::max_prompt_ids() const { return static_cast<size_t>(std::max<int64_t>(ctx_size() - 1, 0)); }

void Service::check_prompt_bytes(size_t bytes, ApiStyle api) const {
  const size_t per_token = tok_.max_token_bytes();
  size_t most = 0;  // the most bytes max_prompt_ids() tokens can stand for
  if (__builtin_mul_overflow(max_prompt_ids(), per_token, &most) || bytes <= most) return;
  const auto at_least = static_cast<int64_t>((bytes - 1) / per_token + 1);
  log_info("prompt refused before tokenization: ", bytes, " bytes are at least ", at_least, " tokens (", per_token,
           " bytes per token at most), the context is ", ctx_size());
  throw context_error(api, at_least, -1, ctx_size());
}

ChatPromptIds Service::chat_prompt(const ChatInput& in, ApiStyle api) const {
  const ChatPrompt p = render_chat_prompt(in);
  check_prompt_bytes(p.text.size(), api);
  Tokenizer::BoundedIds r = tok_.encode_bounded(p.text, p.literal, max_prompt_ids());
  if (!r.complete) throw context_error(api, static_cast<int64_t>(r.at_least), -1, ctx_size());
  return {std::move(r.ids), p.starts_in_reasoning};
}

void Service::text_prompt(std::string_view text, bool match_added_tokens, ApiStyle api, std::vector<int32_t>& ids) const {
  check_prompt_bytes(text.size() + ids.size() * tok_.max_token_bytes(), api);
  const size_t room = max_prompt_ids() - std::min(max_prompt_ids(), ids.size());
  const TextSpan all{0, text.size()};  // plain text: the whole prompt is one literal span
  Tokenizer::BoundedIds r = tok_.encode_bounded(text, match_added_tokens ? std::span<const TextSpan>() : std::span<const TextSpan>(&all, 1), room);
  if (!r.complete || ids.size() + r.ids.size() > max_prompt_ids())
    throw context_error(api, static_cast<int64_t>(ids.size() + r.at_least), -1, ctx_size());
  ids.insert(ids.end(), r.ids.begin(), r.ids.end());
}

int Service::default_max_tokens(size_t prompt_tokens, ApiStyle api) const {
  const int64_t left = ctx_size() - static_cast<int64_t>(prompt_tokens);
  if (left < 1) throw context_error(api, static_cast<int64_t>(prompt_tokens), -1, ctx_size());
  return static_cast<int>(std::min<int64_t>(left, INT32_MAX));
}

// The test hook's forced output is not constrained: it is what the test asked for.
std::shared_ptr<TokenConstraint> Service::compile_format(const GenerationSpec& spec) {
  const OutputFormat& f = spec.format;
  const bool call = f.kind == OutputFormat::Kind::tool_call;
  const char* param = call ? "tool_choice" : "response_format";
  if (spec.ignore_eos) throw ApiError(400, "'ignore_eos' cannot be combined with a structured output format", "ignore_eos");
  grammar::OutputSpec os;
  os.kind = call ? grammar::OutputSpec::Kind::tool_call
               : f.kind == OutputFormat::Kind::json_object ? grammar::OutputSpec::Kind::json_object
                                                           : grammar::OutputSpec::Kind::json_schema;
  os.schema = f.kind == OutputFormat::Kind::json_schema && f.schema.is_null() ? ojson::object() : f.schema;
  os.tool_name = f.name;
  os.reasoning_first = spec.chat && spec.parser.start_in_reasoning;
  try {
    return structured_.constraint(os);
  } catch (const Error& e) {  // SchemaError: unsupported or invalid; else too large
    throw ApiError(400,
                   call ? cat("the parameters of the tool '", f.name, "' cannot be enforced: ", e.what())
                        : cat("the response format's JSON schema cannot be enforced: ", e.what()),
                   param, "unsupported_schema");
  }
}

std::shared_ptr<Generation> Service::start(GenerationSpec spec, const char* label, ApiStyle api) {
  const int64_t prompt = static_cast<int64_t>(spec.prompt.size());
  if (prompt + spec.max_tokens > ctx_size()) {
    if (prompt >= ctx_size()) throw context_error(api, prompt, -1, ctx_size());
    if (!cfg_.clamp_max_tokens) throw context_error(api, prompt, spec.max_tokens, ctx_size());
    log_info("max_tokens ", spec.max_tokens, " clamped to ", ctx_size() - prompt, " (a prompt of ", prompt,
             " tokens in a context of ", ctx_size(), ")");
    spec.max_tokens = static_cast<int>(ctx_size() - prompt);
  }
  if (spec.format.kind != OutputFormat::Kind::text && !spec.forced) spec.constraint = compile_format(spec);
  // Snapshot points for the prefix cache: after every chat-turn marker, where the next turn of
  // the conversation (or a re-rendered one) still agrees with this prompt.
  const SpecialIds& sp = tok_.special_ids();
  spec.cache_points.clear();
  for (size_t i = 0; i + 1 < spec.prompt.size(); ++i)
    if (spec.prompt[i] == sp.user || spec.prompt[i] == sp.assistant) spec.cache_points.push_back(static_cast<int64_t>(i + 1));
  std::function<void(const GenOutcome&)> on_finish;
  if (metrics_) on_finish = [m = metrics_, a = std::string(label)](const GenOutcome& o) { m->record_generation(a, o); };
  try {
    return Generation::start(scheduler_, tok_, std::move(spec), std::move(on_finish));
  } catch (const PipelineDown& e) {  // the engine's ranks are gone: nothing will be served
    throw ApiError(503, e.what());
  } catch (const Error& e) {  // rejected by the scheduler (shutting down, bad ids)
    const bool closing = std::string_view(e.what()).find("shutting down") != std::string_view::npos;
    throw ApiError(closing ? 503 : 400, e.what());
  }
}

}  // namespace hs::server
