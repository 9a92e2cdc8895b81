// What one HTTP request may take from the server before any handler sees it: header size and
// field count, body size (on the wire and after Content-Encoding), and deadlines for the
// header, the body, an idle keep-alive connection and each write (serve flags; docs/server.md
// "Limits").
#pragma once
#include <chrono>
#include <cstddef>

namespace hs::server {

struct HttpLimits {
  size_t max_header_bytes = 64u << 10;  // request line and fields; more: 431
  size_t max_headers = 128;             // header fields; more: 431
  size_t max_body_bytes = 64u << 20;    // on the wire, and again after gzip/deflate; more: 413
  std::chrono::milliseconds header_timeout{10000};  // first byte to the end of the header; then 408
  std::chrono::milliseconds body_timeout{60000};    // end of the header to the end of the body; then 408
  std::chrono::milliseconds idle_timeout{60000};    // a keep-alive connection without a request: closed
  std::chrono::milliseconds send_timeout{60000};    // a write the client does not take: connection closed
};

}  // namespace hs::server
