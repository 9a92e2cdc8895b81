#include "server/http_response.h"

#include <cstdio>

namespace hs::server {

const char* status_reason(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Client Error" : "Server Error";
  }
}

std::string format_head(const ResponseHead& h) {
  std::string s = h.http10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  s += std::to_string(h.status);
  s += ' ';
  s += status_reason(h.status);
  s += "\r\n";
  if (!h.content_type.empty()) s += "Content-Type: " + h.content_type + "\r\n";
  if (h.length) {
    s += "Content-Length: " + std::to_string(*h.length) + "\r\n";
  } else if (!h.http10) {
    s += "Transfer-Encoding: chunked\r\n";
  }
  // HTTP/1.0 keeps a connection only when asked; without a length it cannot.
  if (h.close || (h.http10 && !h.length)) s += "Connection: close\r\n";
  else if (h.http10) s += "Connection: keep-alive\r\n";
  for (const auto& [k, v] : h.headers) s += k + ": " + v + "\r\n";
  s += "\r\n";
  return s;
}

std::string chunk(const std::string& bytes) {
  char size[20];
  std::snprintf(size, sizeof(size), "%zx\r\n", bytes.size());
  std::string s = size;
  s += bytes;
  s += "\r\n";
  return s;
}

}  // namespace hs::server
