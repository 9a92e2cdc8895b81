#include "server/http_server.h"

#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

#include <filesystem>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "server/access_log.h"
#include "server/anthropic_api.h"
#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/responses_api.h"
#include "util/log.h"

namespace hs::server {

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kForceOutputHeader = "X-HS-Test-Force-Output";
constexpr const char* kFailAfterHeader = "X-HS-Test-Engine-Fail-After";
constexpr const char* kHoldPrefillHeader = "X-HS-Test-Hold-Prefill-Ms";

struct Route {
  const char* method;
  const char* path;
};
constexpr Route kRoutes[] = {
    {"GET", "/health"},           {"GET", "/metrics"},         {"GET", "/v1/models"},
    {"POST", "/v1/chat/completions"}, {"POST", "/v1/completions"}, {"POST", "/v1/messages"},
    {"POST", "/v1/messages/count_tokens"}, {"POST", "/tokenize"}, {"POST", "/detokenize"},
    {"POST", "/v1/responses"},
};

// The metrics label of a path: a known route, else "other" (bounded cardinality).
std::string route_label(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return r.path;
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  return "other";
}

ApiFlavor flavor_of(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 ? ApiFlavor::anthropic : ApiFlavor::openai;
}

bool needs_key(const std::string& path) {
  return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize";
}

bool same_secret(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

std::string bearer_token(const std::string& auth) {
  if (auth.size() > 7 && (auth.compare(0, 7, "Bearer ") == 0 || auth.compare(0, 7, "bearer ") == 0))
    return auth.substr(7);
  return {};
}

// The local port of a socket, or -1.
int local_port_of(int fd) {
  sockaddr_storage local{};
  socklen_t n = sizeof(local);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &n) != 0) return -1;
  if (local.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&local)->sin_port);
  if (local.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&local)->sin6_port);
  return -1;
}

// Connected TCP sockets of this process on local port `port`: the server's client connections.
// At shutdown the idle keep-alive ones are closed this way (cpp-httplib would otherwise keep a
// worker waiting out each one's keep-alive timeout).
std::vector<int> client_sockets(int port) {
  std::vector<int> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(e.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{};
    socklen_t m = sizeof(peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &m) != 0) continue;  // not connected
    if (local_port_of(fd) == port) out.push_back(fd);
  }
  return out;
}

// The socket of the connection a request came on (cpp-httplib 0.11 does not hand it to
// handlers): the one whose local port and peer address match the request's; -1 if none.
int connection_socket(const httplib::Request& req) {
  for (int fd : client_sockets(req.local_port)) {
    sockaddr_storage peer{};
    socklen_t m = sizeof(peer);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &m) != 0) continue;
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<sockaddr*>(&peer), m, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
      continue;
    if (req.remote_addr == host && std::to_string(req.remote_port) == port) return fd;
  }
  return -1;
}

// Whether the client closed its side (EOF or an error); data it sent early does not count.
bool peer_closed(int fd) {
  char c;
  const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace

struct HttpServer::Impl {
  HttpOptions opts;
  Metrics& metrics;
  httplib::Server svr;
  std::thread thread;
  std::atomic<Service*> svc{nullptr};
  std::atomic<bool> draining{false};
  std::atomic<bool> listen_done{false};
  bool started = false, stopped = false;
  int port = 0;

  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::shared_ptr<Generation>> live;  // generations being answered
  uint64_t next_live = 0;
  // The access record of each request in flight, keyed by the Request (alive until logged).
  std::unordered_map<const httplib::Request*, std::shared_ptr<AccessRecord>> records;

  Impl(HttpOptions o, Metrics& m) : opts(std::move(o)), metrics(m) {}

  std::shared_ptr<AccessRecord> record_of(const httplib::Request& req) {
    std::lock_guard<std::mutex> lk(mu);
    auto& r = records[&req];
    if (!r) r = std::make_shared<AccessRecord>();
    return r;
  }

  void send_error(httplib::Response& res, ApiFlavor flavor, const ApiError& e, AccessRecord* rec) {
    res.status = e.status();
    res.set_content(error_body(flavor, e), "application/json");
    if (rec) rec->error = e.what();
  }

  // The common front of every API route: key, readiness, then the handler; errors in the
  // API's own shape.
  template <typename Fn>
  void api(const httplib::Request& req, httplib::Response& res, Fn&& fn) {
    const ApiFlavor flavor = flavor_of(req.path);
    auto rec = record_of(req);
    try {
      if (opts.api_key && needs_key(req.path)) {
        std::string key = bearer_token(req.get_header_value("Authorization"));
        if (key.empty()) key = req.get_header_value("x-api-key");
        if (!same_secret(key, *opts.api_key)) {
          res.set_header("WWW-Authenticate", "Bearer");
          throw ApiError(401, key.empty() ? "missing API key (Authorization: Bearer KEY or x-api-key: KEY)"
                                          : "invalid API key",
                         {}, "invalid_api_key");
        }
      }
      if (draining) throw ApiError(503, "the server is shutting down");
      Service* s = svc.load();
      if (!s) throw ApiError(503, "the model is loading");
      RequestInfo info;
      if (s->config().test_hooks) info = test_hooks(req);
      respond(req, res, flavor, fn(*s, info), rec);
    } catch (const ApiError& e) {
      send_error(res, flavor, e, rec.get());
    } catch (const Error& e) {
      send_error(res, flavor, ApiError(400, e.what()), rec.get());
    } catch (const std::exception& e) {
      log_warn("internal error on ", req.path, ": ", e.what());
      send_error(res, flavor, ApiError(500, cat("internal error: ", e.what())), rec.get());
    }
  }

  // The X-HS-Test-* headers (serve --test-hooks): 400 when malformed.
  static RequestInfo test_hooks(const httplib::Request& req) {
    RequestInfo info;
    if (req.has_header(kForceOutputHeader)) {
      const ojson v = ojson::parse(req.get_header_value(kForceOutputHeader), nullptr, false);
      if (!v.is_string()) throw ApiError(400, cat(kForceOutputHeader, " must be a JSON string"));
      info.force_output = v.get<std::string>();
    }
    if (req.has_header(kFailAfterHeader)) {
      const ojson v = ojson::parse(req.get_header_value(kFailAfterHeader), nullptr, false);
      if (!v.is_number_unsigned()) throw ApiError(400, cat(kFailAfterHeader, " must be an integer >= 0"));
      info.fail_after = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
    }
    if (req.has_header(kHoldPrefillHeader)) {
      const ojson v = ojson::parse(req.get_header_value(kHoldPrefillHeader), nullptr, false);
      if (!v.is_number_unsigned() || v.get<uint64_t>() > 600000)
        throw ApiError(400, cat(kHoldPrefillHeader, " must be an integer from 0 to 600000"));
      info.hold_prefill_ms = v.get<int64_t>();
    }
    return info;
  }

  void respond(const httplib::Request& req, httplib::Response& res, ApiFlavor flavor, Reply r,
               const std::shared_ptr<AccessRecord>& rec) {
    rec->request_id = r.request_id;
    rec->stream = r.stream;
    res.status = r.status;
    if (!r.job) {
      res.set_content(r.body, r.content_type);
      return;
    }
    std::shared_ptr<Job> job = std::move(r.job);
    uint64_t key;
    {
      std::lock_guard<std::mutex> lk(mu);
      key = next_live++;
      live.emplace(key, job->gen);
    }
    if (!r.stream) {  // the whole answer, its status chosen once the generation has ended
      struct Unlive {
        Impl& m;
        uint64_t key;
        ~Unlive() {
          std::lock_guard<std::mutex> lk(m.mu);
          m.live.erase(key);
          m.cv.notify_all();
        }
      } unlive{*this, key};
      answer_whole(req, res, flavor, *job, r.content_type, *rec);
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    metrics.stream_opened();
    res.set_chunked_content_provider(
        r.content_type, [this, job, rec](size_t, httplib::DataSink& sink) { return pump(*job, sink, *rec); },
        [this, job, key](bool) {
          job->gen->cancel();  // no-op when it ended; frees the slot when the client went away
          metrics.stream_closed();
          std::lock_guard<std::mutex> lk(mu);
          live.erase(key);
          cv.notify_all();
        });
  }

  // A non-stream answer: runs the generation to its end on the handler's thread, polling the
  // client's socket so that a client that left cancels its sequence, then sends one body with
  // the right status: 200, or the API's error body with 500 (the generation failed) or 503
  // (cancelled by the shutdown).
  static void answer_whole(const httplib::Request& req, httplib::Response& res, ApiFlavor flavor, Job& job,
                           const std::string& content_type, AccessRecord& rec) {
    const int fd = connection_socket(req);
    try {
      std::string body = job.writer->begin();
      for (;;) {
        GenBatch b = job.gen->next(std::chrono::milliseconds(20));
        body += job.writer->on_batch(b);
        if (b.done) {
          rec.outcome = b.outcome;
          if (b.outcome.finish == Finish::error || b.outcome.finish == Finish::cancelled) {
            const ApiError e = outcome_error(b.outcome);
            res.status = e.status();
            rec.error = e.what();
            body = error_body(flavor, e);
          }
          res.set_content(body, content_type);
          return;
        }
        if (fd >= 0 && peer_closed(fd)) break;
      }
      rec.disconnected = true;
      res.status = 499;  // nobody reads it (nginx's "client closed request", for the log)
      res.set_content(error_body(flavor, ApiError(499, "the client closed the connection")), content_type);
    } catch (const std::exception& e) {
      log_warn("answering a request failed: ", e.what());
      rec.error = e.what();
      res.status = 500;
      res.set_content(error_body(flavor, ApiError(500, cat("internal error: ", e.what()))), "application/json");
    }
    job.gen->cancel();
  }

  // Runs a streamed response on the connection's thread: writes what the writer makes of each
  // batch, and polls the socket between batches so a client that left cancels its sequence.
  static bool pump(Job& job, httplib::DataSink& sink, AccessRecord& rec) {
    auto write = [&](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
    try {
      if (write(job.writer->begin())) {
        Clock::time_point last_bytes = Clock::now();
        for (;;) {
          GenBatch b = job.gen->next(std::chrono::milliseconds(20));
          const std::string bytes = job.writer->on_batch(b);
          if (!write(bytes)) break;
          if (!bytes.empty()) {
            last_bytes = Clock::now();
          } else if (!b.done) {  // silence (a long prefill): the writer may send a keep-alive
            const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_bytes);
            const std::string ping = job.writer->keepalive(silent);
            if (!write(ping)) break;
            if (!ping.empty()) last_bytes = Clock::now();
          }
          if (b.done) {
            rec.outcome = b.outcome;
            sink.done();
            return true;
          }
          if (!sink.is_writable()) break;
        }
      }
      rec.disconnected = true;
    } catch (const std::exception& e) {  // never let an exception reach httplib's worker
      log_warn("streaming a response failed: ", e.what());
      rec.error = e.what();
    }
    job.gen->cancel();
    return false;
  }

  void log_request(const httplib::Request& req, const httplib::Response& res) {
    std::shared_ptr<AccessRecord> rec;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (auto it = records.find(&req); it != records.end()) {
        rec = std::move(it->second);
        records.erase(it);
      }
    }
    if (!rec) rec = std::make_shared<AccessRecord>();
    if (rec->start != Clock::time_point{}) rec->seconds = std::chrono::duration<double>(Clock::now() - rec->start).count();
    rec->method = req.method;
    rec->path = req.path;
    rec->remote = req.remote_addr + ":" + std::to_string(req.remote_port);
    rec->status = res.status;
    rec->bytes_in = req.body.size();
    metrics.record_http(route_label(req.path), res.status, rec->seconds);
    write_access_log(*rec);
  }

  void routes();
};

void HttpServer::Impl::routes() {
  svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response&) {
    auto rec = std::make_shared<AccessRecord>();  // fresh, even if a stale one sits at &req
    rec->start = Clock::now();
    std::lock_guard<std::mutex> lk(mu);
    records[&req] = std::move(rec);
    return httplib::Server::HandlerResponse::Unhandled;
  });
  svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) { log_request(req, res); });
  svr.set_exception_handler([this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, flavor_of(req.path), ApiError(500, "internal error: " + what), record_of(req).get());
  });
  // Unknown routes, wrong methods, oversized bodies: an error body in the API's shape.
  svr.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    int status = res.status;
    std::string msg = cat("HTTP ", status);
    if (status == 404) {
      bool other_method = false;
      for (const auto& r : kRoutes) other_method = other_method || req.path == r.path;
      if (other_method) {
        status = 405;
        msg = cat("method ", req.method, " is not allowed on ", req.path);
      } else {
        msg = cat("no route ", req.method, " ", req.path);
      }
    } else if (status == 413) {
      msg = cat("the request body is larger than ", opts.max_body_bytes, " bytes");
    } else if (status == 400) {
      msg = "malformed HTTP request";
    }
    send_error(res, flavor_of(req.path), ApiError(status, msg), record_of(req).get());
    return httplib::Server::HandlerResponse::Handled;
  }));
  if (opts.cors) {
    svr.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
    svr.Options(".*", [](const httplib::Request&, httplib::Response& res) {
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      res.set_header("Access-Control-Allow-Headers",
                     "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, "
                     "anthropic-dangerous-direct-browser-access, x-stainless-os, x-stainless-lang, "
                     "x-stainless-package-version, x-stainless-runtime, x-stainless-runtime-version, "
                     "x-stainless-arch, x-stainless-retry-count, x-stainless-timeout");
      res.set_header("Access-Control-Max-Age", "86400");
    });
  }

  svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    Service* s = svc.load();
    const char* state = draining ? "shutting_down" : s ? "ok" : "loading";
    res.status = draining || !s ? 503 : 200;
    ojson body = {{"status", state}};
    if (s) body["model"] = s->config().model_name;
    res.set_content(dump_json(body), "application/json");
  });
  svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    Metrics::EngineView v;
    Service* s = svc.load();
    v.draining = draining;
    if (s) {
      v.ready = true;
      v.stats = s->scheduler().stats();
      v.ctx_size = s->ctx_size();
    }
    res.set_content(metrics.render(v), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    const bool anthropic = req.has_header("anthropic-version");
    api(req, res, [anthropic](Service& s, const RequestInfo&) { return openai_models(s, anthropic); });
  });
  svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    const bool anthropic = req.has_header("anthropic-version");
    api(req, res, [&id, anthropic](Service& s, const RequestInfo&) { return openai_model(s, id, anthropic); });
  });
  auto post = [this](const char* path, Reply (*fn)(Service&, const std::string&, const RequestInfo&)) {
    svr.Post(path, [this, fn](const httplib::Request& req, httplib::Response& res) {
      api(req, res, [&](Service& s, const RequestInfo& info) { return fn(s, req.body, info); });
    });
  };
  post("/v1/chat/completions", openai_chat_completions);
  post("/v1/completions", openai_completions);
  post("/v1/messages", anthropic_messages);
  post("/v1/messages/count_tokens", [](Service& s, const std::string& b, const RequestInfo&) { return anthropic_count_tokens(s, b); });
  post("/tokenize", [](Service& s, const std::string& b, const RequestInfo&) { return tokenize_endpoint(s, b); });
  post("/detokenize", [](Service& s, const std::string& b, const RequestInfo&) { return detokenize_endpoint(s, b); });
  post("/v1/responses", openai_responses);
  svr.Get(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    api(req, res, [&id](Service& s, const RequestInfo&) { return get_response(s, id); });
  });
  svr.Delete(R"(/v1/responses/([^/]+))", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    api(req, res, [&id](Service& s, const RequestInfo&) { return delete_response(s, id); });
  });
}

HttpServer::HttpServer(HttpOptions opts, Metrics& metrics) : impl_(std::make_unique<Impl>(std::move(opts), metrics)) {}

HttpServer::~HttpServer() { shutdown(std::chrono::milliseconds(0)); }

int HttpServer::start() {
  Impl& m = *impl_;
  const size_t threads = m.opts.threads > 0 ? static_cast<size_t>(m.opts.threads) : 64;
  m.svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  m.svr.set_payload_max_length(m.opts.max_body_bytes);
  m.svr.set_keep_alive_max_count(1000);
  m.svr.set_tcp_nodelay(true);
  // cpp-httplib's default is SO_REUSEPORT, which lets a second server share a port in use;
  // SO_REUSEADDR alone still allows a quick restart but refuses a taken port.
  m.svr.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  m.routes();
  int port = m.opts.port;
  if (port == 0) {
    port = m.svr.bind_to_any_port(m.opts.host);
    HS_CHECK(port > 0, "cannot bind ", m.opts.host, " to a free port");
  } else {
    HS_CHECK(m.svr.bind_to_port(m.opts.host, port), "cannot bind ", m.opts.host, ":", port,
             " (in use, or not an address of this machine)");
  }
  m.port = port;
  m.thread = std::thread([&m] {
    m.svr.listen_after_bind();
    m.listen_done = true;
  });
  while (!m.svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  m.started = true;
  return port;
}

void HttpServer::set_service(Service* svc) { impl_->svc = svc; }

void HttpServer::shutdown(std::chrono::milliseconds grace, const std::function<bool()>& abort_now) {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.draining = true;
  m.svr.stop();  // no new connections; the listen thread joins the workers once they are done
  const auto deadline = Clock::now() + grace;
  {
    std::unique_lock<std::mutex> lk(m.mu);
    while (!m.live.empty() && Clock::now() < deadline) {
      lk.unlock();
      const bool abort = abort_now && abort_now();
      lk.lock();
      if (abort) break;
      m.cv.wait_for(lk, std::chrono::milliseconds(50));
    }
    for (auto& [key, gen] : m.live) gen->cancel();  // their streams end with an error event
    m.cv.wait(lk, [&] { return m.live.empty(); });
  }
  // Connections left are idle keep-alive ones (or requests without a generation, which are
  // quick): give them a moment, then close them so the workers return.
  for (int i = 0; i < 20 && !m.listen_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!m.listen_done)
    for (int fd : client_sockets(m.port)) ::shutdown(fd, SHUT_RDWR);
  m.thread.join();
}

}  // namespace hs::server
