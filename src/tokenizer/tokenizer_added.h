// Finds added tokens (special or not) inside raw text: leftmost match first, the longest
// of those starting there (HF's aho-corasick LeftmostLongest). A byte trie is enough for the
// ~1300 tokens of DeepSeek; most positions are rejected by a first-byte table.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hs {

// A byte range [begin, end) of a text.
struct TextSpan {
  size_t begin = 0;
  size_t end = 0;
  bool operator==(const TextSpan&) const = default;
};

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin = 0;
    size_t length = 0;
    int32_t id = -1;
  };

  void add(std::string_view text, int32_t id);  // an empty text is ignored; a repeat replaces the id
  bool empty() const { return node_token_.size() <= 1; }

  // The leftmost-longest match starting at or after `from`; false when there is none.
  bool find(std::string_view text, size_t from, Match& m) const;

 private:
  static uint64_t edge_key(int32_t node, uint8_t byte) { return (static_cast<uint64_t>(node) << 8) | byte; }

  std::vector<int32_t> node_token_{-1};  // node 0 is the root; -1: no token ends here
  std::unordered_map<uint64_t, int32_t> edges_;
  std::array<bool, 256> first_byte_{};
};

}  // namespace hs
