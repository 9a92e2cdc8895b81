// What an API handler answers: a complete body, or a generation whose events a ResponseWriter
// turns into bytes (SSE chunks, or one JSON body at the end) while the HTTP layer streams them.
#pragma once
#include <chrono>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>

#include "server/generation.h"

namespace hs::server {

class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual std::string begin() { return {}; }
  // Bytes for a batch of events; when batch.done, the rest of the response.
  virtual std::string on_batch(const GenBatch& batch) = 0;
  // Bytes to send when a stream has been silent for `silent` (no batch produced bytes), so
  // that clients with idle timeouts keep waiting through a long prefill; empty: nothing. The
  // HTTP layer calls it between batches of a streamed response.
  virtual std::string keepalive(std::chrono::milliseconds silent) {
    (void)silent;
    return {};
  }
};

struct Job {
  std::shared_ptr<Generation> gen;
  std::unique_ptr<ResponseWriter> writer;
};

struct Reply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;          // when job is null
  std::shared_ptr<Job> job;  // a generation to stream
  // For the access log.
  std::string request_id;
  bool stream = false;
};

// Per-request inputs from the HTTP layer besides the body.
struct RequestInfo {
  std::optional<std::string> force_output;  // test hook: X-HS-Test-Force-Output (JSON string)
  std::optional<int64_t> fail_after;        // test hook: X-HS-Test-Engine-Fail-After (tokens)
  std::optional<int64_t> hold_prefill_ms;   // test hook: X-HS-Test-Hold-Prefill-Ms (GenerationSpec::hold_prefill)
};

}  // namespace hs::server
