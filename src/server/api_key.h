// The API key: where it comes from (--api-key, --api-key-file, HYPERSTREAM_API_KEY) and how a
// request's key is compared with it (in time that depends only on the key's length).
#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace hs::server {

// The key from the flag, else the file (its first line, surrounding whitespace dropped), else
// the environment value; none: no key. hs::Error when both flags are given, the file cannot
// be read, or the key is empty.
std::optional<std::string> resolve_api_key(const std::optional<std::string>& flag, const std::optional<std::string>& file,
                                           const char* env_value);

// Whether `given` equals `secret`; takes the same time for every `given` of any content.
bool same_secret(std::string_view given, std::string_view secret);

// The key a request carries: "Authorization: Bearer KEY", else "x-api-key: KEY"; empty: none.
std::string request_key(const std::string& authorization, const std::string& x_api_key);

}  // namespace hs::server
