#include "server/metrics.h"

#include <cmath>
#include <cstdio>

namespace hs::server {

namespace {

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, const std::string& labels, double v) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  out += num(v);
  out += '\n';
}

std::string label(const char* key, const std::string& value) {
  std::string out = key;
  out += "=\"";
  for (char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::vector<double> geometric(double first, double factor, int n) {
  std::vector<double> b;
  for (double v = first; n-- > 0; v *= factor) b.push_back(v);
  return b;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i]++;
  sum_ += v;
  count_++;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  const std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cum = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cum += counts_[i];
    const std::string le = i < bounds_.size() ? num(bounds_[i]) : "+Inf";
    sample(out, name + "_bucket", sep + "le=\"" + le + "\"", static_cast<double>(cum));
  }
  sample(out, name + "_sum", labels, sum_);
  sample(out, name + "_count", labels, static_cast<double>(count_));
}

Metrics::Metrics()
    : ttft_(geometric(0.005, 2, 14)),
      e2e_(geometric(0.01, 2, 16)),
      prefill_tps_(geometric(1, 2, 20)),
      decode_tps_(geometric(0.5, 2, 18)),
      prompt_len_(geometric(8, 2, 16)),
      gen_len_(geometric(1, 2, 17)) {}

void Metrics::record_http(const std::string& route, int status, double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  http_requests_[{route, status}]++;
  auto it = http_latency_.find(route);
  if (it == http_latency_.end()) it = http_latency_.emplace(route, Histogram(geometric(0.001, 2.5, 14))).first;
  it->second.observe(seconds);
}

void Metrics::record_generation(const std::string& api, const GenOutcome& o) {
  std::lock_guard<std::mutex> lk(mu_);
  finished_[{api, finish_name(o.finish)}]++;
  e2e_.observe(o.total_s);
  prompt_len_.observe(static_cast<double>(o.prompt_tokens));
  gen_len_.observe(static_cast<double>(o.completion_tokens));
  if (o.completion_tokens > 0) {
    ttft_.observe(o.queue_s);
    if (o.queue_s > 0) prefill_tps_.observe(static_cast<double>(o.prompt_tokens) / o.queue_s);
    if (o.completion_tokens > 1 && o.decode_s > 0)
      decode_tps_.observe(static_cast<double>(o.completion_tokens - 1) / o.decode_s);
  }
}

void Metrics::stream_opened() {
  std::lock_guard<std::mutex> lk(mu_);
  ++streams_open_;
}

void Metrics::stream_closed() {
  std::lock_guard<std::mutex> lk(mu_);
  --streams_open_;
}

void Metrics::http_connection_opened() {
  std::lock_guard<std::mutex> lk(mu_);
  ++connections_open_;
}

void Metrics::http_connection_closed() {
  std::lock_guard<std::mutex> lk(mu_);
  --connections_open_;
}

void Metrics::http_request_began() {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_in_flight_;
}

void Metrics::http_request_ended() {
  std::lock_guard<std::mutex> lk(mu_);
  --requests_in_flight_;
}

std::string Metrics::render(const EngineView& v) const {
  struct Scalar {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const SchedulerStats& s = v.stats;
  auto rate = [](double n, double secs) { return secs > 0 ? n / secs : 0.0; };
  std::vector<Scalar> scalars = {{"ready", "gauge", "1 when the model is loaded and requests are served",
                                  v.ready && !v.draining ? 1.0 : 0.0}};
  if (v.ready) {
    const std::vector<Scalar> engine = {
        {"requests_running", "gauge", "sequences holding a scheduler slot", double(s.requests_active)},
        {"requests_waiting", "gauge", "requests queued for a free slot (queue depth)", double(s.queue_depth)},
        {"max_sequences", "gauge", "scheduler slots (--max-seqs)", double(s.max_seqs)},
        {"context_size", "gauge", "tokens per sequence (--ctx-size)", double(v.ctx_size)},
        {"state_memory_bytes", "gauge", "state pool memory the live sequences hold", double(s.state_bytes)},
        {"state_pages_total", "gauge", "compressed-state pages of the state pools (all shards)", double(s.pages.pages_total)},
        {"state_pages_used", "gauge", "compressed-state pages held by sequences", double(s.pages.pages_used)},
        {"state_pages_shared", "gauge", "pages held by more than one sequence (forks)", double(s.pages.pages_shared)},
        {"state_swa_pages_total", "gauge", "SWA pages of the state pools (all shards)", double(s.pages.swa_pages_total)},
        {"state_swa_pages_used", "gauge", "SWA pages held by sequences", double(s.pages.swa_pages_used)},
        {"state_token_capacity", "gauge", "the most tokens one sequence can hold in the state pools",
         double(s.pages.token_capacity)},
        {"preemptions_total", "counter", "sequences whose pages were taken back because the pool was full (they "
         "recompute and go on)", double(s.preemptions)},
        {"draft_tokens_total", "counter", "tokens drafted for speculative decoding (--draft)", double(s.drafted_tokens)},
        {"draft_accepted_tokens_total", "counter", "drafted tokens the model accepted (each one a decode step saved)",
         double(s.accepted_tokens)},
        {"draft_verify_steps_total", "counter", "sequence-steps that verified drafts", double(s.verify_steps)},
        {"draft_probes_total", "counter", "shadow probes of requests whose drafts backed off (checked against the "
         "step's own token, not verified)", double(s.draft_probes)},
        {"prompt_tokens_cached_total", "counter", "prompt tokens restored from the prefix cache, not computed",
         double(s.cached_prompt_tokens)},
        {"prefix_cache_lookups_total", "counter", "prefix-cache lookups (a request's start, a preempted one's resume)",
         double(s.cache.lookups)},
        {"prefix_cache_hits_total", "counter", "lookups that found a cached prefix", double(s.cache.hits)},
        {"prefix_cache_hit_tokens_total", "counter", "tokens of the lookups served from the cache",
         double(s.cache.hit_tokens)},
        {"prefix_cache_miss_tokens_total", "counter", "tokens of the lookups not in the cache", double(s.cache.miss_tokens)},
        {"prefix_cache_entries", "gauge", "snapshots held, every tier", double(s.cache.entries)},
        {"prefix_cache_device_bytes", "gauge", "state pages the cache holds on the device (in the pools)",
         double(s.cache.device_page_bytes)},
        {"prefix_cache_host_bytes", "gauge", "host memory of the cache (page copies, snapshot rows)",
         double(s.cache.host_bytes)},
        {"prefix_cache_disk_bytes", "gauge", "bytes of the cache's files", double(s.cache.disk_bytes)},
        {"prefix_cache_evictions_device_total", "counter", "entries moved off the device tier", double(s.cache.evictions_device)},
        {"prefix_cache_evictions_host_total", "counter", "entries moved off host memory", double(s.cache.evictions_host)},
        {"prefix_cache_evictions_disk_total", "counter", "entries whose files were deleted", double(s.cache.evictions_disk)},
        {"prefix_cache_bad_files_total", "counter", "cache files refused (corrupt, short, another model or version)",
         double(s.cache.bad_files)},
        {"scheduler_requests_total", "counter", "requests admitted by the scheduler", double(s.requests_total)},
        {"prompt_tokens_total", "counter", "prompt tokens of admitted requests (tokens in)", double(s.prompt_tokens_total)},
        {"generation_tokens_total", "counter", "generated tokens (tokens out)", double(s.generated_tokens_total)},
        {"device_sampled_tokens_total", "counter", "generated tokens sampled on the device (the rest on the host)",
         double(s.device_sampled_tokens)},
        {"constrained_tokens_total", "counter", "generated tokens under structured output (sampled with a token mask)",
         double(s.constrained_tokens)},
        {"constraint_seconds_total", "counter", "time spent computing and applying structured-output token masks",
         s.constraint_seconds},
        {"decode_graph_replays_total", "counter", "shard decode steps replayed as a captured CUDA graph",
         double(s.graphs.replayed)},
        {"decode_graph_captures_total", "counter", "shard decode steps captured as a CUDA graph", double(s.graphs.captured)},
        {"decode_graph_capture_failures_total", "counter",
         "CUDA graph captures that failed (that shard then decodes op by op)", double(s.graphs.failed)},
        {"prefill_tokens_processed_total", "counter", "tokens run through prefill steps", double(s.prefill_tokens)},
        {"prefill_seconds_total", "counter", "time spent in prefill steps", s.prefill_seconds},
        {"decode_tokens_processed_total", "counter", "tokens run through decode steps", double(s.decode_tokens)},
        {"decode_seconds_total", "counter", "time spent in decode steps", s.decode_seconds},
        {"prefill_throughput_tokens_per_second", "gauge", "prefill tokens / prefill seconds since start",
         rate(double(s.prefill_tokens), s.prefill_seconds)},
        {"decode_throughput_tokens_per_second", "gauge", "decode tokens / decode seconds since start",
         rate(double(s.decode_tokens), s.decode_seconds)},
    };
    scalars.insert(scalars.end(), engine.begin(), engine.end());
  }
  std::string out;
  const std::string p = "hyperstream_";
  for (const auto& m : scalars) {
    header(out, p + m.name, m.type, m.help);
    sample(out, p + m.name, "", m.value);
  }
  std::lock_guard<std::mutex> lk(mu_);
  header(out, p + "http_streams_open", "gauge", "HTTP responses being streamed now");
  sample(out, p + "http_streams_open", "", double(streams_open_));
  header(out, p + "http_connections_open", "gauge", "HTTP connections open now (idle keep-alive ones included)");
  sample(out, p + "http_connections_open", "", double(connections_open_));
  header(out, p + "http_requests_in_flight", "gauge", "HTTP requests whose body is being read or that are being handled or answered");
  sample(out, p + "http_requests_in_flight", "", double(requests_in_flight_));
  header(out, p + "http_requests_total", "counter", "HTTP requests by route and status");
  for (const auto& [k, n] : http_requests_)
    sample(out, p + "http_requests_total", label("route", k.first) + "," + label("status", std::to_string(k.second)),
           double(n));
  header(out, p + "http_request_duration_seconds", "histogram", "HTTP request time by route (streams: until the end)");
  for (const auto& [route, h] : http_latency_) h.render(out, p + "http_request_duration_seconds", label("route", route));
  header(out, p + "requests_finished_total", "counter", "generations by API and finish reason");
  for (const auto& [k, n] : finished_)
    sample(out, p + "requests_finished_total", label("api", k.first) + "," + label("finish_reason", k.second), double(n));
  const struct {
    const char* name;
    const char* help;
    const Histogram& h;
  } hists[] = {
      {"time_to_first_token_seconds", "submit to first token (queue + prefill)", ttft_},
      {"e2e_request_latency_seconds", "submit to end of generation", e2e_},
      {"request_prefill_tokens_per_second", "per request: prompt tokens / time to first token", prefill_tps_},
      {"request_decode_tokens_per_second", "per request: tokens after the first / decode time", decode_tps_},
      {"request_prompt_tokens", "prompt length per request", prompt_len_},
      {"request_generation_tokens", "generated tokens per request", gen_len_},
  };
  for (const auto& h : hists) {
    header(out, p + h.name, "histogram", h.help);
    h.h.render(out, p + h.name, "");
  }
  return out;
}

}  // namespace hs::server
