// The socket-free parts of the HTTP transport: the request reader (limits while reading,
// framing checks, chunked and compressed bodies, pipelined requests, any split of the bytes),
// the capped inflater, and the API key's sources and comparison.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "server/api_key.h"
#include "server/body_inflater.h"
#include "server/request_reader.h"
#include "util/error.h"

namespace hs::server {
namespace {

using State = RequestReader::State;

// Feeds `bytes` `piece` at a time as a connection would (unconsumed bytes offered again);
// allows the body after the header. Returns the reader's state; `rest` gets what was left.
State read_all(RequestReader& r, const std::string& bytes, size_t piece = SIZE_MAX, std::string* rest = nullptr) {
  std::string pending;
  size_t pos = 0;
  for (;;) {
    const State st = r.state();
    if (st == State::headed) {
      r.allow_body();
      continue;
    }
    if (st == State::done || st == State::failed) break;
    const size_t used = r.feed(pending);
    pending.erase(0, used);
    if (used > 0 || r.state() != st) continue;
    if (pos >= bytes.size()) break;
    const size_t n = std::min(piece, bytes.size() - pos);
    pending += bytes.substr(pos, n);
    pos += n;
  }
  if (rest) *rest = pending + bytes.substr(pos);
  return r.state();
}

std::string compress(const std::string& s, int window_bits) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, window_bits, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, s.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = static_cast<uInt>(s.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}
std::string gzip(const std::string& s) { return compress(s, 16 + 15); }

HttpLimits small() {
  HttpLimits l;
  l.max_header_bytes = 1024;
  l.max_headers = 8;
  l.max_body_bytes = 4096;
  return l;
}

TEST(HttpReader, ReadsARequestSplitAnyWay) {
  const std::string body = R"({"messages": [1, 2, 3]})";
  const std::string req = "POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: h\r\nX-Api-Key: k\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t piece : {size_t(1), size_t(2), size_t(7), size_t(64), SIZE_MAX}) {
    RequestReader r(small());
    ASSERT_EQ(read_all(r, req, piece), State::done) << piece << ": " << r.failure().message;
    EXPECT_EQ(r.request().method, "POST");
    EXPECT_EQ(r.request().path, "/v1/chat/completions");
    EXPECT_EQ(r.request().query, "x=1");
    EXPECT_EQ(r.request().body, body);
    EXPECT_EQ(r.request().header_or("x-api-key"), "k");
    EXPECT_TRUE(r.request().keep_alive);
  }
}

TEST(HttpReader, StopsAfterTheHeaderUntilTheBodyIsAllowed) {
  RequestReader r(small());
  const std::string req = "POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello";
  const size_t used = r.feed(req);
  EXPECT_EQ(r.state(), State::headed);
  EXPECT_EQ(used, req.size() - 5);  // the body is not touched
  EXPECT_EQ(r.feed(req.substr(used)), 0u);
  r.allow_body();
  EXPECT_EQ(r.feed(req.substr(used)), 5u);
  EXPECT_EQ(r.state(), State::done);
  EXPECT_EQ(r.request().body, "hello");
}

TEST(HttpReader, HeaderLimits) {
  {
    RequestReader r(small());
    EXPECT_EQ(read_all(r, "GET /x HTTP/1.1\r\nX-Pad: " + std::string(2000, 'a') + "\r\n\r\n", 100), State::failed);
    EXPECT_EQ(r.failure().status, 431);
  }
  {  // a header that never ends fails once it passes the limit
    RequestReader r(small());
    EXPECT_EQ(read_all(r, "GET /x HTTP/1.1\r\nX-Pad: " + std::string(1100, 'a')), State::failed);
    EXPECT_EQ(r.failure().status, 431);
  }
  {
    std::string many = "GET /x HTTP/1.1\r\n";
    for (int i = 0; i < 9; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
    RequestReader r(small());
    EXPECT_EQ(read_all(r, many + "\r\n"), State::failed);
    EXPECT_EQ(r.failure().status, 431);
    EXPECT_NE(r.failure().message.find("more than 8 header fields"), std::string::npos);
  }
}

TEST(HttpReader, BodyLimits) {
  {  // refused from the header alone
    RequestReader r(small());
    r.feed("POST /x HTTP/1.1\r\nContent-Length: 4097\r\n\r\n");
    EXPECT_EQ(r.state(), State::failed);
    EXPECT_EQ(r.failure().status, 413);
  }
  {  // chunked: cut once the sum passes the cap
    std::string req = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 10; ++i) req += "400\r\n" + std::string(1024, 'x') + "\r\n";
    req += "0\r\n\r\n";
    RequestReader r(small());
    EXPECT_EQ(read_all(r, req, 300), State::failed);
    EXPECT_EQ(r.failure().status, 413);
    EXPECT_LE(r.request().body.size(), 4096u);
  }
  {  // chunked within the cap
    RequestReader r(small());
    EXPECT_EQ(read_all(r, "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n", 1),
              State::done);
    EXPECT_EQ(r.request().body, "abcde");
  }
}

TEST(HttpReader, AmbiguousFramingIsRefused) {
  const char* cases[] = {
      "POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
      "POST /x HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\nhello!",
      "POST /x HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
      "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello",
      "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
  };
  for (const char* c : cases) {
    RequestReader r(small());
    EXPECT_EQ(read_all(r, c), State::failed) << c;
    EXPECT_EQ(r.failure().status, 400) << c;
  }
  RequestReader same(small());
  EXPECT_EQ(read_all(same, "POST /x HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello"), State::done);
  RequestReader te(small());
  EXPECT_EQ(read_all(te, "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"), State::failed);
  EXPECT_EQ(te.failure().status, 501);
  RequestReader ver(small());
  EXPECT_EQ(read_all(ver, "GET /x HTTP/2.0\r\n\r\n"), State::failed);
  EXPECT_GE(ver.failure().status, 400);
}

TEST(HttpReader, PipelinedRequestsAreReadOneAfterTheOther) {
  const std::string two = "POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET /b HTTP/1.1\r\n\r\nGET /c HTTP/1.0\r\n\r\n";
  std::string rest;
  RequestReader a(small());
  ASSERT_EQ(read_all(a, two, SIZE_MAX, &rest), State::done);
  EXPECT_EQ(a.request().body, "abc");
  RequestReader b(small());
  ASSERT_EQ(read_all(b, rest, SIZE_MAX, &rest), State::done);
  EXPECT_EQ(b.request().path, "/b");
  RequestReader c(small());
  ASSERT_EQ(read_all(c, rest, SIZE_MAX, &rest), State::done);
  EXPECT_EQ(c.request().path, "/c");
  EXPECT_FALSE(c.request().keep_alive);  // HTTP/1.0 without keep-alive
  EXPECT_TRUE(rest.empty());
}

TEST(HttpReader, CompressedBodiesAreInflatedUnderTheCap) {
  const std::string body(3000, 'q');
  for (const auto& [coding, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"gzip", gzip(body)}, {"deflate", compress(body, 15)}, {"deflate", compress(body, -15)}}) {
    RequestReader r(small());
    const std::string req = "POST /x HTTP/1.1\r\nContent-Encoding: " + coding +
                            "\r\nContent-Length: " + std::to_string(bytes.size()) + "\r\n\r\n" + bytes;
    ASSERT_EQ(read_all(r, req, 5), State::done) << coding << ": " << r.failure().message;
    EXPECT_EQ(r.request().body, body);
    EXPECT_EQ(r.request().wire_body_bytes, bytes.size());
  }
  // A bomb: 10 MB of zeros in ~10 KB; inflating stops at the cap.
  const std::string bomb = gzip(std::string(10 << 20, '\0'));
  ASSERT_LT(bomb.size(), 4096u * 4);
  HttpLimits l = small();
  l.max_body_bytes = 64 << 10;
  RequestReader r(l);
  const std::string req = "POST /x HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: " + std::to_string(bomb.size()) +
                          "\r\n\r\n" + bomb;
  EXPECT_EQ(read_all(r, req), State::failed);
  EXPECT_EQ(r.failure().status, 413);
  EXPECT_LE(r.request().body.size(), l.max_body_bytes);
  // Unknown coding: 415; truncated or corrupt: 400.
  RequestReader br(small());
  EXPECT_EQ(read_all(br, "POST /x HTTP/1.1\r\nContent-Encoding: br\r\nContent-Length: 2\r\n\r\nab"), State::failed);
  EXPECT_EQ(br.failure().status, 415);
  const std::string cut = gzip(body).substr(0, 12);
  RequestReader tr(small());
  EXPECT_EQ(read_all(tr, "POST /x HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 12\r\n\r\n" + cut), State::failed);
  EXPECT_EQ(tr.failure().status, 400);
  RequestReader junk(small());
  EXPECT_EQ(read_all(junk, "POST /x HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 8\r\n\r\nnot gzip"), State::failed);
  EXPECT_EQ(junk.failure().status, 400);
}

TEST(HttpReader, InflaterTakesConcatenatedGzipMembers) {
  BodyInflater inf(BodyInflater::Coding::gzip, 100);
  std::string out;
  EXPECT_EQ(inf.feed(gzip("abc") + gzip("def"), out), BodyInflater::Result::ok);
  EXPECT_TRUE(inf.finished());
  EXPECT_EQ(out, "abcdef");
}

TEST(ApiKey, SourcesAndComparison) {
  EXPECT_FALSE(resolve_api_key(std::nullopt, std::nullopt, nullptr));
  EXPECT_EQ(*resolve_api_key(std::string("a"), std::nullopt, "env"), "a");
  EXPECT_EQ(*resolve_api_key(std::nullopt, std::nullopt, " env \n"), "env");
  const std::string file = ::testing::TempDir() + "/hs_key";
  std::ofstream(file) << "  from-file  \nsecond line\n";
  EXPECT_EQ(*resolve_api_key(std::nullopt, file, "env"), "from-file");
  EXPECT_THROW(resolve_api_key(std::string("a"), file, nullptr), Error);
  EXPECT_THROW(resolve_api_key(std::nullopt, file + ".missing", nullptr), Error);
  EXPECT_THROW(resolve_api_key(std::string(""), std::nullopt, nullptr), Error);
  EXPECT_THROW(resolve_api_key(std::nullopt, std::nullopt, "  "), Error);
  EXPECT_TRUE(same_secret("sekret", "sekret"));
  for (const char* other : {"", "s", "sekre", "sekret2", "Sekret", "xekret", "sekretsekret"})
    EXPECT_FALSE(same_secret(other, "sekret")) << other;
  EXPECT_FALSE(same_secret("", ""));
  EXPECT_EQ(request_key("Bearer abc", "x"), "abc");
  EXPECT_EQ(request_key("", "x"), "x");
  EXPECT_EQ(request_key("Basic abc", ""), "");
}

}  // namespace
}  // namespace hs::server
