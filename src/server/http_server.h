// The HTTP front end, event-driven on Boost.Asio (server/http_connection.h): routes of both
// APIs, the API key (checked before the body is read), CORS, /health, /metrics, the access
// log, request limits and deadlines, streaming of generations with disconnect detection, and
// the graceful shutdown sequence. It serves from start() on; until set_service() the API
// answers 503 (loading) so that /health can report the model load.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/http_limits.h"
#include "server/metrics.h"
#include "server/service.h"

namespace hs::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (start() returns it)
  std::optional<std::string> api_key;  // Bearer token or x-api-key on /v1/*, /tokenize, /detokenize
  bool cors = false;                   // Access-Control-Allow-Origin: * and preflight answers
  int threads = 0;                     // worker threads running the handlers (parsing, tokenizing); 0: 4
  int io_threads = 0;                  // event-loop threads (reads, writes, streams); 0: 2
  int listen_backlog = 4096;           // pending connections the kernel queues (capped by net.core.somaxconn)
  HttpLimits limits;
};

class HttpServer {
 public:
  HttpServer(HttpOptions opts, Metrics& metrics);
  ~HttpServer();  // shuts down (no grace) if still running
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts serving on a background thread; returns the port. hs::Error when the
  // address cannot be bound.
  int start();
  // Makes the API live. `svc` must stay valid until shutdown() returns.
  void set_service(Service* svc);
  // Stops accepting; requests arriving now get 503. Running generations get `grace` to
  // finish (their streams end normally), then are cancelled (their streams end with an error
  // event); `abort_now` is polled and cuts the grace short. Returns when every handler is done.
  void shutdown(std::chrono::milliseconds grace, const std::function<bool()>& abort_now = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs::server
