#include "tokenizer/tokenizer_added.h"

namespace hs {

void AddedTokenMatcher::add(std::string_view text, int32_t id) {
  if (text.empty()) return;
  int32_t node = 0;
  for (char ch : text) {
    const auto b = static_cast<uint8_t>(ch);
    auto [it, inserted] = edges_.try_emplace(edge_key(node, b), static_cast<int32_t>(node_token_.size()));
    if (inserted) node_token_.push_back(-1);
    node = it->second;
  }
  node_token_[node] = id;
  first_byte_[static_cast<uint8_t>(text[0])] = true;
}

bool AddedTokenMatcher::find(std::string_view text, size_t from, Match& m) const {
  if (empty()) return false;
  for (size_t i = from; i < text.size(); ++i) {
    if (!first_byte_[static_cast<uint8_t>(text[i])]) continue;
    int32_t node = 0;
    size_t best_len = 0;
    int32_t best_id = -1;
    for (size_t j = i; j < text.size(); ++j) {
      auto it = edges_.find(edge_key(node, static_cast<uint8_t>(text[j])));
      if (it == edges_.end()) break;
      node = it->second;
      if (node_token_[node] >= 0) {
        best_len = j + 1 - i;
        best_id = node_token_[node];
      }
    }
    if (best_id >= 0) {
      m = {i, best_len, best_id};
      return true;
    }
  }
  return false;
}

}  // namespace hs
