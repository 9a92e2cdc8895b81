#include "grammar/structured_output.h"

#include <bit>
#include <chrono>
#include <cmath>
#include <limits>

#include "grammar/dsml_grammar.h"
#include "grammar/schema_error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat_tokens.h"

namespace hs::grammar {

std::shared_ptr<const CompiledOutput> compile_output(const OutputSpec& spec, std::shared_ptr<const Vocabulary> vocab) {
  const auto t0 = std::chrono::steady_clock::now();
  GrammarBuilder g;
  JsonOptions opts;
  opts.forbidden = {std::string(ds4::kEos)};
  if (spec.kind == OutputSpec::Kind::tool_call) opts.forbidden.push_back(kDsmlParamClose);
  int32_t answer = -1;
  try {
    SchemaCompiler c(g, spec.schema, opts);
    switch (spec.kind) {
      case OutputSpec::Kind::json_object: answer = c.any_object(); break;
      case OutputSpec::Kind::json_schema: answer = c.value(spec.schema, "#"); break;
      case OutputSpec::Kind::tool_call: answer = tool_call_rule(g, c, spec.tool_name, spec.schema); break;
    }
  } catch (const SchemaError&) {
    throw;
  } catch (const ojson::exception& e) {  // a keyword of the wrong JSON type met in a computation
    throw SchemaError("", cat("invalid schema: ", e.what()));
  }
  int32_t root = answer;
  if (spec.reasoning_first) {
    root = g.declare("turn");
    Automaton a;
    const int32_t mid = a.add();
    a.call(a.start, reasoning_rule(g, opts.forbidden), mid);
    const int32_t end = a.add();
    a.call(mid, answer, end);
    a.accept(end);
    g.define(root, std::move(a));
  }
  auto out = std::make_shared<CompiledOutput>();
  out->grammar = g.build(root);
  auto special = [&](std::string_view text) {
    if (const int32_t id = vocab->find_special(text); id >= 0) out->specials.push_back(id);
  };
  if (spec.reasoning_first) special(ds4::kThinkEnd);
  if (spec.kind == OutputSpec::Kind::tool_call) special(ds4::kDsml);
  out->cache = std::make_unique<MaskCache>(out->grammar, std::move(vocab));
  out->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

StructuredOutput::StructuredOutput(const Tokenizer& tok, size_t cache_entries) : tok_(tok), capacity_(cache_entries) {}

const std::shared_ptr<const Vocabulary>& StructuredOutput::vocab() {
  std::lock_guard<std::mutex> lk(mu_);
  if (!vocab_) vocab_ = std::make_shared<const Vocabulary>(tok_);
  return vocab_;
}

std::shared_ptr<const CompiledOutput> StructuredOutput::compile(const OutputSpec& spec) {
  const std::string key = cat(static_cast<int>(spec.kind), spec.reasoning_first ? "r" : "-", spec.tool_name.size(), ":",
                              spec.tool_name, spec.schema.dump(-1, ' ', false, ojson::error_handler_t::replace));
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  auto out = compile_output(spec, vocab());
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second.first;  // compiled meanwhile
  lru_.push_front(key);
  cache_.emplace(key, std::make_pair(out, lru_.begin()));
  while (cache_.size() > capacity_) {
    cache_.erase(lru_.back());
    lru_.pop_back();
  }
  return out;
}

std::shared_ptr<TokenConstraint> StructuredOutput::constraint(const OutputSpec& spec) {
  return std::make_shared<GrammarConstraint>(compile(spec));
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const CompiledOutput> out) : out_(std::move(out)), m_(out_->grammar) {}

void GrammarConstraint::compute() { compute_mask(m_, *out_->cache, out_->specials, bits_); }

void GrammarConstraint::mask(float* logits, int64_t vocab) {
  compute();
  const int64_t n = std::min<int64_t>(vocab, static_cast<int64_t>(bits_.size()) * 64);
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  for (int64_t w = 0; w * 64 < n; ++w) {
    const uint64_t word = bits_[static_cast<size_t>(w)];
    if (word == ~uint64_t{0}) continue;
    const int64_t end = std::min<int64_t>(n, (w + 1) * 64);
    if (word == 0) {
      std::fill(logits + w * 64, logits + end, kOff);
      continue;
    }
    for (uint64_t off = ~word; off != 0; off &= off - 1) {  // only the masked ids
      const int64_t i = w * 64 + std::countr_zero(off);
      if (i < end) logits[i] = kOff;
    }
  }
  for (int64_t i = n; i < vocab; ++i) logits[i] = kOff;  // ids the tokenizer does not have
}

void GrammarConstraint::allowed(std::vector<uint64_t>& bits, int64_t vocab) {
  compute();
  const size_t words = static_cast<size_t>((vocab + 63) / 64);
  bits.assign(words, 0);
  const int64_t n = std::min<int64_t>(vocab, static_cast<int64_t>(bits_.size()) * 64);
  std::copy(bits_.begin(), bits_.begin() + static_cast<std::ptrdiff_t>((n + 63) / 64), bits.begin());
  if (n % 64) bits[static_cast<size_t>(n / 64)] &= (uint64_t{1} << (n % 64)) - 1;  // ids past the mask's
}

void GrammarConstraint::accept(int32_t token) {
  HS_CHECK(!done_, "structured output: a token after the end of the output");
  const Vocabulary& v = out_->cache->vocab();
  if (token == v.eos()) {
    HS_CHECK(m_.complete(), "structured output: end of sentence before the output is complete");
    done_ = true;
    return;
  }
  HS_CHECK(token >= 0 && token < v.size(), "structured output: token ", token, " is outside the vocabulary");
  const bool special = std::find(out_->specials.begin(), out_->specials.end(), token) != out_->specials.end();
  const std::string_view bytes = v.bytes(token);
  HS_CHECK(!bytes.empty() && (special || !v.is_special(token)) && m_.feed(bytes), "structured output: token ", token,
           " is not allowed here by the output format");
}

bool GrammarConstraint::finished() const { return done_ || (m_.complete() && !m_.can_continue()); }

}  // namespace hs::grammar
