// The chat renderer (DeepSeek's encode_messages) on any JSON request, then its tokenization
// with literal spans. Checked: literal spans are sorted, disjoint and inside the text; the
// prompt tokenizes and decodes back to the same text; a second render gives the same prompt.
// Options (thinking mode, variant, dropping, system-in-user-turn, effort) come from a hash of
// the input, so every input exercises one combination and mutations reach the others.
#include <functional>

#include "fuzz_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"
#include "tokenizer/chat_json.h"

using namespace hs;

namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load(std::string(HS_TEST_DATA) + "/tokenizer/v4");
  return tok;
}

}  // namespace

// The vocabulary (or model) is loaded once before fuzzing, not inside the first input's time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  const ojson req = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded()) return 0;
  const size_t h = std::hash<std::string_view>{}(text);
  ChatOptions o;
  o.thinking_mode = h & 1 ? ThinkingMode::thinking : ThinkingMode::chat;
  o.drop_thinking = h & 2;
  o.variant = h & 4 ? ChatVariant::v4_0731 : ChatVariant::v4;
  o.system_in_user_turn = h & 8;
  o.add_bos = !(h & 16);
  static constexpr const char* kEfforts[] = {nullptr, "high", "max", "low"};
  if (const char* e = kEfforts[(h >> 5) & 3]) o.reasoning_effort = e;
  if (h & 128) o.default_system = "You are helpful.";
  ChatPrompt p;
  try {
    p = encode_request(req, o);
  } catch (const Error&) {
    return 0;
  }
  size_t end = 0;
  for (const TextSpan& s : p.literal) {
    if (s.begin < end || s.end < s.begin || s.end > p.text.size()) fuzz::broken("literal spans out of order or outside the text");
    end = s.end;
  }
  const Tokenizer& tok = tokenizer();
  const std::vector<int32_t> ids = tok.encode_with_literals(p.text, p.literal);
  if (tok.decode(ids) != p.text) fuzz::broken("the rendered prompt does not decode back to itself");
  const ChatPrompt again = encode_request(req, o);
  if (again.text != p.text || again.literal.size() != p.literal.size()) fuzz::broken("rendering is not deterministic");
  return 0;
}
