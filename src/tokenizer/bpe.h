// hs::Tokenizer: DeepSeek-V3/V4 byte-level BPE (docs/tokenizer.md), loaded from a Hugging Face
// tokenizer.json, from GGUF metadata, or from a model directory.
//
// Encoding: added tokens (special or not) are cut out first, leftmost-longest; each stretch
// between them is pre-tokenized (regex Split stages, Isolated) and every piece is BPE-merged
// by rank. BOS/EOS are never added. Thread-safe: all const methods may run concurrently (the
// merge cache has its own mutex). Checked against HF `tokenizers` on the fixtures, a corpus
// and every code point in context, including characters newer than PCRE2's Unicode tables.
//
// Invalid UTF-8 input never throws: each maximal run of bytes that does not form valid UTF-8
// becomes a piece of its own and is encoded from its raw bytes (byte-level BPE covers all 256
// bytes), so decode(encode(s)) == s for every byte string. The valid text around such a run
// is tokenized as if the run were a piece boundary.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer_added.h"

namespace hs {

namespace gguf {
class File;
class Writer;
}  // namespace gguf

// The ids of the special strings of tokenizer/chat_tokens.h (looked up in the vocabulary,
// never numbers); -1 where the vocabulary has no such token.
struct SpecialIds {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t pad = -1;  // the config's pad token (for V4 the EOS string), else EOS
  int32_t user = -1;
  int32_t assistant = -1;
  int32_t think_begin = -1;
  int32_t think_end = -1;
  int32_t dsml = -1;
};

// GGUF's tokenizer.ggml.token_type values.
enum class TokenType : int32_t { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

class StreamDecoder;

class Tokenizer {
 public:
  // PATH is a GGUF file, a tokenizer.json (with tokenizer_config.json read from beside it when
  // present), or a directory holding tokenizer.json. Throws hs::Error naming what is wrong.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_hf_file(const std::string& tokenizer_json_path);
  // `config_json` may be empty. `origin` names the source in error messages.
  static Tokenizer from_hf_json(std::string_view tokenizer_json, std::string_view config_json = {},
                                const std::string& origin = "tokenizer.json");
  static Tokenizer from_gguf(const gguf::File& file);

  // Writes tokenizer.ggml.{model,pre,tokens,token_type,merges,bos/eos/padding_token_id,
  // add_bos_token,add_eos_token}; pre is "joyai-llm" (the DeepSeek pre-tokenizer only).
  void write_gguf_metadata(gguf::Writer& w) const;

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (no BOS/EOS), added tokens matched in the text.
  std::vector<int32_t> encode(std::string_view text) const;
  // The same with added-token matching off: "<｜User｜>" in user content stays plain text.
  // Use this for untrusted spans to block control-token injection.
  std::vector<int32_t> encode_plain(std::string_view text) const;
  // Appends to `out` (what the chat encoder uses to build one prompt from many spans).
  void encode_append(std::string_view text, std::vector<int32_t>& out, bool match_added_tokens = true) const;
  // A rendered prompt whose `literal` spans (sorted, disjoint) are text copied from a request:
  // added tokens are matched only outside them, so "<｜User｜>" written by a client stays plain
  // text (no control-token injection). Pre-tokenization and BPE still run over each whole
  // stretch between matched tokens, across span boundaries, so the ids equal encode(text)
  // whenever the literal spans hold no added-token text. Throws hs::Error on a bad span.
  std::vector<int32_t> encode_with_literals(std::string_view text, std::span<const TextSpan> literal) const;

  // encode_with_literals bounded by `max_ids`: the work stops as soon as the encoding is known
  // to have more than max_ids ids, i.e. once the ids made pass the bound, or before a
  // pre-tokenizer piece whose bytes alone need more ids than are left (a piece of n bytes makes
  // at least ceil(n / max_token_bytes()) ids), so the rest of the text is never split or merged.
  // (A whole text as one literal span is encode_plain; no spans is encode.)
  struct BoundedIds {
    std::vector<int32_t> ids;  // the whole encoding when complete, else a prefix of it
    bool complete = true;      // false: the whole encoding has more than max_ids ids
    size_t at_least = 0;       // a lower bound of the whole encoding's length (> max_ids when not complete)
  };
  BoundedIds encode_bounded(std::string_view text, std::span<const TextSpan> literal, size_t max_ids) const;
  // The most bytes one token stands for (its decoded bytes; added tokens as their text). Every
  // text of B bytes encodes to at least ceil(B / max_token_bytes()) ids: a cheap lower bound
  // that refuses an over-long prompt before any tokenization.
  size_t max_token_bytes() const { return max_token_bytes_; }

  // The exact bytes of the ids (added tokens as their literal text, ids of unused/unknown type
  // as nothing; nothing is skipped, so </think> and ｜DSML｜ reach the parser). Not valid
  // UTF-8 when the ids split a character; StreamDecoder never emits such bytes. Throws
  // hs::Error on an id outside [0, vocab_size()).
  std::string decode(std::span<const int32_t> ids) const;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(std::span<const int32_t>(ids)); }
  std::string_view token_bytes(int32_t id) const;  // one token's bytes; throws when out of range
  StreamDecoder stream_decoder() const;

  // Vocabulary strings: byte-level form for normal tokens ("Ġthe"), literal for added ones.
  int32_t token_to_id(std::string_view token) const;  // -1 when absent
  const std::string& id_to_token(int32_t id) const;   // throws hs::Error when out of range
  int32_t vocab_size() const { return static_cast<int32_t>(tokens_.size()); }
  size_t merge_count() const { return merges_.size(); }
  TokenType token_type(int32_t id) const;
  // Added tokens (GGUF control or user-defined) are matched in text and never BPE-merged.
  bool is_added(int32_t id) const;
  const SpecialIds& special_ids() const { return special_; }
  const std::vector<std::string>& pretokenizer_patterns() const { return pretok_.patterns(); }

 private:
  struct BpeCache;
  struct EncodeState;
  struct MergeInfo {
    int32_t rank;
    int32_t id;  // the merged token
  };

  explicit Tokenizer(std::vector<std::string> patterns);
  // Builds the derived tables once the loader has filled tokens_, types_, normalized_,
  // merge strings and the special names; throws hs::Error on an inconsistent vocabulary.
  void finalize(const std::vector<std::pair<std::string, std::string>>& merges, const std::string& origin);
  // The added tokens of text[begin, end), in order (HF's two passes), appended to `cuts`.
  void match_added(std::string_view text, size_t begin, size_t end, std::vector<AddedTokenMatcher::Match>& cuts) const;
  void encode_cut(std::string_view text, const std::vector<AddedTokenMatcher::Match>& cuts, EncodeState& st,
                  std::vector<int32_t>& out) const;
  void encode_span(std::string_view span, EncodeState& st, std::vector<int32_t>& out) const;
  void encode_pieces(std::string_view text, EncodeState& st, std::vector<int32_t>& out) const;
  void bpe(std::string_view piece, EncodeState& st, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view piece, EncodeState& st, std::vector<int32_t>& out) const;
  void check_id(int32_t id) const;

  // Filled by the loaders.
  std::vector<std::string> tokens_;
  std::vector<TokenType> types_;
  std::vector<uint8_t> normalized_;  // added tokens HF matches in its second pass (tokenizer.json only)
  std::string bos_name_, eos_name_, pad_name_;  // from tokenizer_config.json
  SpecialIds special_;                          // ids from GGUF keys; the rest found by name

  // Derived by finalize().
  PreTokenizer pretok_;
  std::unordered_map<std::string, int32_t> vocab_;        // normal tokens (byte-level strings)
  std::unordered_map<std::string, int32_t> added_ids_;    // added tokens (literal text)
  std::unordered_map<uint64_t, MergeInfo> merge_map_;     // (left id, right id) -> merge
  std::vector<std::pair<int32_t, int32_t>> merges_;       // by rank, for writing GGUF
  std::array<int32_t, 256> byte_ids_{};                   // the token of each single byte
  std::string bytes_blob_;                                // decoded bytes of every id ...
  std::vector<uint32_t> bytes_off_;                       // ... at [off[id], off[id + 1])
  size_t max_token_bytes_ = 1;
  AddedTokenMatcher added_first_, added_second_;          // HF: non-normalized, then normalized
  std::unique_ptr<BpeCache> cache_;
};

// Incremental detokenizer: feed ids one at a time, get back only complete UTF-8. An
// incomplete tail (at most 3 bytes) is held until the next id; bytes that can never become
// valid are replaced by U+FFFD, so the output is always valid UTF-8. Call flush() at the end.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer) : tok_(&tokenizer) {}
  std::string push(int32_t id);
  std::string flush();  // the held tail (as U+FFFD if incomplete); resets the decoder
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  std::string pending_;
};

}  // namespace hs
