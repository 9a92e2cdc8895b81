// The bytes of an HTTP/1.1 response head and of a chunk of a chunked body.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hs::server {

struct ResponseHead {
  int status = 200;
  std::string content_type;                 // empty: none
  std::optional<size_t> length;             // none: chunked (HTTP/1.1) or until close (1.0)
  bool close = false;                       // Connection: close
  bool http10 = false;                      // the request was HTTP/1.0
  std::vector<std::pair<std::string, std::string>> headers;
};

const char* status_reason(int status);
std::string format_head(const ResponseHead& h);
std::string chunk(const std::string& bytes);  // one chunk of a chunked body (non-empty bytes)

}  // namespace hs::server
