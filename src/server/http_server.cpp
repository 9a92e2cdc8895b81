#include "server/http_server.h"

#include <sys/resource.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "server/access_log.h"
#include "server/anthropic_api.h"
#include "server/api_key.h"
#include "server/http_connection.h"
#include "server/json_util.h"
#include "server/openai_api.h"
#include "server/responses_api.h"
#include "util/log.h"

namespace hs::server {

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr const char* kForceOutputHeader = "X-HS-Test-Force-Output";
constexpr const char* kFailAfterHeader = "X-HS-Test-Engine-Fail-After";
constexpr const char* kHoldPrefillHeader = "X-HS-Test-Hold-Prefill-Ms";

using PostFn = Reply (*)(Service&, const std::string&, const RequestInfo&);
struct PostRoute {
  const char* path;
  PostFn fn;
};
const PostRoute kPostRoutes[] = {
    {"/v1/chat/completions", openai_chat_completions},
    {"/v1/completions", openai_completions},
    {"/v1/messages", anthropic_messages},
    {"/v1/messages/count_tokens", [](Service& s, const std::string& b, const RequestInfo&) { return anthropic_count_tokens(s, b); }},
    {"/tokenize", [](Service& s, const std::string& b, const RequestInfo&) { return tokenize_endpoint(s, b); }},
    {"/detokenize", [](Service& s, const std::string& b, const RequestInfo&) { return detokenize_endpoint(s, b); }},
    {"/v1/responses", openai_responses},
};
constexpr const char* kGetRoutes[] = {"/health", "/metrics", "/v1/models"};

// What a method and path ask for.
struct Route {
  enum Kind { none, health, metrics, models, model, post, get_response, delete_response } kind = none;
  PostFn fn = nullptr;
  std::string id;  // model / response id
};

Route match(const std::string& method, const std::string& path) {
  Route r;
  const bool get = method == "GET" || method == "HEAD";
  auto tail = [&](const char* prefix) -> std::optional<std::string> {
    const size_t n = std::char_traits<char>::length(prefix);
    if (path.size() > n && path.compare(0, n, prefix) == 0) return path.substr(n);
    return std::nullopt;
  };
  if (get && path == "/health") r.kind = Route::health;
  else if (get && path == "/metrics") r.kind = Route::metrics;
  else if (get && path == "/v1/models") r.kind = Route::models;
  else if (auto id = tail("/v1/models/"); get && id) {
    r.kind = Route::model;
    r.id = *id;
  } else if (auto rid = tail("/v1/responses/"); rid && rid->find('/') == std::string::npos && (get || method == "DELETE")) {
    r.kind = get ? Route::get_response : Route::delete_response;
    r.id = *rid;
  } else if (method == "POST") {
    for (const auto& p : kPostRoutes)
      if (path == p.path) {
        r.kind = Route::post;
        r.fn = p.fn;
      }
  }
  return r;
}

// Whether some method serves `path` (then another method is a 405, not a 404).
bool known_path(const std::string& path) {
  for (const auto& p : kPostRoutes)
    if (path == p.path) return true;
  for (const char* p : kGetRoutes)
    if (path == p) return true;
  return path.rfind("/v1/models/", 0) == 0 || path.rfind("/v1/responses/", 0) == 0;
}

// The metrics label of a path: a known route, else "other" (bounded cardinality).
std::string route_label(const std::string& path) {
  for (const auto& p : kPostRoutes)
    if (path == p.path) return p.path;
  for (const char* p : kGetRoutes)
    if (path == p) return p;
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

HttpAnswer error_answer(ApiFlavor flavor, const ApiError& e, AccessRecord& rec) {
  HttpAnswer a;
  a.flavor = flavor;
  a.status = e.status();
  a.body = error_body(flavor, e);
  if (e.status() == 401) a.headers.emplace_back("WWW-Authenticate", "Bearer");
  rec.error = e.what();
  return a;
}

// Many idle and streaming connections need many descriptors: the soft limit goes to the hard one.
void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

}  // namespace

struct HttpServer::Impl final : HttpConnectionHost {
  HttpOptions opts;
  Metrics& metrics;
  std::vector<std::pair<std::string, std::string>> common;
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_pause{ioc};
  std::vector<std::thread> io;
  std::unique_ptr<asio::thread_pool> workers;
  std::atomic<Service*> svc{nullptr};
  std::atomic<bool> draining_{false};
  bool started = false, stopped = false;

  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::shared_ptr<Generation>> live;  // generations being answered
  uint64_t next_live = 0;
  std::unordered_map<const void*, std::weak_ptr<HttpConnection>> conns;

  Impl(HttpOptions o, Metrics& m) : opts(std::move(o)), metrics(m) {
    if (opts.cors) common.emplace_back("Access-Control-Allow-Origin", "*");
  }

  // ---- HttpConnectionHost ----

  const HttpLimits& limits() const override { return opts.limits; }
  const std::vector<std::pair<std::string, std::string>>& common_headers() const override { return common; }
  bool draining() const override { return draining_; }

  std::optional<HttpAnswer> on_header(const HttpRequest& req, AccessRecord& rec) override {
    const ApiFlavor flavor = flavor_of(req.path);
    if (opts.cors && req.method == "OPTIONS") {
      HttpAnswer a;
      a.status = 204;
      a.content_type.clear();
      a.headers = {{"Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS"},
                   {"Access-Control-Allow-Headers",
                    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, "
                    "anthropic-dangerous-direct-browser-access, x-stainless-os, x-stainless-lang, "
                    "x-stainless-package-version, x-stainless-runtime, x-stainless-runtime-version, "
                    "x-stainless-arch, x-stainless-retry-count, x-stainless-timeout"},
                   {"Access-Control-Max-Age", "86400"}};
      return a;
    }
    const Route route = match(req.method, req.path);
    if (route.kind == Route::none) {
      if (known_path(req.path))
        return error_answer(flavor, ApiError(405, cat("method ", req.method, " is not allowed on ", req.path)), rec);
      return error_answer(flavor, ApiError(404, cat("no route ", req.method, " ", req.path)), rec);
    }
    if (opts.api_key && needs_key(req.path)) {
      const std::string key = request_key(req.header_or("Authorization"), req.header_or("x-api-key"));
      if (!same_secret(key, *opts.api_key))
        return error_answer(flavor,
                            ApiError(401,
                                     key.empty() ? "missing API key (Authorization: Bearer KEY or x-api-key: KEY)"
                                                 : "invalid API key",
                                     {}, "invalid_api_key"),
                            rec);
    }
    if (route.kind == Route::health) return health();
    if (route.kind == Route::metrics) return metrics_page();
    if (draining_) return error_answer(flavor, ApiError(503, "the server is shutting down"), rec);
    if (!svc.load()) return error_answer(flavor, ApiError(503, "the model is loading"), rec);
    return std::nullopt;  // read the body, then handle()
  }

  HttpAnswer on_failure(const HttpRequest& req, const ReadFailure& f, AccessRecord& rec) override {
    return error_answer(flavor_of(req.path), ApiError(f.status, f.message), rec);
  }

  HttpAnswer handle(const HttpRequest& req, AccessRecord& rec) override {
    const ApiFlavor flavor = flavor_of(req.path);
    try {
      if (draining_) throw ApiError(503, "the server is shutting down");
      Service* s = svc.load();
      if (!s) throw ApiError(503, "the model is loading");
      RequestInfo info;
      if (s->config().test_hooks) info = test_hooks(req);
      const Route route = match(req.method, req.path);
      Reply r;
      const bool anthropic = req.header("anthropic-version") != nullptr;
      switch (route.kind) {
        case Route::models: r = openai_models(*s, anthropic); break;
        case Route::model: r = openai_model(*s, route.id, anthropic); break;
        case Route::get_response: r = get_response(*s, route.id); break;
        case Route::delete_response: r = delete_response(*s, route.id); break;
        case Route::post: r = route.fn(*s, req.body, info); break;
        default: throw ApiError(404, cat("no route ", req.method, " ", req.path));
      }
      rec.request_id = r.request_id;
      rec.stream = r.stream;
      HttpAnswer a;
      a.flavor = flavor;
      a.status = r.status;
      a.content_type = r.content_type;
      a.body = std::move(r.body);
      a.job = std::move(r.job);
      a.stream = r.stream;
      return a;
    } catch (const ApiError& e) {
      return error_answer(flavor, e, rec);
    } catch (const Error& e) {
      return error_answer(flavor, ApiError(400, e.what()), rec);
    } catch (const std::exception& e) {
      log_warn("internal error on ", req.path, ": ", e.what());
      return error_answer(flavor, ApiError(500, cat("internal error: ", e.what())), rec);
    }
  }

  void run_worker(std::function<void()> fn) override { asio::post(*workers, std::move(fn)); }

  uint64_t job_started(const std::shared_ptr<Generation>& gen, bool stream) override {
    if (stream) metrics.stream_opened();
    std::lock_guard<std::mutex> lk(mu);
    live.emplace(next_live, gen);
    return next_live++;
  }

  void job_ended(uint64_t key, bool stream) override {
    if (stream) metrics.stream_closed();
    std::lock_guard<std::mutex> lk(mu);
    live.erase(key);
    cv.notify_all();
  }

  void request_done(AccessRecord& rec) override {
    metrics.record_http(route_label(rec.path), rec.status, rec.seconds);
    write_access_log(rec);
  }

  void request_began() override { metrics.http_request_began(); }
  void request_ended() override { metrics.http_request_ended(); }

  void connection_closed(const void* conn) override {
    metrics.http_connection_closed();
    std::lock_guard<std::mutex> lk(mu);
    conns.erase(conn);
    cv.notify_all();
  }

  // ---- the fixed pages ----

  HttpAnswer health() {
    Service* s = svc.load();
    HttpAnswer a;
    a.status = draining_ || !s ? 503 : 200;
    ojson body = {{"status", draining_ ? "shutting_down" : s ? "ok" : "loading"}};
    if (s) body["model"] = s->config().model_name;
    a.body = dump_json(body);
    return a;
  }

  HttpAnswer metrics_page() {
    Metrics::EngineView v;
    Service* s = svc.load();
    v.draining = draining_;
    if (s) {
      v.ready = true;
      v.stats = s->scheduler().stats();
      v.ctx_size = s->ctx_size();
    }
    HttpAnswer a;
    a.content_type = "text/plain; version=0.0.4; charset=utf-8";
    a.body = metrics.render(v);
    return a;
  }

  // The X-HS-Test-* headers (serve --test-hooks): 400 when malformed.
  static RequestInfo test_hooks(const HttpRequest& req) {
    RequestInfo info;
    if (const std::string* h = req.header(kForceOutputHeader)) {
      const ojson v = ojson::parse(*h, nullptr, false);
      if (!v.is_string()) throw ApiError(400, cat(kForceOutputHeader, " must be a JSON string"));
      info.force_output = v.get<std::string>();
    }
    if (const std::string* h = req.header(kFailAfterHeader)) {
      const ojson v = ojson::parse(*h, nullptr, false);
      if (!v.is_number_unsigned()) throw ApiError(400, cat(kFailAfterHeader, " must be an integer >= 0"));
      info.fail_after = static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX));
    }
    if (const std::string* h = req.header(kHoldPrefillHeader)) {
      const ojson v = ojson::parse(*h, nullptr, false);
      if (!v.is_number_unsigned() || v.get<uint64_t>() > 600000)
        throw ApiError(400, cat(kHoldPrefillHeader, " must be an integer from 0 to 600000"));
      info.hold_prefill_ms = v.get<int64_t>();
    }
    return info;
  }

  // ---- accepting ----

  void accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](const boost::system::error_code& ec, tcp::socket sock) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors (EMFILE/ENFILE) and the like: wait a moment instead of spinning.
        log_warn("accepting a connection failed: ", ec.message());
        accept_pause.expires_after(std::chrono::milliseconds(50));
        accept_pause.async_wait([this](const boost::system::error_code& e) {
          if (!e) accept();
        });
        return;
      }
      auto conn = std::make_shared<HttpConnection>(std::move(sock), *this);
      {
        std::lock_guard<std::mutex> lk(mu);
        conns.emplace(conn.get(), conn);
      }
      metrics.http_connection_opened();
      conn->start();
      accept();
    });
  }

  // Runs fn on each open connection's strand.
  void each_connection(void (HttpConnection::*fn)()) {
    std::vector<std::shared_ptr<HttpConnection>> all;
    {
      std::lock_guard<std::mutex> lk(mu);
      for (auto& [k, w] : conns)
        if (auto c = w.lock()) all.push_back(std::move(c));
    }
    for (auto& c : all) c->post_call(fn);
  }
};

HttpServer::HttpServer(HttpOptions opts, Metrics& metrics) : impl_(std::make_unique<Impl>(std::move(opts), metrics)) {}

HttpServer::~HttpServer() { shutdown(std::chrono::milliseconds(0)); }

int HttpServer::start() {
  Impl& m = *impl_;
  raise_fd_limit();
  boost::system::error_code ec;
  tcp::resolver resolver(m.ioc);
  const auto found = resolver.resolve(m.opts.host, std::to_string(m.opts.port),
                                      tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  HS_CHECK(!ec && !found.empty(), "cannot bind ", m.opts.host, ":", m.opts.port, ": ", ec ? ec.message() : "no address");
  const tcp::endpoint ep = found.begin()->endpoint();
  m.acceptor.open(ep.protocol(), ec);
  // SO_REUSEADDR allows a quick restart but refuses a port another socket listens on.
  if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  HS_CHECK(!ec, "cannot bind ", m.opts.host, ":", m.opts.port, " (in use, or not an address of this machine): ", ec.message());
  m.acceptor.listen(std::max(1, m.opts.listen_backlog), ec);
  HS_CHECK(!ec, "cannot listen on ", m.opts.host, ":", m.opts.port, ": ", ec.message());
  const int port = m.acceptor.local_endpoint().port();
  m.workers = std::make_unique<asio::thread_pool>(static_cast<size_t>(m.opts.threads > 0 ? m.opts.threads : 4));
  m.work.emplace(m.ioc.get_executor());
  m.accept();
  const int n_io = m.opts.io_threads > 0 ? m.opts.io_threads : 2;
  for (int i = 0; i < n_io; ++i) m.io.emplace_back([&m] { m.ioc.run(); });
  m.started = true;
  return port;
}

void HttpServer::set_service(Service* svc) { impl_->svc = svc; }

void HttpServer::shutdown(std::chrono::milliseconds grace, const std::function<bool()>& abort_now) {
  Impl& m = *impl_;
  if (!m.started || m.stopped) return;
  m.stopped = true;
  m.draining_ = true;
  // No new connections; idle ones close now, the others after their answer.
  asio::post(m.ioc, [&m] {
    boost::system::error_code ec;
    m.acceptor.close(ec);
    m.accept_pause.cancel();
  });
  m.each_connection(&HttpConnection::drain);
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
    // The last answers are written; a client that does not read its answer is cut off after
    // 2 s (closing its connection ends its generation's job).
    m.cv.wait_for(lk, std::chrono::seconds(2), [&] { return m.live.empty() && m.conns.empty(); });
  }
  m.each_connection(&HttpConnection::abort);
  m.workers->join();
  {
    std::unique_lock<std::mutex> lk(m.mu);
    m.cv.wait_for(lk, std::chrono::seconds(1), [&] { return m.live.empty() && m.conns.empty(); });
    for (auto& [key, gen] : m.live) gen->cancel();
  }
  m.work.reset();
  m.ioc.stop();
  for (auto& t : m.io) t.join();
}

}  // namespace hs::server
