// libFuzzer target: bytes through the server's HTTP request reader (server/request_reader.h)
// with small limits, as a connection would feed them: split into pieces (sizes taken from the
// input's first byte), unconsumed bytes offered again with the next piece, the body allowed
// after the header, requests read one after another (pipelining) until the bytes run out or
// one fails. Checks the reader's own promises: it never consumes more than it is given, a
// request that is done respects the body cap (decoded too), a failure has a 4xx/5xx status and
// a message, and consumed bytes always move the reader forward.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/request_reader.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using hs::server::RequestReader;
  if (size == 0) return 0;
  const size_t piece = 1 + (data[0] % 64);  // how the bytes arrive: 1..64 at a time
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);

  hs::server::HttpLimits limits;
  limits.max_header_bytes = 2048;
  limits.max_headers = 16;
  limits.max_body_bytes = 8192;

  std::string pending;  // received, not consumed
  size_t pos = 0;
  for (int requests = 0; requests < 64; ++requests) {
    RequestReader reader(limits);
    for (;;) {
      const auto st = reader.state();
      if (st == RequestReader::State::headed) {
        reader.allow_body();
        continue;
      }
      if (st == RequestReader::State::done || st == RequestReader::State::failed) break;
      const size_t used = reader.feed(pending);
      check(used <= pending.size());
      pending.erase(0, used);
      if (used > 0 || reader.state() != st) continue;
      if (pos >= input.size()) break;  // needs more than there is
      const size_t n = std::min(piece, input.size() - pos);
      pending.append(input.substr(pos, n));
      pos += n;
    }
    switch (reader.state()) {
      case RequestReader::State::done: {
        const auto& req = reader.request();
        check(req.body.size() <= limits.max_body_bytes);
        check(req.wire_body_bytes <= limits.max_body_bytes);
        check(!req.method.empty());
        break;
      }
      case RequestReader::State::failed:
        check(reader.failure().status >= 400 && reader.failure().status < 600);
        check(!reader.failure().message.empty());
        return 0;  // a connection closes after a failure
      default: return 0;  // the input ended inside a request
    }
    if (pending.empty() && pos >= input.size()) return 0;
  }
  return 0;
}
