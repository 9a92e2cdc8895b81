#include "server/json_util.h"

#include "server/api_error.h"

namespace hs::server {

std::string dump_json(const ojson& v) { return v.dump(-1, ' ', false, ojson::error_handler_t::replace); }

ojson parse_body(std::string_view body) {
  ojson v;
  try {
    v = ojson::parse(body);
  } catch (const ojson::exception& e) {
    throw ApiError(400, cat("the request body is not valid JSON: ", e.what()));
  }
  if (!v.is_object()) throw ApiError(400, cat("the request body must be a JSON object, got ", v.type_name()));
  if (json_depth(v) > kMaxJsonDepth)
    throw ApiError(400, cat("the request body nests deeper than ", kMaxJsonDepth, " levels"));
  return v;
}

std::string lossy_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (b < 0x80) n = 1;
    else if (b >= 0xC2 && b <= 0xDF) n = 2;
    else if (b >= 0xE0 && b <= 0xEF) n = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
    else if (b >= 0xF0 && b <= 0xF4) n = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    }
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string sse_data(const ojson& v) { return "data: " + dump_json(v) + "\n\n"; }

std::string sse_event(std::string_view name, const ojson& v) {
  std::string out = "event: ";
  out.append(name);
  out += "\ndata: ";
  out += dump_json(v);
  out += "\n\n";
  return out;
}

}  // namespace hs::server
