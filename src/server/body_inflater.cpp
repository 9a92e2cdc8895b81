#include "server/body_inflater.h"

#include <zlib.h>

#include <cstring>

namespace hs::server {

struct BodyInflater::Z {
  z_stream s{};
  bool open = false;
  bool ended = false;       // Z_STREAM_END seen (and no member started after it)
  bool produced = false;    // any output or any stream end: no raw-deflate fallback any more
  bool raw = false;         // deflate sent without the zlib wrapper (some clients do)
  Coding coding;

  int init() {
    // gzip: 16 + 15 accepts the gzip wrapper only; deflate: 15 the zlib one, -15 none.
    const int bits = coding == Coding::gzip ? 16 + 15 : raw ? -15 : 15;
    const int rc = inflateInit2(&s, bits);
    open = rc == Z_OK;
    return rc;
  }
  ~Z() {
    if (open) inflateEnd(&s);
  }
};

BodyInflater::BodyInflater(Coding coding, size_t cap) : z_(std::make_unique<Z>()), cap_(cap) {
  z_->coding = coding;
  z_->init();
}

BodyInflater::~BodyInflater() = default;

bool BodyInflater::finished() const { return z_->ended; }

BodyInflater::Result BodyInflater::feed(std::string_view in, std::string& out) {
  Z& z = *z_;
  if (!z.open) return Result::bad_data;
  unsigned char chunk[16384];
  bool full = false;  // the last call filled the chunk: zlib may hold more output
  while (!in.empty() || (full && !z.ended)) {
    if (z.ended) {
      // Bytes after the end: another gzip member (allowed by RFC 1952), else garbage.
      if (z.coding != Coding::gzip) return Result::bad_data;
      inflateReset(&z.s);
      z.ended = false;
    }
    const std::string_view before = in;
    z.s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
    z.s.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), 1u << 20));
    const uInt given = z.s.avail_in;
    z.s.next_out = chunk;
    z.s.avail_out = sizeof(chunk);
    const int rc = inflate(&z.s, Z_NO_FLUSH);
    const size_t made = sizeof(chunk) - z.s.avail_out;
    const size_t used = given - z.s.avail_in;
    if (rc == Z_DATA_ERROR && z.coding == Coding::deflate && !z.raw && !z.produced) {
      // Not zlib-wrapped: start again on the same bytes as raw deflate.
      inflateEnd(&z.s);
      z.s = z_stream{};
      z.raw = true;
      if (z.init() != Z_OK) return Result::bad_data;
      in = before;
      continue;
    }
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR) return Result::bad_data;
    if (made > 0 || rc == Z_STREAM_END) z.produced = true;
    if (made > cap_ - std::min(cap_, out.size())) return Result::too_large;
    out.append(reinterpret_cast<const char*>(chunk), made);
    in.remove_prefix(used);
    if (rc == Z_STREAM_END) z.ended = true;
    full = z.s.avail_out == 0;
    if (used == 0 && made == 0 && !z.ended) {
      if (in.empty()) break;   // waiting for more input
      return Result::bad_data;  // no progress on input
    }
  }
  return Result::ok;
}

}  // namespace hs::server
