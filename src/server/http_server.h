// The HTTP front end (cpp-httplib): routes of both APIs, API key check, CORS, /health,
// /metrics, the access log, streaming of generations with disconnect detection, and the
// graceful shutdown sequence. It serves from start() on; until set_service() the API answers
// 503 (loading) so that /health can report the model load.
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "server/metrics.h"
#include "server/service.h"

namespace hs::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                     // 0: any free port (start() returns it)
  std::optional<std::string> api_key;  // Bearer token or x-api-key on /v1/*, /tokenize, /detokenize
  bool cors = false;                   // Access-Control-Allow-Origin: * and preflight answers
  int threads = 0;                     // HTTP worker threads (each open stream holds one); 0: auto
  size_t max_body_bytes = 64u << 20;
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
