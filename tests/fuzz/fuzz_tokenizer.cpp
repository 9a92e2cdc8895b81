// Tokenizer encode/decode on the real DeepSeek-V4 vocabulary (tests/data/tokenizer/v4), with the
// properties bpe.h promises checked on every input:
//   decode(encode(s)) == s and decode(encode_plain(s)) == s for every byte string;
//   a bounded encoding is the whole one, or past the bound a prefix with a true lower bound;
//   the byte bound: ids >= ceil(bytes / max_token_bytes());
//   the stream decoder gives back valid UTF-8 text equal to s when s is valid UTF-8;
//   the whole text as one literal span encodes as encode_plain (no control tokens).
// The first input byte picks the bound; the rest is the text.
#include <algorithm>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_unicode.h"

using namespace hs;

namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load(std::string(HS_TEST_DATA) + "/tokenizer/v4");
  return tok;
}

bool is_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return a.size() <= b.size() && std::equal(a.begin(), a.end(), b.begin());
}

}  // namespace

// The vocabulary (or model) is loaded once before fuzzing, not inside the first input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = tokenizer();
  const uint8_t knob = data[0];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);

  const std::vector<int32_t> ids = tok.encode(text);
  if (tok.decode(ids) != text) fuzz::broken("decode(encode(s)) != s");
  const std::vector<int32_t> plain = tok.encode_plain(text);
  if (tok.decode(plain) != text) fuzz::broken("decode(encode_plain(s)) != s");
  if (ids.size() * tok.max_token_bytes() < text.size()) fuzz::broken("fewer ids than the byte bound allows");

  // Bounded encodings: the whole encoding within the bound; past it a prefix and a true lower
  // bound of its length that is above the bound (with and without added-token matching).
  const size_t limit = knob % 32;
  const TextSpan all{0, text.size()};
  for (const bool plain_text : {false, true}) {
    const std::vector<int32_t>& whole = plain_text ? plain : ids;
    const Tokenizer::BoundedIds r =
        tok.encode_bounded(text, plain_text ? std::span<const TextSpan>(&all, 1) : std::span<const TextSpan>(), limit);
    const bool ok = whole.size() <= limit
                        ? r.complete && r.ids == whole && r.at_least == whole.size()
                        : !r.complete && r.at_least > limit && r.at_least <= whole.size() && is_prefix(r.ids, whole);
    if (!ok) fuzz::broken("encode_bounded disagrees with the whole encoding");
  }

  // The whole text as one literal span: plain text, same ids as encode_plain.
  if (!text.empty() && tok.encode_with_literals(text, {&all, 1}) != plain)
    fuzz::broken("a text that is all literal differs from encode_plain");

  StreamDecoder sd = tok.stream_decoder();
  std::string streamed;
  for (int32_t id : ids) streamed += sd.push(id);
  streamed += sd.flush();
  if (utf8::valid_prefix_length(streamed) != streamed.size()) fuzz::broken("the stream decoder emitted invalid UTF-8");
  if (utf8::valid_prefix_length(text) == text.size() && streamed != text)
    fuzz::broken("the stream decoder changed valid UTF-8 text");

  // Arbitrary ids (two input bytes each, some out of range): decode throws hs::Error or works.
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 2 <= text.size() && raw.size() < 64; i += 2)
    raw.push_back(static_cast<int32_t>((static_cast<uint8_t>(text[i]) << 8 | static_cast<uint8_t>(text[i + 1])) * 3) - 8);
  try {
    (void)tok.decode(raw);
  } catch (const Error&) {
  }
  return 0;
}
