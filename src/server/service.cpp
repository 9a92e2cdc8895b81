#include "server/service.h"

#include "server/metrics.h"

namespace hs::server {

Service::Service(Scheduler& scheduler, const Tokenizer& tokenizer, ServiceConfig config, Metrics* metrics)
    : scheduler_(scheduler),
      tok_(tokenizer),
      cfg_(std::move(config)),
      metrics_(metrics),
      structured_(tokenizer),
      rng_(std::random_device{}()) {}

void Service::check_model(const std::optional<std::string>& model) const {
  if (model && *model != cfg_.model_name)
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
  if (cfg_.test_hooks && info.force_output) spec.forced = tok_.encode(*info.force_output);
  else if (cfg_.forced_output) spec.forced = tok_.encode(*cfg_.forced_output);
  if (cfg_.test_hooks && info.fail_after) spec.fail_after = *info.fail_after;
}

int Service::default_max_tokens(size_t prompt_tokens) const {
  const int64_t left = ctx_size() - static_cast<int64_t>(prompt_tokens);
  if (left < 1)
    throw ApiError(400,
                   cat("the prompt has ", prompt_tokens, " tokens, which leaves no room to generate in the context size of ",
                       ctx_size(), " tokens"),
                   "messages", "context_length_exceeded");
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

std::shared_ptr<Generation> Service::start(GenerationSpec spec, const char* api) {
  const int64_t need = static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens;
  if (need > ctx_size())
    throw ApiError(400,
                   cat("the prompt has ", spec.prompt.size(), " tokens and max_tokens is ", spec.max_tokens, ": ", need,
                       " tokens do not fit the context size of ", ctx_size(), " tokens"),
                   "max_tokens", "context_length_exceeded");
  if (spec.format.kind != OutputFormat::Kind::text && !spec.forced) spec.constraint = compile_format(spec);
  std::function<void(const GenOutcome&)> on_finish;
  if (metrics_) on_finish = [m = metrics_, a = std::string(api)](const GenOutcome& o) { m->record_generation(a, o); };
  try {
    return Generation::start(scheduler_, tok_, std::move(spec), std::move(on_finish));
  } catch (const Error& e) {  // rejected by the scheduler (shutting down, bad ids)
    const bool closing = std::string_view(e.what()).find("shutting down") != std::string_view::npos;
    throw ApiError(closing ? 503 : 400, e.what());
  }
}

}  // namespace hs::server
