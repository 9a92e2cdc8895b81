// Tokenizer throughput (MB/s of input text, one core) on the V4 tokenizer in tests/data.
//   ninja -C build bench_tokenizer && build/bench/bench_tokenizer
// English text is generated here (seeded), so the numbers are reproducible without a corpus.
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"

namespace {

const hs::Tokenizer& tokenizer() {
  static const hs::Tokenizer tok = hs::Tokenizer::load(HS_TEST_DATA "/tokenizer/v4/tokenizer.json");
  return tok;
}

struct Rng {
  uint64_t s = 0x9E3779B97F4A7C15ull;
  uint32_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return static_cast<uint32_t>(s >> 11);
  }
  size_t below(size_t n) { return next() % n; }
};

constexpr const char* kWords[] = {
    "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on", "not",
    "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they", "you", "were",
    "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when", "will", "would",
    "who", "so", "no", "she", "other", "its", "may", "these", "about", "some", "what", "into", "them", "than",
    "time", "could", "only", "new", "people", "two", "first", "also", "made", "over", "such", "after", "most",
    "through", "world", "between", "should", "because", "each", "where", "government", "system", "however",
    "country", "development", "information", "important", "different", "following", "social", "example",
    "language", "question", "research", "computer", "network", "performance", "engineering", "university",
    "history", "economic", "community", "environment", "particular", "understanding", "relationship",
    "experience", "interesting", "technology", "international", "management", "possible", "children",
    "number", "problem", "program", "model", "water", "company", "market", "process", "result", "power",
    "service", "policy", "support", "increase", "several", "although", "describe", "provide", "without",
    "London", "Europe", "American", "Monday", "September", "Professor", "Smith", "John", "Internet", "Python"};

std::string english_text(size_t bytes) {
  Rng r;
  std::string s;
  while (s.size() < bytes) {
    const size_t n = 5 + r.below(16);
    for (size_t i = 0; i < n; ++i) {
      std::string w = kWords[r.below(std::size(kWords))];
      if (i == 0 && w[0] >= 'a' && w[0] <= 'z') w[0] = static_cast<char>(w[0] - 32);
      if (i > 0) s += ' ';
      if (r.below(40) == 0) s += std::to_string(r.below(3000));
      else s += w;
      if (i + 1 < n && r.below(9) == 0) s += ',';
    }
    s += "..?!"[r.below(4)];
    s += r.below(6) == 0 ? "\n\n" : " ";
  }
  return s;
}

// Pronounceable nonsense words: nearly every piece is new, so this measures the merge loop
// without the help of the piece cache.
std::string random_words(size_t bytes) {
  Rng r;
  constexpr const char* kSyl[] = {"ka", "lo", "mi", "nu", "re", "st", "ph", "qu", "ex", "ion", "ing", "ter", "ble", "or", "an", "zy"};
  std::string s;
  while (s.size() < bytes) {
    const size_t n = 1 + r.below(5);
    s += ' ';
    for (size_t i = 0; i < n; ++i) s += kSyl[r.below(std::size(kSyl))];
  }
  return s;
}

std::string corpus_text() {
  std::ifstream in(HS_TEST_DATA "/tokenizer/corpus.jsonl");
  std::string s, line;
  while (std::getline(in, line)) s += nlohmann::json::parse(line).get<std::string>();
  return s;
}

void run_encode(benchmark::State& state, const std::string& text) {
  const auto& tok = tokenizer();
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = tok.encode(text);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(n_tokens ? n_tokens : 1);
}

void BM_EncodeEnglish(benchmark::State& state) {
  static const std::string text = english_text(1 << 20);
  run_encode(state, text);
}

void BM_EncodeRandomWords(benchmark::State& state) {
  static const std::string text = random_words(1 << 20);
  run_encode(state, text);
}

void BM_EncodeCorpus(benchmark::State& state) {
  static const std::string text = corpus_text();
  run_encode(state, text);
}

void BM_DecodeEnglish(benchmark::State& state) {
  static const std::string text = english_text(1 << 20);
  const auto ids = tokenizer().encode(text);
  for (auto _ : state) {
    auto s = tokenizer().decode(ids);
    benchmark::DoNotOptimize(s.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}

}  // namespace

BENCHMARK(BM_EncodeEnglish)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeRandomWords)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeCorpus)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeEnglish)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
