#include "server/http_connection.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>

#include <atomic>
#include <cstring>

#include "server/http_response.h"
#include "server/openai_api.h"
#include "util/log.h"

namespace hs::server {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {
// Reads land in the connection's own scratch array and are then appended to buf_: a read must
// never target buf_ itself, whose consume() may move its storage while the read is pending.
constexpr size_t kReadChunk = 16u << 10;
constexpr auto kPollInterval = std::chrono::milliseconds(25);  // keep-alive events, held prefills
constexpr auto kLinger = std::chrono::seconds(2);  // reading what a client still sends before closing
}  // namespace

HttpConnection::HttpConnection(tcp::socket socket, HttpConnectionHost& host)
    : sock_(std::move(socket)),
      host_(host),
      limits_(host.limits()),
      timer_(sock_.get_executor()),
      poll_timer_(sock_.get_executor()),
      wake_pending_(std::make_shared<std::atomic<bool>>(false)) {
  error_code ec;
  const auto ep = sock_.remote_endpoint(ec);
  if (!ec) remote_ = cat(ep.address().to_string(), ":", ep.port());
  sock_.set_option(tcp::no_delay(true), ec);
}

HttpConnection::~HttpConnection() = default;

void HttpConnection::start() {
  asio::post(sock_.get_executor(), [self = shared_from_this()] { self->begin_request(); });
}

void HttpConnection::drain() {
  draining_ = true;
  if (phase_ == Phase::idle || phase_ == Phase::header || phase_ == Phase::body || phase_ == Phase::lingering) close();
}

void HttpConnection::abort() { close(); }

void HttpConnection::post_call(void (HttpConnection::*fn)()) {
  asio::post(sock_.get_executor(), [self = shared_from_this(), fn] { ((*self).*fn)(); });
}

void HttpConnection::begin_in_flight() {
  if (in_flight_) return;
  in_flight_ = true;
  host_.request_began();
}

void HttpConnection::end_in_flight() {
  if (!in_flight_) return;
  in_flight_ = false;
  host_.request_ended();
}

// ---- reading ----

void HttpConnection::begin_request() {
  if (phase_ == Phase::closed) return;
  if (draining_ || host_.draining()) return close();
  reader_.emplace(limits_);
  rec_ = std::make_shared<AccessRecord>();
  rec_->remote = remote_;
  req_.reset();
  head_only_ = false;
  phase_ = Phase::idle;
  set_deadline(limits_.idle_timeout);
  parse();
}

void HttpConnection::parse() {
  for (;;) {
    const auto st = reader_->state();
    if (st != RequestReader::State::header && st != RequestReader::State::body) break;
    const auto data = buf_.data();
    const size_t n = reader_->feed(std::string_view(static_cast<const char*>(data.data()), data.size()));
    buf_.consume(n);
    if (phase_ == Phase::idle && reader_->started()) {
      phase_ = Phase::header;
      rec_->start = Clock::now();
      set_deadline(limits_.header_timeout);
    }
    if (n == 0 && reader_->state() == st) break;  // needs more bytes
  }
  switch (reader_->state()) {
    case RequestReader::State::headed: return on_header();
    case RequestReader::State::done: return dispatch();
    case RequestReader::State::failed: return answer_failure();
    default: return read_more();
  }
}

void HttpConnection::read_more() {
  if (reading_ || phase_ == Phase::closed) return;
  size_t want = kReadChunk;
  if (phase_ == Phase::handling) {
    // Only to notice a client that leaves; pipelined bytes wait in the buffer, up to a header's worth.
    if (buf_.size() >= limits_.max_header_bytes + kReadChunk) return;
  } else if (phase_ == Phase::idle || phase_ == Phase::header) {
    // A header must fit whole in the buffer (the reader fails it past the limit).
    want = std::min(kReadChunk, limits_.max_header_bytes + 1 - std::min(buf_.size(), limits_.max_header_bytes));
  }
  start_read(std::max<size_t>(want, 1));
}

void HttpConnection::start_read(size_t want) {
  reading_ = true;
  sock_.async_read_some(asio::buffer(scratch_.data(), std::min(want, scratch_.size())),
                        [self = shared_from_this()](const error_code& ec, size_t n) { self->on_read(ec, n); });
}

void HttpConnection::on_read(const error_code& ec, size_t n) {
  reading_ = false;
  if (phase_ == Phase::closed) return;
  if (phase_ == Phase::lingering) {  // discarding what the client still sends
    if (ec) return close();
    return start_read(kReadChunk);
  }
  if (ec) {
    if (phase_ == Phase::handling) return peer_gone();
    return close();  // gone between requests or in the middle of one: nobody to answer
  }
  auto room = buf_.prepare(n);
  std::memcpy(room.data(), scratch_.data(), n);
  buf_.commit(n);
  if (phase_ == Phase::handling) return read_more();
  parse();
}

void HttpConnection::on_header() {
  HttpRequest& req = reader_->request();
  rec_->method = req.method;
  rec_->path = req.path;
  head_only_ = req.method == "HEAD";
  if (!req.keep_alive) close_after_ = true;
  if (std::optional<HttpAnswer> now = host_.on_header(req, *rec_)) {
    if (req.has_body) close_after_ = true;  // the body was not read: the connection cannot go on
    phase_ = Phase::handling;
    clear_deadline();
    return respond(std::move(*now));
  }
  begin_in_flight();  // (answers made at the header, /metrics among them, are not counted)
  reader_->allow_body();
  if (reader_->state() == RequestReader::State::body) {
    phase_ = Phase::body;
    set_deadline(limits_.body_timeout);
    if (req.expect_continue) send("HTTP/1.1 100 Continue\r\n\r\n");
  }
  parse();
}

void HttpConnection::dispatch() {
  phase_ = Phase::handling;
  clear_deadline();
  req_ = std::make_shared<HttpRequest>(std::move(reader_->request()));
  rec_->bytes_in = req_->wire_body_bytes;
  if (!req_->keep_alive) close_after_ = true;
  read_more();  // watch for the client leaving
  host_.run_worker([self = shared_from_this(), req = req_, rec = rec_] {
    HttpAnswer ans = self->host_.handle(*req, *rec);
    asio::post(self->sock_.get_executor(), [self, ans = std::move(ans)]() mutable {
      if (self->phase_ == Phase::closed) {  // the client left while the handler ran
        if (ans.job) ans.job->gen->cancel();
        return;
      }
      self->respond(std::move(ans));
    });
  });
}

void HttpConnection::answer_failure() {
  const ReadFailure f = reader_->failure();
  rec_->method = reader_->request().method;
  rec_->path = reader_->request().path;
  if (rec_->start == Clock::time_point{}) rec_->start = Clock::now();
  close_after_ = true;  // the rest of the stream cannot be trusted
  phase_ = Phase::handling;
  clear_deadline();
  respond(host_.on_failure(reader_->request(), f, *rec_));
}

// ---- answering ----

std::string HttpConnection::head(int status, const std::string& content_type,
                                 const std::vector<std::pair<std::string, std::string>>& extra,
                                 std::optional<size_t> length) {
  ResponseHead h;
  h.status = status;
  h.content_type = content_type;
  h.length = length;
  h.close = close_after_ || draining_ || host_.draining();
  if (h.close) close_after_ = true;
  h.http10 = req_ ? req_->version == 10 : reader_ && reader_->request().version == 10;
  for (const auto& kv : host_.common_headers()) h.headers.push_back(kv);
  for (const auto& kv : extra) h.headers.push_back(kv);
  return format_head(h);
}

void HttpConnection::respond(HttpAnswer ans) {
  rec_->status = ans.status;
  if (ans.job) return start_job(std::move(ans));
  std::string bytes = head(ans.status, ans.content_type, ans.headers, ans.body.size());
  if (!head_only_) bytes += ans.body;
  log_request();  // before the last bytes: a client holding the answer finds its log line
  send(std::move(bytes), [this] { finish_request(); });
}

void HttpConnection::start_job(HttpAnswer ans) {
  job_ = std::move(ans.job);
  job_stream_ = ans.stream;
  job_flavor_ = ans.flavor;
  job_content_type_ = ans.content_type;
  job_body_.clear();
  job_done_ = false;
  job_begun_ = false;
  job_key_ = host_.job_started(job_->gen, job_stream_);
  if (gone_) return peer_gone();
  std::weak_ptr<HttpConnection> weak = weak_from_this();
  auto pending = wake_pending_;
  auto ex = sock_.get_executor();
  job_->gen->set_notify([weak, pending, ex] {
    if (pending->exchange(true)) return;
    asio::post(ex, [weak, pending] {
      pending->store(false);
      if (auto self = weak.lock()) self->pump();
    });
  });
  if (job_stream_) {
    std::vector<std::pair<std::string, std::string>> extra = ans.headers;
    extra.emplace_back("Cache-Control", "no-cache");
    extra.emplace_back("X-Accel-Buffering", "no");
    // HTTP/1.0 has no chunked encoding: the end of the stream is the end of the connection.
    job_chunked_ = req_ && req_->version >= 11;
    if (!job_chunked_) close_after_ = true;
    std::string h = head(ans.status, ans.content_type, extra, std::nullopt);
    last_bytes_ = Clock::now();
    return send(std::move(h), [this] { pump(); });
  }
  pump();
}

void HttpConnection::arm_poll() {
  if (poll_armed_ || phase_ == Phase::closed) return;
  poll_armed_ = true;
  poll_timer_.expires_after(kPollInterval);
  poll_timer_.async_wait([self = shared_from_this()](const error_code&) {
    self->poll_armed_ = false;
    self->pump();
  });
}

void HttpConnection::pump() {
  if (!job_ || job_done_ || phase_ == Phase::closed) return;
  if (writing_) return;  // the write's completion pumps again
  Job& job = *job_;
  GenBatch b;
  std::string bytes;
  try {
    b = job.gen->next(std::chrono::milliseconds(0));
    if (!job_begun_) {
      job_begun_ = true;
      bytes = job.writer->begin();
    }
    bytes += job.writer->on_batch(b);
    if (job_stream_ && bytes.empty() && !b.done) {  // silence (a long prefill): the writer may send a keep-alive
      const auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last_bytes_);
      bytes = job.writer->keepalive(silent);
    }
  } catch (const std::exception& e) {  // the writer failed: cut the response
    log_warn("answering a request failed: ", e.what());
    rec_->error = e.what();
    job.gen->cancel();
    end_job();
    return close();
  }
  if (job_stream_) {
    if (b.done) {
      rec_->outcome = b.outcome;
      job_done_ = true;
      if (job_chunked_) {
        if (!bytes.empty()) bytes = chunk(bytes);
        bytes += "0\r\n\r\n";
      }
      end_job();
      log_request();
      return send(std::move(bytes), [this] { finish_request(); });
    }
    if (!bytes.empty()) {
      last_bytes_ = Clock::now();
      return send(job_chunked_ ? chunk(bytes) : std::move(bytes), [this] { pump(); });
    }
    return arm_poll();
  }
  // A whole answer: its status is chosen once the generation has ended.
  job_body_ += bytes;
  if (!b.done) return arm_poll();
  rec_->outcome = b.outcome;
  job_done_ = true;
  std::string body = std::move(job_body_);
  job_body_.clear();
  int status = rec_->status;
  std::string type = job_content_type_;
  if (b.outcome.finish == Finish::error || b.outcome.finish == Finish::cancelled) {
    const ApiError e = outcome_error(b.outcome);
    status = e.status();
    rec_->error = e.what();
    body = error_body(job_flavor_, e);
    type = "application/json";
  }
  rec_->status = status;
  end_job();
  std::string out = head(status, type, {}, body.size());
  if (!head_only_) out += body;
  log_request();
  send(std::move(out), [this] { finish_request(); });
}

void HttpConnection::end_job() {
  if (!job_) return;
  job_->gen->set_notify({});
  job_->gen->cancel();  // no-op when it ended; frees the slot when the client went away
  if (job_key_) host_.job_ended(*job_key_, job_stream_);
  job_key_.reset();
  job_.reset();
}

void HttpConnection::peer_gone() {
  gone_ = true;
  if (!job_) {
    if (!rec_) close();  // the answer was written (in part): nothing more to do
    return;              // else the handler is still running: respond() comes here again
  }
  rec_->disconnected = true;
  if (!job_stream_) rec_->status = 499;  // nobody reads it (nginx's "client closed request", for the log)
  end_job();
  host_.request_done(*rec_);
  rec_.reset();
  end_in_flight();
  close();
}

void HttpConnection::log_request() {
  if (rec_) {
    if (rec_->start != Clock::time_point{})
      rec_->seconds = std::chrono::duration<double>(Clock::now() - rec_->start).count();
    host_.request_done(*rec_);
    rec_.reset();
  }
  end_in_flight();
}

void HttpConnection::finish_request() {
  log_request();
  req_.reset();
  if (gone_) return close();
  if (close_after_ || draining_ || host_.draining()) return close_after_response();
  begin_request();
}

// ---- writing ----

void HttpConnection::send(std::string bytes, std::function<void()> then) {
  if (phase_ == Phase::closed) return;
  out_.push_back({std::move(bytes), std::move(then)});
  if (!writing_) do_write();
}

void HttpConnection::do_write() {
  while (!out_.empty() && out_.front().bytes.empty()) {  // nothing to write: just the continuation
    auto then = std::move(out_.front().then);
    out_.pop_front();
    if (then) then();
    if (phase_ == Phase::closed || writing_) return;
  }
  if (out_.empty()) return;
  writing_ = true;
  if (phase_ == Phase::handling) set_deadline(limits_.send_timeout);
  asio::async_write(sock_, asio::buffer(out_.front().bytes), [self = shared_from_this()](const error_code& ec, size_t) {
    self->writing_ = false;
    if (self->phase_ == Phase::closed) return;
    if (ec) return self->phase_ == Phase::handling ? self->peer_gone() : self->close();
    auto then = std::move(self->out_.front().then);
    self->out_.pop_front();
    if (self->phase_ == Phase::handling && self->out_.empty()) self->clear_deadline();
    if (then) then();
    if (!self->writing_ && self->phase_ != Phase::closed) self->do_write();
  });
}

// ---- deadlines and closing ----

void HttpConnection::set_deadline(Clock::duration d) {
  const uint64_t g = ++timer_gen_;
  timer_.expires_after(d);
  timer_.async_wait([self = shared_from_this(), g](const error_code& ec) {
    if (ec || g != self->timer_gen_) return;
    self->on_deadline();
  });
}

void HttpConnection::clear_deadline() {
  ++timer_gen_;
  timer_.cancel();
}

void HttpConnection::on_deadline() {
  switch (phase_) {
    case Phase::header:
      reader_->fail(408, cat("the request header did not arrive within ", limits_.header_timeout.count() / 1000.0, " s"));
      return answer_failure();
    case Phase::body:
      reader_->fail(408, cat("the request body did not arrive within ", limits_.body_timeout.count() / 1000.0, " s"));
      return answer_failure();
    case Phase::handling:  // a write the client does not take
      if (job_) return peer_gone();
      return close();
    default: return close();  // idle keep-alive, or lingering
  }
}

void HttpConnection::close_after_response() {
  // Half-close, then read (and drop) what the client still sends for a moment: closing with
  // unread bytes would reset the connection and could destroy the answer before it is read.
  if (draining_ || host_.draining()) return close();
  error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
  phase_ = Phase::lingering;
  set_deadline(kLinger);
  buf_.consume(buf_.size());
  if (!reading_) start_read(kReadChunk);
}

void HttpConnection::close() {
  if (phase_ == Phase::closed) return;
  const bool had_job = job_ != nullptr;
  phase_ = Phase::closed;
  end_job();
  if (had_job && rec_) {
    rec_->disconnected = true;
    host_.request_done(*rec_);
    rec_.reset();
  }
  end_in_flight();
  clear_deadline();
  poll_timer_.cancel();
  error_code ec;
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.close(ec);  // (out_ stays: a cancelled write may still refer to its bytes)
  host_.connection_closed(this);
}

}  // namespace hs::server
