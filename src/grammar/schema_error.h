// The error of a JSON Schema (or format) that cannot be compiled: an unsupported feature or an
// invalid value. The message names the feature and where it is (a JSON pointer into the
// schema); the server answers it with HTTP 400.
#pragma once
#include <string>

#include "util/error.h"

namespace hs::grammar {

class SchemaError : public Error {
 public:
  SchemaError(const std::string& where, const std::string& what)
      : Error(where.empty() ? what : what + " (at " + where + ")"), where_(where), what_(what) {}
  const std::string& where() const { return where_; }  // JSON pointer, "#" for the root
  const std::string& detail() const { return what_; }

 private:
  std::string where_, what_;
};

}  // namespace hs::grammar
