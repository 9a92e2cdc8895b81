#include "tokenizer/byte_unicode.h"

#include <array>

namespace hs::bytelevel {
namespace {

// Bytes GPT-2 keeps as themselves: the printable ranges of Latin-1.
constexpr bool is_kept(unsigned b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

// The other 68 bytes go, in increasing order, to U+0100..U+0143.
constexpr std::array<uint16_t, 256> kByteToCp = [] {
  std::array<uint16_t, 256> t{};
  unsigned next = 0x100;
  for (unsigned b = 0; b < 256; ++b) t[b] = is_kept(b) ? static_cast<uint16_t>(b) : static_cast<uint16_t>(next++);
  return t;
}();

constexpr std::array<int16_t, 0x144> kCpToByte = [] {
  std::array<int16_t, 0x144> t{};
  for (auto& v : t) v = -1;
  for (unsigned b = 0; b < 256; ++b) t[kByteToCp[b]] = static_cast<int16_t>(b);
  return t;
}();

// Reads one UTF-8 code point (input assumed valid where it matters; invalid gives false).
bool next_codepoint(std::string_view s, size_t& i, uint32_t& cp) {
  size_t n = utf8::valid_sequence_length(s.substr(i));
  if (n == 0) return false;
  auto u = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (n) {
    case 1: cp = u(0); break;
    case 2: cp = ((u(0) & 0x1F) << 6) | (u(1) & 0x3F); break;
    case 3: cp = ((u(0) & 0x0F) << 12) | ((u(1) & 0x3F) << 6) | (u(2) & 0x3F); break;
    default: cp = ((u(0) & 0x07) << 18) | ((u(1) & 0x3F) << 12) | ((u(2) & 0x3F) << 6) | (u(3) & 0x3F); break;
  }
  i += n;
  return true;
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return kByteToCp[byte]; }

int codepoint_to_byte(uint32_t cp) { return cp < kCpToByte.size() ? kCpToByte[cp] : -1; }

void append_encoded(std::string_view bytes, std::string& out) {
  for (char c : bytes) utf8::append_codepoint(kByteToCp[static_cast<uint8_t>(c)], out);
}

bool decode(std::string_view text, std::string& out) {
  std::string tmp;
  tmp.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    uint32_t cp = 0;
    if (!next_codepoint(text, i, cp)) return false;
    int b = codepoint_to_byte(cp);
    if (b < 0) return false;
    tmp.push_back(static_cast<char>(b));
  }
  out += tmp;
  return true;
}

}  // namespace hs::bytelevel

namespace hs::utf8 {
namespace {

// Checks the sequence at s[0]. Returns its full length when valid, else 0; `good` gets the
// number of leading bytes that are a valid start of a sequence (the maximal subpart, >= 1 for
// a valid lead byte, 0 for a byte that can never start one), `need` the full length wanted.
size_t check(std::string_view s, size_t& good, size_t& need) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = b(0);
  good = 0;
  need = 1;
  if (b0 < 0x80) {
    good = 1;
    return 1;
  }
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;   // no overlong forms
    if (b0 == 0xED) hi = 0x9F;   // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;   // nothing above U+10FFFF
  } else {
    return 0;
  }
  good = 1;
  for (size_t k = 1; k < need; ++k) {
    if (k >= s.size()) return 0;
    const uint8_t c = b(k);
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) return 0;
    good = k + 1;
  }
  return need;
}

}  // namespace

void append_codepoint(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t valid_sequence_length(std::string_view s) {
  if (s.empty()) return 0;
  size_t good = 0, need = 0;
  return check(s, good, need);
}

size_t valid_prefix_length(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    size_t n = valid_sequence_length(s.substr(i));
    if (n == 0) break;
    i += n;
  }
  return i;
}

size_t incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= 3 && k <= s.size(); ++k) {
    const uint8_t c = static_cast<uint8_t>(s[s.size() - k]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back for the lead
    size_t good = 0, need = 0;
    check(s.substr(s.size() - k), good, need);
    return (good == k && need > k) ? k : 0;
  }
  return 0;
}

void append_sanitized(std::string_view s, std::string& out) {
  size_t i = 0;
  while (i < s.size()) {
    size_t good = 0, need = 0;
    size_t n = check(s.substr(i), good, need);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";  // U+FFFD for one maximal invalid subpart
      i += good > 0 ? good : 1;
    }
  }
}

}  // namespace hs::utf8
