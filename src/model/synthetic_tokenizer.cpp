// The synthetic tokenizer: a small byte-level BPE in DeepSeek-V4's format (same pre-tokenizer,
// same added tokens), generated as tokenizer.json text so that it goes through the real loader.
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <unordered_map>

#include "model/synthetic.h"
#include "tokenizer/byte_unicode.h"
#include "tokenizer/chat_tokens.h"
#include "tokenizer/pretokenize.h"
#include "util/error.h"

namespace hs {

namespace {

// Each word, alone and after a space, becomes one token; merges are made in this order.
// clang-format off
constexpr std::string_view kWords[] = {
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as",
    "with", "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but",
    "not", "what", "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each",
    "which", "she", "do", "how", "their", "if", "will", "up", "other", "about", "out", "many", "then",
    "them", "these", "so", "some", "her", "would", "make", "like", "him", "into", "time", "has", "look",
    "two", "more", "write", "go", "see", "number", "no", "way", "could", "people", "my", "than", "first",
    "water", "been", "call", "who", "now", "find", "long", "down", "day", "did", "get", "come", "made",
    "may", "part", "hello", "world", "Hello", "The", "What", "How", "Why", "I", "It", "This", "user",
    "assistant", "think", "tool", "calls", "invoke", "name", "parameter", "string", "true", "false",
    "result", "function", "question", "answer", "code", "python", "json", "model", "text", "token",
    "ing", "tion", "ed", "er", "ly", "ment", "ness", "able", "re", "un",
};
// clang-format on

constexpr std::string_view kPad = "<｜▁pad▁｜>";
constexpr int32_t kV4Vocab = 129280;

struct AddedToken {
  std::string_view text;
  int32_t v4_id;  // its id in the real DeepSeek-V4 vocabulary (docs/tokenizer.md §4)
};

// The real V4 added tokens after ids 0-2: V3's named tokens, V4's additions, <｜image｜>.
// clang-format off
constexpr AddedToken kAdded[] = {
    {"<｜fim▁hole｜>", 128800}, {"<｜fim▁begin｜>", 128801}, {"<｜fim▁end｜>", 128802},
    {ds4::kUser, 128803}, {ds4::kAssistant, 128804}, {"<|EOT|>", 128805},
    {"<｜tool▁calls▁begin｜>", 128806}, {"<｜tool▁calls▁end｜>", 128807}, {"<｜tool▁call▁begin｜>", 128808},
    {"<｜tool▁call▁end｜>", 128809}, {"<｜tool▁outputs▁begin｜>", 128810}, {"<｜tool▁outputs▁end｜>", 128811},
    {"<｜tool▁output▁begin｜>", 128812}, {"<｜tool▁output▁end｜>", 128813}, {"<｜tool▁sep｜>", 128814},
    {"<｜begin▁of▁repo▁name｜>", 128815}, {"<｜end▁of▁repo▁name｜>", 128816},
    {"<｜begin▁of▁file▁name｜>", 128817}, {"<｜end▁of▁file▁name｜>", 128818}, {"<｜begin▁of▁file｜>", 128819},
    {"<｜end▁of▁file｜>", 128820}, {ds4::kThinkStart, 128821}, {ds4::kThinkEnd, 128822},
    {"<｜place▁holder▁for▁copy｜>", 128823}, {"<｜place▁holder▁for▁pointer▁replace｜>", 128824},
    {ds4::kDsml, 128825}, {"<｜begin▁sys｜>", 128826}, {"<｜end▁sys｜>", 128827}, {ds4::kLatestReminder, 128828},
    {ds4::kTaskTokens[0].token, 128829}, {ds4::kTaskTokens[1].token, 128830}, {ds4::kTaskTokens[2].token, 128831},
    {ds4::kTaskTokens[3].token, 128832}, {"<｜task｜>", 128833}, {"<｜political｜>", 128834},
    {"<｜entity｜>", 128835}, {ds4::kTaskTokens[4].token, 128836}, {"<｜safety｜>", 128837},
    {"<｜answer｜>", 128838}, {"<｜search｜>", 128839}, {"<dsml:", 128840}, {"</dsml:", 128841},
    {"<｜search▁begin｜>", 128842}, {"<｜search▁end｜>", 128843}, {"<｜extracted_url｜>", 128844},
    {ds4::kTaskTokens[5].token, 128845}, {"<｜end_of_query｜>", 128846}, {"<｜image｜>", 129279},
};
// clang-format on
constexpr int64_t kNumAdded = static_cast<int64_t>(std::size(kAdded));

std::string byte_level(std::string_view raw) {
  std::string s;
  bytelevel::append_encoded(raw, s);
  return s;
}

// Merges the adjacent pair of lowest rank (leftmost on ties) until none has a rank: the BPE
// rule the tokenizer applies, used here to find what a word still lacks.
std::vector<std::string> apply_merges(std::vector<std::string> sym,
                                      const std::map<std::pair<std::string, std::string>, int>& rank) {
  for (;;) {
    size_t best = sym.size();
    int best_rank = 0;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = rank.find({sym[i], sym[i + 1]});
      if (it != rank.end() && (best == sym.size() || it->second < best_rank)) best = i, best_rank = it->second;
    }
    if (best == sym.size()) return sym;
    sym[best] += sym[best + 1];
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
}

struct Vocab {
  std::vector<std::string> normal;  // byte-level strings: the 256 bytes, then one per merge
  std::vector<std::string> merges;  // "A B", by rank
};

// Deterministic: for each word form, add merges (left to right over what BPE already makes of
// it) until the form is a single token.
Vocab build_vocab() {
  Vocab v;
  for (int b = 0; b < 256; ++b) v.normal.push_back(byte_level(std::string(1, static_cast<char>(b))));
  std::map<std::pair<std::string, std::string>, int> rank;
  for (std::string_view w : kWords) {
    std::string spaced(" ");
    spaced += w;  // (not " " + std::string(w): GCC 12 warns -Wrestrict on that, wrongly)
    for (const std::string& form : {std::string(w), spaced}) {
      std::vector<std::string> sym;
      for (char c : form) sym.push_back(byte_level(std::string(1, c)));
      for (sym = apply_merges(sym, rank); sym.size() > 1; sym = apply_merges(sym, rank)) {
        rank.emplace(std::make_pair(sym[0], sym[1]), static_cast<int>(v.merges.size()));
        v.merges.push_back(sym[0] + " " + sym[1]);
        v.normal.push_back(sym[0] + sym[1]);
      }
    }
  }
  return v;
}

}  // namespace

int64_t synthetic_tokenizer_size() { return 3 + static_cast<int64_t>(build_vocab().normal.size()) + kNumAdded; }

std::string synthetic_tokenizer_json(int64_t vocab_size) {
  using nlohmann::json;
  const Vocab v = build_vocab();
  const int64_t natural = 3 + static_cast<int64_t>(v.normal.size()) + kNumAdded;
  if (vocab_size <= 0) vocab_size = natural;
  HS_CHECK(vocab_size >= natural, "synthetic tokenizer: vocab size ", vocab_size, " is below its ", natural,
           " tokens (a GGUF needs a token per embedding row: use a vocab of at least ", natural, ")");
  json vocab = json::object();
  for (size_t i = 0; i < v.normal.size(); ++i) vocab[v.normal[i]] = 3 + static_cast<int64_t>(i);
  json added = json::array();
  const auto add = [&](std::string_view text, int64_t id, bool special) {
    added.push_back({{"id", id},
                     {"content", std::string(text)},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  };
  add(ds4::kBos, 0, true);
  add(ds4::kEos, 1, true);
  add(kPad, 2, true);
  for (int64_t k = 0; k < kNumAdded; ++k)  // at the real ids in a full-size vocabulary, else at the top
    add(kAdded[k].text, vocab_size == kV4Vocab ? kAdded[k].v4_id : vocab_size - kNumAdded + k, false);
  json pre = json::array();
  for (const auto& p : deepseek_pretokenizer_patterns())
    pre.push_back({{"type", "Split"}, {"pattern", {{"Regex", p}}}, {"behavior", "Isolated"}, {"invert", false}});
  pre.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  json j = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Sequence"}, {"pretokenizers", pre}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", vocab},
        {"merges", v.merges}}},
  };
  return j.dump();
}

Tokenizer make_synthetic_tokenizer(int64_t vocab_size) {
  return Tokenizer::from_hf_json(synthetic_tokenizer_json(vocab_size), {}, "synthetic tokenizer");
}

}  // namespace hs
