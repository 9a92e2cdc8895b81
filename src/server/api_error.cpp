#include "server/api_error.h"

#include "server/json_util.h"

namespace hs::server {

const char* error_type(ApiFlavor flavor, int status) {
  if (flavor == ApiFlavor::anthropic) {
    switch (status) {
      case 401: return "authentication_error";
      case 403: return "permission_error";
      case 404: return "not_found_error";
      case 413: return "request_too_large";
      case 429: return "rate_limit_error";
      case 503: return "overloaded_error";
      default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
  }
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "invalid_request_error";
    case 503: return "service_unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

std::string error_body(ApiFlavor flavor, const ApiError& e) {
  ojson err = ojson::object();
  if (flavor == ApiFlavor::anthropic) {
    err["type"] = error_type(flavor, e.status());
    err["message"] = e.what();
    return dump_json(ojson{{"type", "error"}, {"error", std::move(err)}});
  }
  err["message"] = e.what();
  err["type"] = error_type(flavor, e.status());
  err["param"] = e.param().empty() ? ojson(nullptr) : ojson(e.param());
  err["code"] = e.code().empty() ? ojson(nullptr) : ojson(e.code());
  return dump_json(ojson{{"error", std::move(err)}});
}

}  // namespace hs::server
