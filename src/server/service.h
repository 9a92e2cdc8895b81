// The loaded model as the API handlers see it: scheduler, tokenizer, served name, ids and
// seeds, and the admission checks every API shares.
#pragma once
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
#include "server/generation.h"
#include "server/reply.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

namespace hs::server {

class Metrics;

struct ServiceConfig {
  std::string model_name = "hyperstream";
  ChatVariant variant = ChatVariant::v4;
  bool default_thinking = false;  // thinking mode when a request does not say
  // Test-only (serve --test-force-output): every generation's output is forced to this text.
  std::optional<std::string> forced_output;
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

  // 404 when the request names a model other than the served one (absent is fine).
  void check_model(const std::optional<std::string>& model) const;
  // prefix + 24 random alphanumerics ("chatcmpl-…", "msg_…").
  std::string new_id(std::string_view prefix);
  uint64_t new_seed();
  // The test hooks of a request (forced output, a forced engine failure), when enabled.
  void apply_test_hooks(GenerationSpec& spec, const RequestInfo& info) const;
  // max_tokens when the client gave none: what is left of the context (400 when nothing is).
  int default_max_tokens(size_t prompt_tokens) const;
  // Checks prompt + max_tokens against the context (400 with the numbers), compiles
  // spec.format into its token constraint (400 naming an unsupported schema feature) and
  // submits. `api` labels the metrics.
  std::shared_ptr<Generation> start(GenerationSpec spec, const char* api);

 private:
  std::shared_ptr<TokenConstraint> compile_format(const GenerationSpec& spec);
  Scheduler& scheduler_;
  const Tokenizer& tok_;
  ServiceConfig cfg_;
  Metrics* metrics_;
  grammar::StructuredOutput structured_;  // compiled output formats, shared by requests
  std::mutex mu_;
  std::mt19937_64 rng_;
};

}  // namespace hs::server
