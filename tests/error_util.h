// The message of the hs::Error a statement throws, for tests that check what an error says.
#pragma once
#include <string>

#include "util/error.h"

namespace hs::test {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace hs::test

// Expects `stmt` to throw an hs::Error whose message contains `needle`.
#define EXPECT_ERROR(stmt, needle)                                                      \
  EXPECT_NE(::hs::test::error_of([&] { stmt; }).find(needle), std::string::npos)       \
      << ::hs::test::error_of([&] { stmt; })
