#include "grammar/vocab.h"

#include <algorithm>

#include "tokenizer/bpe.h"
#include "util/error.h"

namespace hs::grammar {

TokenTrie TokenTrie::build(std::vector<std::pair<std::string, int32_t>> words) {
  std::erase_if(words, [](const auto& w) { return w.first.empty(); });
  std::sort(words.begin(), words.end());
  TokenTrie t;
  std::vector<uint32_t> path;  // node index per depth - 1
  std::string prev;
  auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      t.end[path.back()] = static_cast<uint32_t>(t.byte.size());
      path.pop_back();
    }
  };
  for (const auto& [w, id] : words) {
    HS_CHECK(w.size() < 65535, "token trie: a token of ", w.size(), " bytes");
    size_t common = 0;
    while (common < prev.size() && common < w.size() && prev[common] == w[common]) ++common;
    close_to(common);
    for (size_t d = common; d < w.size(); ++d) {
      path.push_back(static_cast<uint32_t>(t.byte.size()));
      t.byte.push_back(static_cast<uint8_t>(w[d]));
      t.depth.push_back(static_cast<uint16_t>(d + 1));
      t.end.push_back(0);
      t.tok_begin.push_back(static_cast<uint32_t>(t.tokens.size()));
    }
    // Tokens are appended in order, so a node's tokens follow its tok_begin contiguously.
    t.tokens.push_back(id);
    prev = w;
  }
  close_to(0);
  t.tok_begin.push_back(static_cast<uint32_t>(t.tokens.size()));
  return t;
}

Vocabulary::Vocabulary(const Tokenizer& tok) {
  const int32_t n = tok.vocab_size();
  bytes_.reserve(static_cast<size_t>(n));
  std::vector<int32_t> special;
  for (int32_t id = 0; id < n; ++id) {
    bytes_.emplace_back(tok.token_bytes(id));
    if (tok.is_added(id)) special.push_back(id);
  }
  eos_ = tok.special_ids().eos;
  finish(special);
}

Vocabulary::Vocabulary(std::vector<std::string> bytes, std::vector<int32_t> special, int32_t eos)
    : bytes_(std::move(bytes)), eos_(eos) {
  finish(special);
}

void Vocabulary::finish(const std::vector<int32_t>& special) {
  special_ = special;
  std::sort(special_.begin(), special_.end());
  std::vector<std::pair<std::string, int32_t>> words;
  for (int32_t id = 0; id < size(); ++id) {
    if (id == eos_ || std::binary_search(special_.begin(), special_.end(), id)) continue;
    words.emplace_back(bytes_[static_cast<size_t>(id)], id);
    max_bytes_ = std::max(max_bytes_, bytes_[static_cast<size_t>(id)].size());
  }
  trie_ = TokenTrie::build(std::move(words));
}

int32_t Vocabulary::find_special(std::string_view text) const {
  for (int32_t id : special_)
    if (bytes_[static_cast<size_t>(id)] == text) return id;
  return -1;
}

bool Vocabulary::is_special(int32_t id) const { return std::binary_search(special_.begin(), special_.end(), id); }

}  // namespace hs::grammar
