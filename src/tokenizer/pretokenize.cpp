#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <span>

#include "tokenizer/pretokenize_unicode.h"
#include "util/error.h"

namespace hs {
namespace {

// Unicode White_Space, which is what Oniguruma's \s means under HF (tokenizer.md §2).
constexpr std::string_view kWhiteSpace =
    "\\t\\n\\x0B\\f\\r\\x20\\x85\\xA0\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// The code points PCRE2's older Unicode tables leave out of \p{X}; empty unless X is one of
// L M N P S.
std::span<const unicode_extra::UnicodeRange> extra_ranges(std::string_view property) {
  if (property == "L") return unicode_extra::kExtraL;
  if (property == "M") return unicode_extra::kExtraM;
  if (property == "N") return unicode_extra::kExtraN;
  if (property == "P") return unicode_extra::kExtraP;
  if (property == "S") return unicode_extra::kExtraS;
  return {};
}

// The same as PCRE2 class items.
std::string extra_class_items(std::string_view property) {
  std::string out;
  char buf[40];
  for (const auto& r : extra_ranges(property)) {
    std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", r.first, r.last);
    out += buf;
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  int n = pcre2_get_error_message(code, buf, sizeof(buf));
  return n < 0 ? cat("PCRE2 error ", code) : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

const std::vector<std::string>& deepseek_pretokenizer_patterns() {
  // Written as the JSON string literals of tokenizer.json (same escapes in C++): the \r and \n
  // inside the brackets of R3 are real CR and LF characters.
  static const std::vector<std::string> kPatterns = {
      "\\p{N}{1,3}",
      "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
  };
  return kPatterns;
}

std::string onig_to_pcre2(std::string_view p, bool supplement) {
  std::string out;
  out.reserve(p.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      HS_CHECK(i + 1 < p.size(), "regex ends with a lone backslash: ", p);
      const char e = p[++i];
      if ((e == 'p' || e == 'P') && i + 1 < p.size() && p[i + 1] == '{') {
        const size_t close = p.find('}', i);
        HS_CHECK(close != std::string_view::npos, "regex: unterminated \\", e, "{: ", p);
        const std::string_view name = p.substr(i + 2, close - i - 2);
        const std::string prop = cat("\\p{", name, "}"), extra = supplement ? extra_class_items(name) : "";
        i = close;
        if (e == 'p') {
          out += in_class || extra.empty() ? prop + extra : cat("[", prop, extra, "]");
        } else {
          HS_CHECK(!in_class || extra.empty(), "regex: \\P{", name, "} inside a character class is not supported: ", p);
          out += extra.empty() ? cat("\\P{", name, "}") : cat("[^", prop, extra, "]");
        }
      } else if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : cat("[", kWhiteSpace, "]");
      } else if (e == 'S') {
        HS_CHECK(!in_class, "regex: \\S inside a character class is not supported: ", p);
        out += cat("[^", kWhiteSpace, "]");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
      continue;
    }
    if (in_class) {
      HS_CHECK(c != '[', "regex: nested character classes are not supported: ", p);
      if (c == ']') in_class = false;
    }
    out += c;
  }
  HS_CHECK(!in_class, "regex: unterminated character class: ", p);
  return out;
}

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

std::unique_ptr<PreTokenizer::Compiled> PreTokenizer::compile(const std::string& pattern, bool supplement) {
  const std::string translated = onig_to_pcre2(pattern, supplement);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  auto c = std::make_unique<Compiled>();
  c->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP,
                          &err, &err_off, nullptr);
  HS_CHECK(c->code != nullptr, "pre-tokenizer regex does not compile at offset ", err_off, ": ", pcre2_message(err),
           ": ", pattern);
  // JIT is an optimisation only: where it is unavailable the interpreter gives the same result.
  pcre2_jit_compile(c->code, PCRE2_JIT_COMPLETE);
  return c;
}

PreTokenizer::Scratch::Scratch() : md_(pcre2_match_data_create(1, nullptr)) {
  HS_CHECK(md_ != nullptr, "pre-tokenizer: out of memory for PCRE2 match data");
}

PreTokenizer::Scratch::~Scratch() { pcre2_match_data_free(static_cast<pcre2_match_data*>(md_)); }

PreTokenizer::PreTokenizer(std::vector<std::string> patterns) : patterns_(std::move(patterns)) {
  for (const auto& p : patterns_) {
    plain_.push_back(compile(p, false));
    supplemented_.push_back(compile(p, true));
  }
  for (std::string_view property : {"L", "M", "N", "P", "S"})
    for (const auto& r : extra_ranges(property)) extra_ranges_.emplace_back(r.first, r.last);
  std::sort(extra_ranges_.begin(), extra_ranges_.end());
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

bool PreTokenizer::needs_supplement(std::string_view text) const {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const uint8_t b = s[i];
    if (b < 0xE0) {  // ASCII and 2-byte sequences: below U+0800, no supplemented code point there
      i += b < 0x80 ? 1 : 2;
      continue;
    }
    const size_t len = b < 0xF0 ? 3 : 4;
    if (i + len > n) break;  // not valid UTF-8 (split() requires it); nothing to look up
    uint32_t cp;
    if (len == 3) {
      cp = ((b & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu);
    } else {
      cp = ((b & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
    }
    i += len;
    auto it = std::upper_bound(extra_ranges_.begin(), extra_ranges_.end(), std::pair<uint32_t, uint32_t>(cp, UINT32_MAX));
    if (it != extra_ranges_.begin() && std::prev(it)->second >= cp) return true;
  }
  return false;
}

void PreTokenizer::split(std::string_view text, Scratch& scratch, std::vector<Piece>& out, size_t max_pieces) const {
  if (text.empty() || out.size() >= max_pieces) return;
  HS_CHECK(text.size() <= std::numeric_limits<uint32_t>::max(), "pre-tokenizer: text over 4 GiB");
  split_stage(needs_supplement(text) ? supplemented_ : plain_, 0, text, 0, static_cast<uint32_t>(text.size()), scratch,
              out, max_pieces);
}

// HF's Split with behaviour Isolated: every match is a piece and so is every non-empty stretch
// between matches. The subject is the piece itself, so (?!\S) sees the piece end as text end.
void PreTokenizer::split_stage(const std::vector<std::unique_ptr<Compiled>>& codes, size_t stage,
                               std::string_view text, uint32_t begin, uint32_t end, Scratch& scratch,
                               std::vector<Piece>& out, size_t max_pieces) const {
  if (stage == codes.size()) {
    out.emplace_back(begin, end);
    return;
  }
  auto* md = static_cast<pcre2_match_data*>(scratch.match_data());
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + begin);
  const PCRE2_SIZE len = end - begin;
  PCRE2_SIZE pos = 0, last = 0;
  // Pieces come out in text order, so stopping at max_pieces leaves an exact prefix.
  while (pos < len && out.size() < max_pieces) {
    int rc = pcre2_match(codes[stage]->code, subject, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // a pathological input: the interpreter uses the heap
      rc = pcre2_match(codes[stage]->code, subject, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    HS_CHECK(rc >= 0, "pre-tokenizer regex ", stage + 1, " failed: ", pcre2_message(rc));
    const PCRE2_SIZE ms = ov[0], me = ov[1];
    if (me == ms) {  // an empty match splits nothing; step over one character
      pos = ms + 1;
      while (pos < len && (subject[pos] & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (ms > last)
      split_stage(codes, stage + 1, text, begin + static_cast<uint32_t>(last), begin + static_cast<uint32_t>(ms), scratch, out,
                  max_pieces);
    split_stage(codes, stage + 1, text, begin + static_cast<uint32_t>(ms), begin + static_cast<uint32_t>(me), scratch, out,
                max_pieces);
    last = pos = me;
  }
  if (last < len && out.size() < max_pieces)
    split_stage(codes, stage + 1, text, begin + static_cast<uint32_t>(last), end, scratch, out, max_pieces);
}

}  // namespace hs
