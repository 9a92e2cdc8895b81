#include "server/api_key.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace hs::server {

namespace {
std::string trimmed(std::string s) {
  const char* ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}
}  // namespace

std::optional<std::string> resolve_api_key(const std::optional<std::string>& flag, const std::optional<std::string>& file,
                                           const char* env_value) {
  HS_CHECK(!(flag && file), "--api-key and --api-key-file are mutually exclusive");
  if (flag) {
    HS_CHECK(!flag->empty(), "--api-key must not be empty");
    return flag;
  }
  if (file) {
    std::ifstream in(*file);
    HS_CHECK(in.good(), "--api-key-file ", *file, ": cannot be read");
    std::string line;
    std::getline(in, line);
    line = trimmed(line);
    HS_CHECK(!line.empty(), "--api-key-file ", *file, ": the first line (the key) is empty");
    return line;
  }
  if (env_value) {
    std::string v = trimmed(env_value);
    HS_CHECK(!v.empty(), "HYPERSTREAM_API_KEY is set but empty");
    return v;
  }
  return std::nullopt;
}

bool same_secret(std::string_view given, std::string_view secret) {
  // Every byte of the secret is compared, against a byte of `given` chosen without a branch
  // on its content; the length difference is folded in at the end.
  unsigned diff = given.size() == secret.size() ? 0u : 1u;
  const size_t n = given.size();
  for (size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = n ? static_cast<unsigned char>(given[i % n]) : 0;
    diff |= static_cast<unsigned char>(secret[i]) ^ g;
  }
  return diff == 0 && !secret.empty();
}

std::string request_key(const std::string& authorization, const std::string& x_api_key) {
  if (authorization.size() > 7 && (authorization.compare(0, 7, "Bearer ") == 0 || authorization.compare(0, 7, "bearer ") == 0))
    return authorization.substr(7);
  return x_api_key;
}

}  // namespace hs::server
