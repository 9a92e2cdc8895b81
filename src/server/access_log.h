// One structured line per HTTP request on stderr (JSON, written with a single write so lines
// from concurrent requests never interleave).
#pragma once
#include <chrono>
#include <optional>
#include <string>

#include "server/generation.h"

namespace hs::server {

struct AccessRecord {
  std::chrono::steady_clock::time_point start{};  // when the request was routed
  std::string method, path, remote;
  int status = 0;
  double seconds = 0;
  size_t bytes_in = 0;
  std::string request_id;  // chatcmpl-… / cmpl-… / msg_…
  bool stream = false;
  bool disconnected = false;  // the client went away before the end
  std::string error;          // the message of a 4xx/5xx answer
  std::optional<GenOutcome> outcome;
};

std::string format_access_line(const AccessRecord& r);  // without the newline
void write_access_log(const AccessRecord& r);

}  // namespace hs::server
