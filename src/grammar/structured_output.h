// Structured output: what a request's answer must be (any JSON object, JSON valid for a schema,
// or a DSML call of one tool with valid arguments), compiled into a grammar over the
// tokenizer's vocabulary and enforced token by token through the engine's TokenConstraint.
// Compiled outputs are kept (LRU by spec) so that requests with the same schema share the
// grammar and its mask cache.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/token_constraint.h"
#include "grammar/mask.h"
#include "grammar/matcher.h"
#include "grammar/vocab.h"
#include "tokenizer/chat_json.h"

namespace hs {
class Tokenizer;
}

namespace hs::grammar {

struct OutputSpec {
  enum class Kind { json_object, json_schema, tool_call };
  Kind kind = Kind::json_object;
  ojson schema;           // json_schema: the schema; tool_call: the tool's parameters (null: none)
  std::string tool_name;  // tool_call
  // The prompt ends in "<think>": free reasoning up to "</think>" comes first, and only the
  // answer after it is constrained.
  bool reasoning_first = false;
};

struct CompiledOutput {
  std::shared_ptr<const Grammar> grammar;
  std::unique_ptr<MaskCache> cache;
  std::vector<int32_t> specials;  // added tokens the grammar may use ("</think>", "｜DSML｜")
  double compile_seconds = 0;
};

class StructuredOutput {
 public:
  explicit StructuredOutput(const Tokenizer& tok, size_t cache_entries = 64);
  // Throws SchemaError for a schema that is invalid or uses what is not supported.
  std::shared_ptr<const CompiledOutput> compile(const OutputSpec& spec);
  std::shared_ptr<TokenConstraint> constraint(const OutputSpec& spec);
  const std::shared_ptr<const Vocabulary>& vocab();

 private:
  const Tokenizer& tok_;
  size_t capacity_;
  std::mutex mu_;
  std::shared_ptr<const Vocabulary> vocab_;
  std::list<std::string> lru_;  // most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<const CompiledOutput>, std::list<std::string>::iterator>> cache_;
};

// Builds the grammar of `spec` for `vocab` (no caching).
std::shared_ptr<const CompiledOutput> compile_output(const OutputSpec& spec, std::shared_ptr<const Vocabulary> vocab);

// A TokenConstraint over one compiled output.
class GrammarConstraint : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const CompiledOutput> out);
  void mask(float* logits, int64_t vocab) override;
  void allowed(std::vector<uint64_t>& bits, int64_t vocab) override;
  void accept(int32_t token) override;
  bool finished() const override;
  const Matcher& matcher() const { return m_; }
  const TokenBits& last_mask() const { return bits_; }
  // Fills last_mask() for the current state (mask() without logits).
  void compute();

 private:
  std::shared_ptr<const CompiledOutput> out_;
  Matcher m_;
  TokenBits bits_;
  bool done_ = false;
};

}  // namespace hs::grammar
