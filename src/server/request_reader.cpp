#include "server/request_reader.h"

#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cctype>
#include <optional>

#include "server/body_inflater.h"
#include "util/error.h"

namespace hs::server {

namespace http = boost::beast::http;
using boost::beast::error_code;
using boost::beast::string_view;

namespace {

bool iequal(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string lower_trimmed(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  std::string s(v);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded; a malformed escape is kept as it is.
std::string percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = hex_digit(s[i + 1]), lo = hex_digit(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

// Longest a chunk header line (size and extensions) may be: it must sit whole in the buffer.
constexpr size_t kMaxChunkHeader = 4096;

}  // namespace

// Beast's parser does the framing (request line, fields, Content-Length, chunked); the hooks
// below count fields, refuse ambiguous framing and hand body bytes to the reader.
struct RequestReader::Parser final : http::basic_parser<true> {
  RequestReader& r;
  explicit Parser(RequestReader& owner) : r(owner) {}

  void on_request_impl(http::verb, string_view method, string_view target, int version, error_code& ec) override {
    if (version != 10 && version != 11) {
      r.failure_ = {505, cat("HTTP version ", version / 10, ".", version % 10, " is not supported")};
      ec = http::error::bad_version;
      return;
    }
    r.req_.method.assign(method.data(), method.size());
    r.req_.target.assign(target.data(), target.size());
    r.req_.version = static_cast<unsigned>(version);
    std::string_view t(target.data(), target.size());
    // absolute-form (a request through a proxy): the path starts after the authority.
    if (t.rfind("http://", 0) == 0 || t.rfind("https://", 0) == 0) {
      const size_t slash = t.find('/', t.find("//") + 2);
      t = slash == std::string_view::npos ? std::string_view("/") : t.substr(slash);
    }
    const size_t q = t.find('?');
    r.req_.path = percent_decode(t.substr(0, q));
    if (q != std::string_view::npos) r.req_.query = std::string(t.substr(q + 1));
  }

  void on_response_impl(int, string_view, int, error_code& ec) override { ec = http::error::bad_method; }

  void on_field_impl(http::field f, string_view name, string_view value, error_code& ec) override {
    if (++r.fields_ > r.limits_.max_headers) {
      r.failure_ = {431, cat("the request has more than ", r.limits_.max_headers, " header fields")};
      ec = http::error::header_limit;
      return;
    }
    if (f == http::field::content_length) r.saw_content_length_ = true;
    if (f == http::field::transfer_encoding) {
      r.saw_transfer_encoding_ = true;
      r.transfer_encoding_ = lower_trimmed(std::string_view(value.data(), value.size()));
    }
    r.req_.headers.emplace_back(std::string(name.data(), name.size()), std::string(value.data(), value.size()));
  }

  void on_header_impl(error_code& ec) override {
    if (r.saw_content_length_ && r.saw_transfer_encoding_) {
      r.failure_ = {400, "Content-Length together with Transfer-Encoding"};
      ec = http::error::bad_transfer_encoding;
      return;
    }
    if (r.saw_transfer_encoding_ && r.transfer_encoding_ != "chunked") {
      r.failure_ = {r.transfer_encoding_.size() > 7 &&
                            r.transfer_encoding_.compare(r.transfer_encoding_.size() - 7, 7, "chunked") == 0
                        ? 501
                        : 400,
                    cat("Transfer-Encoding '", r.transfer_encoding_, "' is not supported (only chunked)")};
      ec = http::error::bad_transfer_encoding;
      return;
    }
  }

  void on_body_init_impl(boost::optional<std::uint64_t> const&, error_code&) override {}

  std::size_t on_body_impl(string_view body, error_code& ec) override {
    if (!r.add_body(std::string_view(body.data(), body.size()))) ec = http::error::body_limit;
    return body.size();
  }

  void on_chunk_header_impl(std::uint64_t, string_view, error_code&) override {}

  std::size_t on_chunk_body_impl(std::uint64_t, string_view body, error_code& ec) override {
    if (!r.add_body(std::string_view(body.data(), body.size()))) ec = http::error::body_limit;
    return body.size();
  }

  void on_finish_impl(error_code&) override {}
};

struct RequestReader::Decoder {
  std::optional<BodyInflater> inflater;
};

const std::string* HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (iequal(k, name)) return &v;
  return nullptr;
}

std::string HttpRequest::header_or(std::string_view name, std::string fallback) const {
  const std::string* v = header(name);
  return v ? *v : fallback;
}

RequestReader::RequestReader(const HttpLimits& limits)
    : limits_(limits), parser_(std::make_unique<Parser>(*this)), decoder_(std::make_unique<Decoder>()) {
  parser_->header_limit(static_cast<std::uint32_t>(std::min<size_t>(limits_.max_header_bytes, UINT32_MAX)));
  parser_->body_limit(static_cast<std::uint64_t>(limits_.max_body_bytes));
  parser_->eager(false);  // stop after the header
}

RequestReader::~RequestReader() = default;

void RequestReader::fail(int status, std::string message) {
  if (state_ == State::failed) return;
  state_ = State::failed;
  failure_ = {status, std::move(message)};
}

size_t RequestReader::feed(std::string_view data) {
  if (data.empty() || (state_ != State::header && state_ != State::body)) return 0;
  started_ = true;
  // Beast 1.74 asserts that the bytes offered again after a final chunk ("0\r\n") are at least 5
  // (a debug build would abort on a client's split): fewer wait for more, which any complete
  // chunked message still has to send ("\r\n0\r\n\r\n" at least).
  if (state_ == State::body && parser_->chunked() && data.size() < 5) return 0;
  error_code ec;
  const size_t used = parser_->put(boost::asio::const_buffer(data.data(), data.size()), ec);
  if (ec == http::error::need_more) {
    if (state_ == State::body && used == 0 && data.size() >= kMaxChunkHeader)
      fail(400, cat("a chunk header longer than ", kMaxChunkHeader, " bytes"));
    return used;
  }
  if (ec) {
    if (state_ == State::failed) return used;  // add_body failed
    if (failure_.message.empty()) {
      if (ec == http::error::header_limit)
        failure_ = {431, cat("the request header is larger than ", limits_.max_header_bytes, " bytes")};
      else if (ec == http::error::body_limit)
        failure_ = {413, cat("the request body is larger than ", limits_.max_body_bytes, " bytes")};
      else if (ec == http::error::bad_content_length)
        failure_ = {400, "conflicting or malformed Content-Length (or Content-Length with Transfer-Encoding)"};
      else if (ec == http::error::bad_transfer_encoding)
        failure_ = {400, "Transfer-Encoding repeated, or together with Content-Length"};
      else
        failure_ = {400, cat("malformed HTTP request: ", ec.message())};
    }
    state_ = State::failed;
    return used;
  }
  if (state_ == State::header && parser_->is_header_done()) on_header_complete();
  else if (state_ == State::body && parser_->is_done()) finish_body();
  return used;
}

void RequestReader::on_header_complete() {
  req_.keep_alive = parser_->keep_alive();
  req_.has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
  const std::string expect = lower_trimmed(req_.header_or("Expect"));
  req_.expect_continue = req_.version >= 11 && expect == "100-continue";
  state_ = State::headed;
}

void RequestReader::allow_body() {
  if (state_ != State::headed) return;
  const std::string coding = lower_trimmed(req_.header_or("Content-Encoding"));
  if (req_.has_body && !coding.empty() && coding != "identity") {
    if (coding == "gzip" || coding == "x-gzip")
      decoder_->inflater.emplace(BodyInflater::Coding::gzip, limits_.max_body_bytes);
    else if (coding == "deflate")
      decoder_->inflater.emplace(BodyInflater::Coding::deflate, limits_.max_body_bytes);
    else
      return fail(415, cat("Content-Encoding '", coding, "' is not supported (gzip, deflate or identity)"));
  }
  parser_->eager(true);
  state_ = State::body;
  if (parser_->is_done()) finish_body();
}

bool RequestReader::add_body(std::string_view bytes) {
  req_.wire_body_bytes += bytes.size();
  if (!decoder_->inflater) {
    if (req_.body.size() + bytes.size() > limits_.max_body_bytes) {
      fail(413, cat("the request body is larger than ", limits_.max_body_bytes, " bytes"));
      return false;
    }
    req_.body.append(bytes.data(), bytes.size());
    return true;
  }
  switch (decoder_->inflater->feed(bytes, req_.body)) {
    case BodyInflater::Result::ok: return true;
    case BodyInflater::Result::too_large:
      fail(413, cat("the request body inflates to more than ", limits_.max_body_bytes, " bytes"));
      return false;
    case BodyInflater::Result::bad_data: break;
  }
  fail(400, "the request body is not valid for its Content-Encoding");
  return false;
}

void RequestReader::finish_body() {
  if (decoder_->inflater && req_.has_body && !decoder_->inflater->finished())
    return fail(400, "the compressed request body is truncated");
  state_ = State::done;
}

}  // namespace hs::server
