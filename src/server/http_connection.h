// One client connection of the HTTP server, event-driven on Boost.Asio: no thread is held
// while it is idle, trickles a header, sends a body or waits for tokens. It reads each request
// with a RequestReader under the limits and deadlines (idle, header, body, send), asks its
// host after the header (routing, the API key: before the body is read), runs the handler on
// the host's worker pool, and writes the answer: a whole body, or a generation pulled on the
// event loop (Generation::set_notify wakes it) and streamed with chunked encoding, or
// answered whole at its end. A read kept open while a request runs notices a client that left
// (its generation is cancelled) and keeps pipelined requests, which are answered in order.
#pragma once
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "server/access_log.h"
#include "server/api_error.h"
#include "server/http_limits.h"
#include "server/reply.h"
#include "server/request_reader.h"

namespace hs::server {

// What the host answers to a request.
struct HttpAnswer {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;  // when job is null
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<Job> job;  // a generation: streamed (stream) or answered whole at its end
  bool stream = false;
  ApiFlavor flavor = ApiFlavor::openai;
};

class HttpConnectionHost {
 public:
  virtual ~HttpConnectionHost() = default;
  virtual const HttpLimits& limits() const = 0;
  // Fields every response carries (CORS).
  virtual const std::vector<std::pair<std::string, std::string>>& common_headers() const = 0;
  // On the event loop, once the header is read: an answer now (errors, OPTIONS, /health,
  // /metrics), or none: read the body, then handle() on a worker thread.
  virtual std::optional<HttpAnswer> on_header(const HttpRequest& req, AccessRecord& rec) = 0;
  virtual HttpAnswer handle(const HttpRequest& req, AccessRecord& rec) = 0;
  // The answer to a request that could not be read, in its API's error shape.
  virtual HttpAnswer on_failure(const HttpRequest& req, const ReadFailure& f, AccessRecord& rec) = 0;
  // Runs `fn` on a worker thread.
  virtual void run_worker(std::function<void()> fn) = 0;
  // A generation is being answered / is over (shutdown waits for them).
  virtual uint64_t job_started(const std::shared_ptr<Generation>& gen, bool stream) = 0;
  virtual void job_ended(uint64_t key, bool stream) = 0;
  // A request was answered (the access log, metrics).
  virtual void request_done(AccessRecord& rec) = 0;
  // A request is in flight from its header to its answer (or its end without one).
  virtual void request_began() = 0;
  virtual void request_ended() = 0;
  virtual bool draining() const = 0;
  virtual void connection_closed(const void* conn) = 0;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  using tcp = boost::asio::ip::tcp;
  HttpConnection(tcp::socket socket, HttpConnectionHost& host);
  ~HttpConnection();
  void start();
  // Shutdown: closes the connection now unless a request is being answered (then after it).
  void drain();
  // Closes at once (the end of the shutdown).
  void abort();
  // Runs a member (drain, abort) on the connection's strand.
  void post_call(void (HttpConnection::*fn)());

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { idle, header, body, handling, lingering, closed };
  struct Out {
    std::string bytes;
    std::function<void()> then;  // after it is written
  };

  void begin_request();
  void parse();
  void read_more();
  void start_read(size_t want);
  void on_read(const boost::system::error_code& ec, size_t n);
  void on_header();
  void dispatch();
  void answer_failure();
  void respond(HttpAnswer ans);
  void start_job(HttpAnswer ans);
  void pump();
  void arm_poll();
  void end_job();
  void log_request();
  void finish_request();
  void peer_gone();
  void begin_in_flight();
  void end_in_flight();
  std::string head(int status, const std::string& content_type, const std::vector<std::pair<std::string, std::string>>& extra,
                   std::optional<size_t> length);
  void send(std::string bytes, std::function<void()> then = {});
  void do_write();
  void set_deadline(Clock::duration d);
  void clear_deadline();
  void on_deadline();
  void close_after_response();
  void close();

  tcp::socket sock_;
  HttpConnectionHost& host_;
  const HttpLimits& limits_;
  boost::asio::steady_timer timer_, poll_timer_;
  uint64_t timer_gen_ = 0;
  boost::beast::flat_buffer buf_;  // received, not yet parsed
  std::array<char, 16384> scratch_;  // what a pending read fills
  std::string remote_;
  Phase phase_ = Phase::idle;
  bool reading_ = false, writing_ = false, poll_armed_ = false;
  bool close_after_ = false, draining_ = false, gone_ = false, in_flight_ = false;
  std::deque<Out> out_;
  std::optional<RequestReader> reader_;
  std::shared_ptr<AccessRecord> rec_;
  std::shared_ptr<HttpRequest> req_;  // the request being answered
  bool head_only_ = false;            // HEAD: no body
  // The generation being answered.
  std::shared_ptr<Job> job_;
  std::optional<uint64_t> job_key_;
  bool job_stream_ = false, job_chunked_ = false, job_done_ = false, job_begun_ = false;
  ApiFlavor job_flavor_ = ApiFlavor::openai;
  std::string job_content_type_, job_body_;
  Clock::time_point last_bytes_;
  std::shared_ptr<std::atomic<bool>> wake_pending_;
};

}  // namespace hs::server
