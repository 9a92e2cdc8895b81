// Reads one HTTP/1.x request from bytes fed in pieces, enforcing HttpLimits while it reads:
// no socket here (the connection feeds what it received; the fuzz target feeds a buffer).
// The header is read first and the reader stops there, so the server can route and check the
// API key before a byte of the body is taken; allow_body() then reads the body (Content-Length
// or chunked), inflating gzip/deflate under the same cap. Framing that a proxy could read
// differently (two different Content-Length values, Content-Length with Transfer-Encoding, a
// transfer coding other than chunked) is refused.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/http_limits.h"

namespace hs::server {

struct HttpRequest {
  std::string method, target;  // as sent
  std::string path;            // target without the query, percent-decoded
  std::string query;           // after '?', raw
  unsigned version = 11;       // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // in order, names as sent
  std::string body;            // decoded (after Content-Encoding)
  size_t wire_body_bytes = 0;  // as received
  bool keep_alive = true;      // HTTP/1.1 without Connection: close, or 1.0 with keep-alive
  bool expect_continue = false;
  bool has_body = false;       // Content-Length > 0 or chunked

  // The first field named `name` (case-insensitive), or null.
  const std::string* header(std::string_view name) const;
  std::string header_or(std::string_view name, std::string fallback = {}) const;
};

// Why a request cannot be read: the status to answer (400, 408, 413, 415, 431, 501) and a message.
struct ReadFailure {
  int status = 400;
  std::string message;
};

class RequestReader {
 public:
  enum class State {
    header,   // reading the request line and fields
    headed,   // the header is complete; the body waits for allow_body()
    body,     // reading the body
    done,     // the request is complete; later bytes belong to the next one
    failed,   // see failure(); the connection should answer it and close
  };

  explicit RequestReader(const HttpLimits& limits);
  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // Consumes a prefix of `data` and returns its length. Bytes not consumed must be offered
  // again with what follows them (a header is parsed once it is complete). Consumes nothing in
  // the states headed, done and failed.
  size_t feed(std::string_view data);
  // After the header checks: the body may be read (415 if its Content-Encoding is unknown).
  // A request without a body is done at once.
  void allow_body();
  // Ends the request with a failure (a deadline passed, the peer left).
  void fail(int status, std::string message);

  State state() const { return state_; }
  bool started() const { return started_; }  // any byte of this request was fed
  const HttpRequest& request() const { return req_; }
  HttpRequest& request() { return req_; }
  const ReadFailure& failure() const { return failure_; }

 private:
  struct Parser;
  friend struct Parser;
  void on_header_complete();
  bool add_body(std::string_view bytes);  // false: failed (limit or bad data)
  void finish_body();

  HttpLimits limits_;
  std::unique_ptr<Parser> parser_;
  struct Decoder;
  std::unique_ptr<Decoder> decoder_;
  HttpRequest req_;
  ReadFailure failure_;
  State state_ = State::header;
  bool started_ = false;
  size_t fields_ = 0;
  bool saw_content_length_ = false, saw_transfer_encoding_ = false;
  std::string transfer_encoding_;
};

}  // namespace hs::server
