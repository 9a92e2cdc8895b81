// Errors with context: what failed, where (file, tensor, key) and why (expected vs got).
// Library code throws hs::Error; the CLI catches it at the top and prints one line.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace hs {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

// Concatenate anything streamable into one string: hs::cat("tensor ", name, " has ", n, " dims").
template <typename... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

template <typename... Args>
[[noreturn]] void fail(Args&&... args) {
  throw Error(cat(std::forward<Args>(args)...));
}

}  // namespace hs

// Check a condition that depends on input data (files, requests, user options).
#define HS_CHECK(cond, ...)          \
  do {                               \
    if (!(cond)) ::hs::fail(__VA_ARGS__); \
  } while (0)
