// Little-endian field writing and bounds-checked reading for the control channel's messages
// (engine/distributed_control.h, engine/distributed_plan.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace hs::dist::wire {

inline void put(std::vector<uint8_t>& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline uint64_t get(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

// Reads the fields of a payload in order; `what` names it in the error a truncation throws.
struct Reader {
  const std::string& s;
  const char* what;
  size_t at = 0;
  uint64_t num(int bytes) {
    HS_CHECK(at + static_cast<size_t>(bytes) <= s.size(), "control message: truncated ", what, " payload");
    const uint64_t v = get(reinterpret_cast<const uint8_t*>(s.data()) + at, bytes);
    at += static_cast<size_t>(bytes);
    return v;
  }
  int64_t i64() { return static_cast<int64_t>(num(8)); }
  std::string str() {
    const size_t n = num(4);
    HS_CHECK(n <= s.size() - at, "control message: truncated ", what, " payload");
    std::string out = s.substr(at, n);
    at += n;
    return out;
  }
  size_t left() const { return s.size() - at; }
  void done() const {
    HS_CHECK(at == s.size(), "control message: ", s.size() - at, " stray bytes after the ", what);
  }
};

}  // namespace hs::dist::wire
