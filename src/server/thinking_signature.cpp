#include "server/thinking_signature.h"

#include <cstdint>
#include <cstdio>

namespace hs::server {

namespace {

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string checksum(std::string_view s) {
  uint32_t h = 2166136261u;
  for (unsigned char c : s) h = (h ^ c) * 16777619u;
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", h);
  return buf;
}

std::string base64(std::string_view s) {
  std::string out;
  out.reserve((s.size() + 2) / 3 * 4);
  for (size_t i = 0; i < s.size(); i += 3) {
    uint32_t v = static_cast<unsigned char>(s[i]) << 16;
    if (i + 1 < s.size()) v |= static_cast<unsigned char>(s[i + 1]) << 8;
    if (i + 2 < s.size()) v |= static_cast<unsigned char>(s[i + 2]);
    out += kB64[(v >> 18) & 63];
    out += kB64[(v >> 12) & 63];
    out += i + 1 < s.size() ? kB64[(v >> 6) & 63] : '=';
    out += i + 2 < s.size() ? kB64[v & 63] : '=';
  }
  return out;
}

std::optional<std::string> unbase64(std::string_view s) {
  if (s.size() % 4 != 0) return std::nullopt;
  std::string out;
  uint32_t v = 0;
  int bits = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '=') {
      if (i + 2 < s.size()) return std::nullopt;  // padding only at the end
      break;
    }
    const int d = c >= 'A' && c <= 'Z' ? c - 'A'
                  : c >= 'a' && c <= 'z' ? c - 'a' + 26
                  : c >= '0' && c <= '9' ? c - '0' + 52
                  : c == '+' ? 62 : c == '/' ? 63 : -1;
    if (d < 0) return std::nullopt;
    v = (v << 6) | static_cast<uint32_t>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((v >> bits) & 0xFF);
    }
  }
  return out;
}

}  // namespace

std::string thinking_signature(std::string_view reasoning) {
  return "hs1" + checksum(reasoning) + "." + base64(reasoning);
}

std::optional<std::string> reasoning_from_signature(std::string_view signature) {
  if (signature.size() < 12 || signature.substr(0, 3) != "hs1" || signature[11] != '.') return std::nullopt;
  auto text = unbase64(signature.substr(12));
  if (!text || checksum(*text) != signature.substr(3, 8)) return std::nullopt;
  return text;
}

}  // namespace hs::server
