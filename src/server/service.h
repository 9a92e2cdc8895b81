// The loaded model as the API handlers see it: scheduler, tokenizer, served name, ids and
// seeds, and the admission checks every API shares.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "engine/scheduler.h"
#include "grammar/structured_output.h"
#include "server/api_error.h"
#include "server/chat_request.h"
#include "server/forced_script.h"
#include "server/generation.h"
#include "server/reply.h"
#include "server/response_store.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

namespace hs::server {

class Metrics;

// Whose wording a request's errors take (the context-overflow message differs per API).
enum class ApiStyle { chat, completions, messages, responses };

struct ServiceConfig {
  std::string model_name = "hyperstream";
  // More ids the model answers to (serve --model-alias), listed by /v1/models after the name.
  std::vector<std::string> model_aliases;
  // serve --strict-model-name: a request naming another model gets 404. Off: any `model` is
  // accepted (one model is served) and every answer carries model_name.
  bool strict_model_name = false;
  // serve --clamp-max-tokens: max_tokens beyond the room the context leaves is shrunk to that
  // room instead of refused.
  bool clamp_max_tokens = false;
  // serve --keepalive S: a stream silent this long gets its API's keep-alive event; 0: none.
  std::chrono::milliseconds keepalive{10000};
  size_t stored_responses = 256;  // serve --response-store N: /v1/responses kept for GET / previous_response_id
  size_t stored_bytes = size_t{256} << 20;  // and at most this much of them (JSON bytes)
  ChatVariant variant = ChatVariant::v4;
  bool default_thinking = false;  // thinking mode when a request does not say
  // Test-only (serve --test-force-output): every generation's output is forced to this text.
  std::optional<std::string> forced_output;
  // Test-only (serve --test-force-script): the forced output chosen by the prompt's last turn.
  std::vector<ForcedRule> forced_script;
  size_t test_prefill_tail = 0;  // test-only (serve --test-prefill-tail N): GenerationSpec::prefill_tail
  // Test-only (serve --test-hooks, implied by --test-force-output): the X-HS-Test-* request
  // headers are honoured (RequestInfo).
  bool test_hooks = false;
};

class Service {
 public:
  Service(Scheduler& scheduler, const Tokenizer& tokenizer, ServiceConfig config, Metrics* metrics = nullptr);

  Scheduler& scheduler() { return scheduler_; }
  const Tokenizer& tokenizer() const { return tok_; }
  const ServiceConfig& config() const { return cfg_; }
  int64_t ctx_size() const { return scheduler_.options().ctx_size; }
  ResponseStore& responses() { return responses_; }

  // With strict_model_name, 404 when the request names a model other than the served one or
  // an alias (absent is fine); otherwise any name is accepted.
  void check_model(const std::optional<std::string>& model) const;
  // Whether `id` is the served name or an alias (GET /v1/models/{id}).
  bool serves(const std::string& id) const;
  // prefix + 24 random alphanumerics ("chatcmpl-…", "msg_…").
  std::string new_id(std::string_view prefix);
  uint64_t new_seed();
  // The test hooks of a request (forced output, a forced engine failure), when enabled.
  void apply_test_hooks(GenerationSpec& spec, const RequestInfo& info) const;
  // Prompt ids under the context bound (docs/server.md "Prompt limits"): a prompt of ctx_size()
  // tokens or more is the context-exceeded 400 in `api`'s words, found without tokenizing all
  // of it: first by its bytes (each token stands for at most Tokenizer::max_token_bytes()
  // bytes), then by tokenization that stops at the context. The count such an error names is
  // then a lower bound. chat_prompt renders and tokenizes a chat request (build_chat_prompt);
  // text_prompt tokenizes a completions or /tokenize prompt appended to `ids`.
  ChatPromptIds chat_prompt(const ChatInput& in, ApiStyle api) const;
  void text_prompt(std::string_view text, bool match_added_tokens, ApiStyle api, std::vector<int32_t>& ids) const;
  // max_tokens when the client gave none: what is left of the context (400 when nothing is,
  // worded as `api` words it).
  int default_max_tokens(size_t prompt_tokens, ApiStyle api) const;
  // Checks prompt + max_tokens against the context (400 worded as `api` words it, or with
  // clamp_max_tokens a smaller max_tokens), compiles spec.format into its token constraint (400
  // naming an unsupported schema feature) and submits. `label` names the API in the metrics.
  std::shared_ptr<Generation> start(GenerationSpec spec, const char* label, ApiStyle api);

 private:
  std::shared_ptr<TokenConstraint> compile_format(const GenerationSpec& spec);
  // The byte bound of the prompt limits above.
  void check_prompt_bytes(size_t bytes, ApiStyle api) const;
  size_t max_prompt_ids() const;  // ctx_size() - 1: one position is left for the answer
  Scheduler& scheduler_;
  const Tokenizer& tok_;
  ServiceConfig cfg_;
  Metrics* metrics_;
  ResponseStore responses_;
  grammar::StructuredOutput structured_;  // compiled output formats, shared by requests
  std::mutex mu_;
  std::mt19937_64 rng_;
};

}  // namespace hs::server
