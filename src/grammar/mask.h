// The token mask: which vocabulary tokens the grammar allows next, as a bit set.
//
// For each node where a stack's top can stand, MaskCache walks the vocabulary trie once with
// that node taken out of context (its rule's caller unknown) and keeps (a) the tokens accepted
// without leaving the rule, and (b) the tokens that leave it part-way, grouped by the bytes left
// over after the rule ends, as a small trie. A mask is then, per stack of the live state, the
// OR of (a) plus a walk of (b)'s trie from the stack's caller: the cost per token is a copy of
// a bit set and a few hundred byte steps, not a walk of the whole vocabulary. Entries are made
// on first use and shared by every request of the same grammar. The nodes of one length chain
// (strings with maxLength) that lie farther than the longest token from both bounds share one
// entry.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocab.h"

namespace hs::grammar {

using TokenBits = std::vector<uint64_t>;
inline bool test_bit(const TokenBits& b, int32_t i) { return (b[static_cast<size_t>(i) >> 6] >> (i & 63)) & 1; }
inline void set_bit(TokenBits& b, int32_t i) { b[static_cast<size_t>(i) >> 6] |= uint64_t{1} << (i & 63); }

struct MaskEntry {
  TokenBits dense;              // accepted tokens as bits (when many), else
  std::vector<int32_t> sparse;  // accepted tokens as ids
  TokenTrie rest;               // tokens that end the rule before their last byte, by the bytes left
};

struct MaskStats {
  int64_t entries = 0;        // entries made
  double build_seconds = 0;   // time spent making them
};

class MaskCache {
 public:
  MaskCache(std::shared_ptr<const Grammar> g, std::shared_ptr<const Vocabulary> v);
  std::shared_ptr<const MaskEntry> entry(int32_t node);
  const Grammar& grammar() const { return *g_; }
  const Vocabulary& vocab() const { return *v_; }
  MaskStats stats() const;

 private:
  std::shared_ptr<MaskEntry> build(int32_t node) const;
  uint64_t key(int32_t node) const;
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const Vocabulary> v_;
  mutable std::mutex mu_;
  std::unordered_map<uint64_t, std::shared_ptr<const MaskEntry>> entries_;
  size_t bytes_ = 0;  // of the entries kept; past kMaxBytes the cache starts afresh
  MaskStats stats_;

 public:
  static constexpr size_t kMaxBytes = size_t{256} << 20;
};

// The tokens allowed after `m`'s input: ordinary tokens by the cache, each of `specials` (added
// tokens the constraint permits) by its bytes, EOS when the value is complete. `bits` gets one
// bit per vocabulary id.
void compute_mask(Matcher& m, MaskCache& cache, const std::vector<int32_t>& specials, TokenBits& bits);

// The same by brute force (every token fed to a copy of the matcher): the tests' oracle.
void brute_force_mask(const Matcher& m, const Vocabulary& v, const std::vector<int32_t>& specials, TokenBits& bits);

}  // namespace hs::grammar
