#include "server/access_log.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "server/json_util.h"

namespace hs::server {

namespace {
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}
}  // namespace

std::string format_access_line(const AccessRecord& r) {
  ojson j = {{"ts", utc_now()},   {"type", "access"},      {"method", r.method},
             {"path", r.path},    {"status", r.status},    {"ms", std::round(r.seconds * 1e4) / 10},
             {"remote", r.remote}, {"bytes_in", r.bytes_in}};
  if (!r.request_id.empty()) j["id"] = r.request_id;
  if (!r.request_id.empty()) j["stream"] = r.stream;
  if (r.outcome) {
    j["prompt_tokens"] = r.outcome->prompt_tokens;
    j["cached_tokens"] = r.outcome->cached_tokens;  // of prompt_tokens, from the prefix cache
    j["completion_tokens"] = r.outcome->completion_tokens;
    j["finish"] = finish_name(r.outcome->finish);
    j["ttft_ms"] = std::round(r.outcome->queue_s * 1e4) / 10;
    if (!r.outcome->warnings.empty()) j["warnings"] = r.outcome->warnings.size();
    if (r.outcome->drafted_tokens > 0) {  // speculative decoding
      j["drafted_tokens"] = r.outcome->drafted_tokens;
      j["accepted_tokens"] = r.outcome->accepted_tokens;
    }
  }
  if (r.disconnected) j["disconnected"] = true;
  if (!r.error.empty()) j["error"] = r.error;
  return dump_json(j);
}

void write_access_log(const AccessRecord& r) {
  const std::string line = format_access_line(r) + "\n";
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(STDERR_FILENO, line.data() + off, line.size() - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
}

}  // namespace hs::server
