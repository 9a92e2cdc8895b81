// The pre-tokenizer: a sequence of regex Split stages with HF's `Isolated` behaviour, run with
// PCRE2 (UTF + UCP, JIT). Patterns are given in the Oniguruma syntax of tokenizer.json and
// translated where the two engines differ: \s (tokenizer.md §2), and the code points newer than
// PCRE2's Unicode tables, which HF's Oniguruma knows (pretokenize_unicode.h). Each pattern is
// compiled twice; the slower supplemented form runs only on text that holds such a code point.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hs {

// DeepSeek-V3/V4's three patterns exactly as tokenizer.json writes them (Oniguruma syntax);
// GGUF names them "joyai-llm" or "deepseek-v3".
const std::vector<std::string>& deepseek_pretokenizer_patterns();

// Rewrites an Oniguruma pattern for PCRE2: \s and \S become the Unicode White_Space class
// and its complement (PCRE2's \s also takes U+180E, Oniguruma's does not), and \p{L|M|N|P|S}
// gain the code points PCRE2's older Unicode tables lack (pretokenize_unicode.h). Throws
// hs::Error on a construct it cannot translate (\S, or \P{X} of those five, inside a class).
// Without `supplement`, \p{X} stays PCRE2's own (faster; equal on text without those code points).
std::string onig_to_pcre2(std::string_view pattern, bool supplement = true);

class PreTokenizer {
 public:
  // A [begin, end) byte range of the text given to split().
  using Piece = std::pair<uint32_t, uint32_t>;

  // Per-call matching state (PCRE2 match data); make one per thread or per encode call.
  class Scratch {
   public:
    Scratch();
    ~Scratch();
    Scratch(const Scratch&) = delete;
    Scratch& operator=(const Scratch&) = delete;
    void* match_data() const { return md_; }

   private:
    void* md_;
  };

  // Compiles the patterns (Oniguruma syntax); throws hs::Error naming a bad pattern.
  explicit PreTokenizer(std::vector<std::string> patterns);
  ~PreTokenizer();
  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;

  const std::vector<std::string>& patterns() const { return patterns_; }

  // Appends the final pieces of `text` (valid UTF-8, at most 4 GiB) to `out`. Stage k runs on
  // every piece of stage k-1 on its own, so the end of a piece is the end of the subject.
  // Stops once `out` holds max_pieces pieces: those are then the first pieces of the text.
  void split(std::string_view text, Scratch& scratch, std::vector<Piece>& out,
             size_t max_pieces = SIZE_MAX) const;

 private:
  struct Compiled;
  static std::unique_ptr<Compiled> compile(const std::string& pattern, bool supplement);
  // Whether `text` holds a code point of pretokenize_unicode.h (then the supplemented patterns run).
  bool needs_supplement(std::string_view text) const;
  void split_stage(const std::vector<std::unique_ptr<Compiled>>& codes, size_t stage, std::string_view text,
                   uint32_t begin, uint32_t end, Scratch& scratch, std::vector<Piece>& out, size_t max_pieces) const;

  std::vector<std::string> patterns_;
  std::vector<std::unique_ptr<Compiled>> plain_, supplemented_;  // one per pattern
  std::vector<std::pair<uint32_t, uint32_t>> extra_ranges_;       // all of pretokenize_unicode.h, sorted
};

}  // namespace hs
