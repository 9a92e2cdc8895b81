// Errors answered to an API client: an HTTP status, a message, and (OpenAI) the request field
// at fault and a code. Each API renders them in its own body shape.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include "util/error.h"

namespace hs::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string param_, code_;
};

// 400 naming the field: bad_request("max_tokens", "must be at least 1, got ", n).
template <typename... Args>
[[noreturn]] void bad_request(const std::string& param, Args&&... args) {
  throw ApiError(400, cat(std::forward<Args>(args)...), param);
}

enum class ApiFlavor { openai, anthropic };

// OpenAI: {"error": {"message", "type", "param", "code"}}.
// Anthropic: {"type": "error", "error": {"type", "message"}}.
std::string error_body(ApiFlavor flavor, const ApiError& e);
// The error `type` of each API for a status (invalid_request_error, authentication_error, ...).
const char* error_type(ApiFlavor flavor, int status);

}  // namespace hs::server
