#include "tokenizer/chat_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "util/error.h"

namespace hs {
namespace {

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs, no surrogates,
// at most U+10FFFF), or 0 when the bytes there are not one.
size_t utf8_valid_len(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) n = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return n;
}

}  // namespace

size_t utf8_incomplete_tail(std::string_view s) {
  // Walk back over continuation bytes to the last lead byte; hold it back only if the
  // sequence it starts is longer than what has arrived and could still become valid.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation: keep looking for the lead
    size_t need = 0;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    return need > back ? back : 0;
  }
  return 0;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits, then laid out by the rules of CPython's float_repr:
  // exponent form when the decimal point falls before -4 or after 16 digits.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));  // e.g. "-1.2345e+03"
  std::string out;
  if (sci.front() == '-') {
    out += '-';
    sci.remove_prefix(1);
  }
  const size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos))
    if (c != '.') digits += c;
  int exp10 = 0;
  std::from_chars(sci.data() + epos + 1 + (sci[epos + 1] == '+'), sci.data() + sci.size(), exp10);
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int nd = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += e;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (decpt < nd) {
    out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  } else {
    out += digits + std::string(static_cast<size_t>(decpt - nd), '0') + ".0";
  }
  return out;
}

void py_json_quote_to(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char u[8];
          std::snprintf(u, sizeof u, "\\u%04x", c);
          out += u;
        } else if (c < 0x80) {
          out += static_cast<char>(c);
        } else if (size_t n = utf8_valid_len(s, i)) {
          out.append(s.substr(i, n));
          i += n;
          continue;
        } else {
          out += "\xEF\xBF\xBD";  // U+FFFD for a byte that is not valid UTF-8
        }
    }
    ++i;
  }
  out += '"';
}

namespace {

void dump_rec(std::string& out, const ojson& v, size_t depth) {
  HS_CHECK(depth <= kMaxJsonDepth, "JSON nested deeper than ", kMaxJsonDepth, " levels");
  switch (v.type()) {
    case ojson::value_t::null: out += "null"; break;
    case ojson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case ojson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case ojson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case ojson::value_t::number_float: out += py_float_repr(v.get<double>()); break;
    case ojson::value_t::string: py_json_quote_to(out, v.get_ref<const std::string&>()); break;
    case ojson::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dump_rec(out, e, depth + 1);
      }
      out += ']';
      break;
    }
    case ojson::value_t::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!first) out += ", ";
        first = false;
        py_json_quote_to(out, k);
        out += ": ";
        dump_rec(out, e, depth + 1);
      }
      out += '}';
      break;
    }
    default: fail("JSON value of an unsupported type (binary/discarded)");
  }
}

}  // namespace

void py_json_dump_to(std::string& out, const ojson& v) { dump_rec(out, v, 1); }

size_t json_depth(const ojson& v) {
  std::vector<std::pair<const ojson*, size_t>> stack{{&v, 1}};
  size_t max_depth = 0;
  while (!stack.empty()) {
    const auto [p, d] = stack.back();
    stack.pop_back();
    max_depth = std::max(max_depth, d);
    if (p->is_structured())
      for (const ojson& e : *p) stack.emplace_back(&e, d + 1);
  }
  return max_depth;
}

std::string py_json_dumps(const ojson& v) {
  std::string out;
  py_json_dump_to(out, v);
  return out;
}

bool py_truthy(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return false;
    case ojson::value_t::boolean: return v.get<bool>();
    case ojson::value_t::number_integer: return v.get<int64_t>() != 0;
    case ojson::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case ojson::value_t::number_float: return v.get<double>() != 0.0;
    case ojson::value_t::string: return !v.get_ref<const std::string&>().empty();
    case ojson::value_t::array:
    case ojson::value_t::object: return !v.empty();
    default: return true;
  }
}

ojson parse_json(std::string_view text, std::string_view what) {
  try {
    return ojson::parse(text);
  } catch (const ojson::exception& e) {
    fail(what, ": malformed JSON: ", e.what());
  }
}

}  // namespace hs
