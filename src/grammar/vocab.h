// The tokenizer's vocabulary as the token mask sees it: every token's bytes, and a byte trie of
// the ordinary tokens flattened in preorder (a walk visits each shared prefix once and skips a
// whole subtree when the grammar rejects its prefix). Added tokens (control tokens, DSML and
// think markers, placeholders) are outside the trie: a constraint allows only those it names.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hs {
class Tokenizer;
}

namespace hs::grammar {

struct TokenTrie {
  std::vector<uint8_t> byte;        // per node: the byte leading to it
  std::vector<uint16_t> depth;      // per node: its depth (1 for the root's children)
  std::vector<uint32_t> end;        // per node: the index after its subtree
  std::vector<uint32_t> tok_begin;  // per node (and one past): its tokens in `tokens`
  std::vector<int32_t> tokens;
  size_t size() const { return byte.size(); }
  // (bytes, id) pairs; empty byte strings are left out.
  static TokenTrie build(std::vector<std::pair<std::string, int32_t>> words);
};

class Vocabulary {
 public:
  explicit Vocabulary(const Tokenizer& tok);
  // For tests: ids 0..n-1 with these bytes; `special` ids are kept out of the trie.
  Vocabulary(std::vector<std::string> bytes, std::vector<int32_t> special, int32_t eos);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  const TokenTrie& trie() const { return trie_; }
  int32_t eos() const { return eos_; }
  // The added token whose text is exactly `text`, or -1.
  int32_t find_special(std::string_view text) const;
  bool is_special(int32_t id) const;  // an added token (outside the trie)
  size_t max_token_bytes() const { return max_bytes_; }

 private:
  void finish(const std::vector<int32_t>& special);
  std::vector<std::string> bytes_;
  std::vector<int32_t> special_;
  TokenTrie trie_;
  int32_t eos_ = -1;
  size_t max_bytes_ = 0;
};

}  // namespace hs::grammar
