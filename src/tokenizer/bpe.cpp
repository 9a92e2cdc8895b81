// Encoding, decoding and the BPE merge loop of hs::Tokenizer (loading: tokenizer_load.cpp).
#include "tokenizer/bpe.h"

#include <algorithm>
#include <functional>
#include <mutex>

#include "tokenizer/byte_unicode.h"
#include "util/error.h"

namespace hs {
namespace {

constexpr size_t kCacheMaxPiece = 64;       // longer pieces are rare and cheap to redo
constexpr size_t kCacheMaxEntries = 1 << 17;  // bounded: cleared when full

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

}  // namespace

// Results of BPE for short pieces, shared by all callers of one Tokenizer.
struct Tokenizer::BpeCache {
  std::mutex mu;
  std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> map;
};

// Scratch of one encode call: nothing here outlives the call or is shared between threads.
struct Tokenizer::EncodeState {
  struct Sym {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol: smaller is further left
    int32_t left, right, merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  size_t limit = SIZE_MAX;  // encode_bounded's max_ids
  size_t at_least = 0;      // set when a piece was refused by its bytes: a bound of the whole length
  bool over(const std::vector<int32_t>& out) const { return at_least > limit || out.size() > limit; }
  PreTokenizer::Scratch scratch;
  std::vector<PreTokenizer::Piece> pieces;
  std::vector<Sym> syms;
  std::vector<Candidate> heap;
  std::vector<int32_t> ids;
};

Tokenizer::Tokenizer(std::vector<std::string> patterns)
    : pretok_(std::move(patterns)), cache_(std::make_unique<BpeCache>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  encode_append(text, out, true);
  return out;
}

std::vector<int32_t> Tokenizer::encode_plain(std::string_view text) const {
  std::vector<int32_t> out;
  encode_append(text, out, false);
  return out;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out, bool match_added_tokens) const {
  EncodeState st;
  if (!match_added_tokens) {
    encode_span(text, st, out);
    return;
  }
  std::vector<AddedTokenMatcher::Match> cuts;
  match_added(text, 0, text.size(), cuts);
  encode_cut(text, cuts, st, out);
}

std::vector<int32_t> Tokenizer::encode_with_literals(std::string_view text, std::span<const TextSpan> literal) const {
  return encode_bounded(text, literal, SIZE_MAX).ids;
}

Tokenizer::BoundedIds Tokenizer::encode_bounded(std::string_view text, std::span<const TextSpan> literal,
                                                size_t max_ids) const {
  std::vector<AddedTokenMatcher::Match> cuts;
  size_t pos = 0;  // added tokens are matched in the stretches between literal spans
  for (const TextSpan& s : literal) {
    HS_CHECK(s.begin >= pos && s.begin <= s.end && s.end <= text.size(), "encode_with_literals: span [", s.begin,
             ", ", s.end, ") is out of order or outside the text of ", text.size(), " bytes");
    match_added(text, pos, s.begin, cuts);
    pos = s.end;
  }
  match_added(text, pos, text.size(), cuts);
  BoundedIds r;
  EncodeState st;
  st.limit = max_ids;
  encode_cut(text, cuts, st, r.ids);
  r.complete = !st.over(r.ids);
  r.at_least = std::max(r.ids.size(), st.at_least);
  return r;
}

void Tokenizer::match_added(std::string_view text, size_t begin, size_t end,
                            std::vector<AddedTokenMatcher::Match>& cuts) const {
  if (begin >= end) return;
  // A match may not run past `end`: search a view that stops there (positions stay absolute).
  const std::string_view upto = text.substr(0, end);
  // HF cuts the non-normalized added tokens first, then the normalized ones out of what is left.
  auto second_pass = [&](size_t from, size_t to) {
    const std::string_view part = text.substr(0, to);
    AddedTokenMatcher::Match m;
    while (from < to && added_second_.find(part, from, m)) {
      cuts.push_back(m);
      from = m.begin + m.length;
    }
  };
  size_t pos = begin;
  AddedTokenMatcher::Match m;
  while (pos < end && added_first_.find(upto, pos, m)) {
    second_pass(pos, m.begin);
    cuts.push_back(m);
    pos = m.begin + m.length;
  }
  second_pass(pos, end);
}

// The text between the cuts goes through pre-tokenization and BPE; each cut is its token.
void Tokenizer::encode_cut(std::string_view text, const std::vector<AddedTokenMatcher::Match>& cuts, EncodeState& st,
                           std::vector<int32_t>& out) const {
  size_t pos = 0;
  for (const auto& c : cuts) {
    encode_span(text.substr(pos, c.begin - pos), st, out);
    if (st.over(out)) return;
    out.push_back(c.id);
    pos = c.begin + c.length;
  }
  if (!st.over(out)) encode_span(text.substr(pos), st, out);
}

// Splits off runs of invalid UTF-8 (each encoded from raw bytes, see bpe.h) and pre-tokenizes
// the valid stretches.
void Tokenizer::encode_span(std::string_view span, EncodeState& st, std::vector<int32_t>& out) const {
  size_t i = 0;
  while (i < span.size() && !st.over(out)) {
    const size_t valid = utf8::valid_prefix_length(span.substr(i));
    if (valid > 0) {
      encode_pieces(span.substr(i, valid), st, out);
      i += valid;
      continue;
    }
    size_t j = i + 1;
    while (j < span.size() && utf8::valid_sequence_length(span.substr(j)) == 0) ++j;
    bpe(span.substr(i, j - i), st, out);
    i = j;
  }
}

void Tokenizer::encode_pieces(std::string_view text, EncodeState& st, std::vector<int32_t>& out) const {
  st.pieces.clear();
  // Each piece makes at least one id: more pieces than the ids left to the limit are not needed.
  const size_t room = st.limit == SIZE_MAX ? SIZE_MAX : st.limit - std::min(st.limit, out.size()) + 1;
  pretok_.split(text, st.scratch, st.pieces, room);
  for (const auto& [b, e] : st.pieces) {
    bpe(text.substr(b, e - b), st, out);
    if (st.over(out)) return;
  }
}

void Tokenizer::bpe(std::string_view piece, EncodeState& st, std::vector<int32_t>& out) const {
  if (st.limit != SIZE_MAX) {  // a bounded encode: refuse a piece that cannot fit before merging it
    const size_t least = out.size() + (piece.size() + max_token_bytes_ - 1) / max_token_bytes_;
    if (least > st.limit) {
      st.at_least = least;
      return;
    }
  }
  if (piece.size() == 1) {
    out.push_back(byte_ids_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (piece.size() > kCacheMaxPiece) {
    bpe_uncached(piece, st, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_->mu);
    auto it = cache_->map.find(piece);
    if (it != cache_->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  bpe_uncached(piece, st, out);
  std::lock_guard<std::mutex> lock(cache_->mu);
  if (cache_->map.size() >= kCacheMaxEntries) cache_->map.clear();
  cache_->map.try_emplace(std::string(piece), out.begin() + static_cast<std::ptrdiff_t>(start), out.end());
}

// One symbol per byte, then repeatedly merge the adjacent pair of lowest rank (leftmost on
// ties). A min-heap of candidate pairs over a linked list of symbols makes this O(n log n);
// a candidate whose symbols changed since it was pushed is skipped when popped.
void Tokenizer::bpe_uncached(std::string_view piece, EncodeState& st, std::vector<int32_t>& out) const {
  using Sym = EncodeState::Sym;
  using Candidate = EncodeState::Candidate;
  const int32_t n = static_cast<int32_t>(piece.size());
  auto& syms = st.syms;
  auto& heap = st.heap;
  syms.resize(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    syms[static_cast<size_t>(i)] = Sym{byte_ids_[static_cast<uint8_t>(piece[static_cast<size_t>(i)])], i - 1,
                                      i + 1 < n ? i + 1 : -1};
  heap.clear();
  const auto push = [&](int32_t i) {
    const int32_t j = syms[static_cast<size_t>(i)].next;
    if (j < 0) return;
    const int32_t a = syms[static_cast<size_t>(i)].id, b = syms[static_cast<size_t>(j)].id;
    auto it = merge_map_.find(pair_key(a, b));
    if (it == merge_map_.end()) return;
    heap.push_back(Candidate{it->second.rank, i, a, b, it->second.id});
    std::push_heap(heap.begin(), heap.end(), std::greater<>{});
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), std::greater<>{});
    const Candidate c = heap.back();
    heap.pop_back();
    Sym& left = syms[static_cast<size_t>(c.pos)];
    if (left.id != c.left || left.next < 0) continue;
    Sym& right = syms[static_cast<size_t>(left.next)];
    if (right.id != c.right) continue;
    left.id = c.merged;
    right.id = -1;  // dead
    left.next = right.next;
    if (left.next >= 0) syms[static_cast<size_t>(left.next)].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) out.push_back(syms[static_cast<size_t>(i)].id);
}

void Tokenizer::check_id(int32_t id) const {
  HS_CHECK(id >= 0 && id < vocab_size(), "token id ", id, " is out of range [0, ", vocab_size(), ")");
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  check_id(id);
  const auto i = static_cast<size_t>(id);
  return std::string_view(bytes_blob_).substr(bytes_off_[i], bytes_off_[i + 1] - bytes_off_[i]);
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  out.reserve(ids.size() * 4);
  for (int32_t id : ids) out += token_bytes(id);
  return out;
}

StreamDecoder Tokenizer::stream_decoder() const { return StreamDecoder(*this); }

int32_t Tokenizer::token_to_id(std::string_view token) const {
  const std::string key(token);
  if (auto it = added_ids_.find(key); it != added_ids_.end()) return it->second;
  if (auto it = vocab_.find(key); it != vocab_.end()) return it->second;
  return -1;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  check_id(id);
  return tokens_[static_cast<size_t>(id)];
}

TokenType Tokenizer::token_type(int32_t id) const {
  check_id(id);
  return types_[static_cast<size_t>(id)];
}

bool Tokenizer::is_added(int32_t id) const {
  const TokenType t = token_type(id);
  return t == TokenType::Control || t == TokenType::UserDefined;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_->token_bytes(id);
  const size_t keep = utf8::incomplete_tail(pending_);
  std::string out;
  utf8::append_sanitized(std::string_view(pending_).substr(0, pending_.size() - keep), out);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_sanitized(pending_, out);
  pending_.clear();
  return out;
}

}  // namespace hs
