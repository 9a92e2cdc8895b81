// Prometheus metrics (text exposition format 0.0.4): HTTP requests by route and status,
// generations by API and finish reason, per-request latency and throughput histograms, and
// the scheduler's counters and gauges (tokens, queue depth, running sequences, state memory).
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "server/generation.h"

namespace hs::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket/_sum/_count lines of `name` (the HELP/TYPE header is the caller's).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); the last is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void record_http(const std::string& route, int status, double seconds);
  void record_generation(const std::string& api, const GenOutcome& o);
  void stream_opened();
  void stream_closed();
  void http_connection_opened();
  void http_connection_closed();
  void http_request_began();  // header read, not yet answered
  void http_request_ended();

  struct EngineView {
    bool ready = false;
    bool draining = false;
    SchedulerStats stats;  // valid when ready
    int64_t ctx_size = 0;
  };
  std::string render(const EngineView& view) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_requests_;
  std::map<std::string, Histogram> http_latency_;  // by route
  std::map<std::pair<std::string, std::string>, uint64_t> finished_;  // (api, finish)
  Histogram ttft_, e2e_, prefill_tps_, decode_tps_, prompt_len_, gen_len_;
  int64_t streams_open_ = 0;
  int64_t connections_open_ = 0, requests_in_flight_ = 0;
};

}  // namespace hs::server
