#include "engine/distributed_control.h"
#include "engine/distributed_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace hs::dist {

namespace {

constexpr uint8_t kMagic[4] = {'H', 'S', 'P', 'L'};

void put16(std::vector<uint8_t>& b, uint16_t v) { wire::put(b, v, 2); }
void put32(std::vector<uint8_t>& b, uint32_t v) { wire::put(b, v, 4); }
void put64(std::vector<uint8_t>& b, uint64_t v) { wire::put(b, v, 8); }
using wire::get;

std::string sys_error() { return std::strerror(errno); }

void set_socket_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  // A host that vanishes without closing (cable, power) is noticed after about 20 s.
  int idle = 10, interval = 5, count = 2;
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::Hello: return "hello";
    case Op::Welcome: return "welcome";
    case Op::Ready: return "ready";
    case Op::Go: return "go";
    case Op::Shutdown: return "shutdown";
    case Op::Error: return "error";
    case Op::StepPlan: return "step_plan";
    case Op::State: return "state";
    case Op::Outputs: return "outputs";
  }
  return "?";
}

std::vector<uint8_t> encode(const Message& m) {
  const size_t payload = m.payload.size();
  HS_CHECK(payload <= kMaxPayload, "control message: payload of ", payload, " bytes is over the limit of ",
           kMaxPayload);
  std::vector<uint8_t> b(kMagic, kMagic + 4);
  b.reserve(kHeaderBytes + payload);
  put16(b, kProtocolVersion);
  put16(b, static_cast<uint16_t>(m.op));
  put32(b, m.flags);
  put64(b, static_cast<uint64_t>(m.seq_id));
  put64(b, static_cast<uint64_t>(m.n_tokens));
  put64(b, static_cast<uint64_t>(m.position));
  put32(b, static_cast<uint32_t>(payload));
  b.insert(b.end(), m.payload.begin(), m.payload.end());
  return b;
}

Header decode_header(const uint8_t* p) {
  HS_CHECK(std::memcmp(p, kMagic, 4) == 0, "control message: bad magic (is the peer a hyperstream rank?)");
  Header h;
  h.version = static_cast<uint16_t>(get(p + 4, 2));
  HS_CHECK(h.version == kProtocolVersion, "control protocol version ", h.version, " from the peer, this build speaks "
           "version ", kProtocolVersion, " (run the same hyperstream build on every rank)");
  const uint16_t op = static_cast<uint16_t>(get(p + 6, 2));
  HS_CHECK((op >= static_cast<uint16_t>(Op::Hello) && op <= static_cast<uint16_t>(Op::Go)) ||
               (op >= static_cast<uint16_t>(Op::Shutdown) && op <= static_cast<uint16_t>(Op::Outputs)),
           "control message: unknown op ", op);
  h.op = static_cast<Op>(op);
  h.flags = static_cast<uint32_t>(get(p + 8, 4));
  h.seq_id = static_cast<int64_t>(get(p + 12, 8));
  h.n_tokens = static_cast<int64_t>(get(p + 20, 8));
  h.position = static_cast<int64_t>(get(p + 28, 8));
  h.payload_bytes = static_cast<uint32_t>(get(p + 36, 4));
  HS_CHECK(h.payload_bytes <= kMaxPayload, "control message: payload of ", h.payload_bytes,
           " bytes is over the limit of ", kMaxPayload);
  HS_CHECK(h.n_tokens >= 0 && h.position >= 0, "control message: negative n_tokens or position");
  HS_CHECK((h.op != Op::State && h.op != Op::Outputs) || h.payload_bytes % 4 == 0, "control message: ",
           op_name(h.op), " of ", h.payload_bytes, " bytes, not whole floats");
  return h;
}

Message decode(const uint8_t* p, size_t n) {
  HS_CHECK(n >= kHeaderBytes, "control message: ", n, " bytes is shorter than the header");
  const Header h = decode_header(p);
  HS_CHECK(n == kHeaderBytes + h.payload_bytes, "control message: ", n, " bytes, the header says ",
           kHeaderBytes + h.payload_bytes);
  Message m;
  m.op = h.op;
  m.flags = h.flags;
  m.seq_id = h.seq_id;
  m.n_tokens = h.n_tokens;
  m.position = h.position;
  m.payload.assign(reinterpret_cast<const char*>(p + kHeaderBytes), h.payload_bytes);
  return m;
}

std::string encode_hello(const Hello& h) {
  std::vector<uint8_t> b;
  put32(b, static_cast<uint32_t>(h.rank));
  put32(b, static_cast<uint32_t>(h.world));
  put64(b, h.config_hash);
  for (const std::string* s : {&h.device, &h.host, &h.description}) {
    put32(b, static_cast<uint32_t>(s->size()));
    b.insert(b.end(), s->begin(), s->end());
  }
  put32(b, static_cast<uint32_t>(h.data_port));
  return std::string(b.begin(), b.end());
}

Hello decode_hello(const std::string& payload) {
  wire::Reader r{payload, "hello"};
  Hello h;
  h.rank = static_cast<int32_t>(r.num(4));
  h.world = static_cast<int32_t>(r.num(4));
  h.config_hash = r.num(8);
  h.device = r.str();
  h.host = r.str();
  h.description = r.str();
  h.data_port = static_cast<int32_t>(r.num(4));
  r.done();
  return h;
}

Endpoint parse_endpoint(const std::string& s, const std::string& what) {
  Endpoint ep;
  size_t colon = s.rfind(':');
  HS_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < s.size(), what, " '", s,
           "': expected host:port (e.g. 10.0.0.1:29500)");
  ep.host = s.substr(0, colon);
  if (ep.host.size() >= 2 && ep.host.front() == '[' && ep.host.back() == ']')
    ep.host = ep.host.substr(1, ep.host.size() - 2);
  HS_CHECK(!ep.host.empty() && ep.host.find_first_of(" []") == std::string::npos, what, " '", s,
           "': bad host '", ep.host, "'");
  const std::string port = s.substr(colon + 1);
  HS_CHECK(port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5, what, " '", s,
           "': the port '", port, "' is not a number");
  ep.port = std::stoi(port);
  HS_CHECK(ep.port >= 1 && ep.port <= 65535, what, " '", s, "': port ", ep.port, " is outside 1..65535");
  return ep;
}

// ---- Connection

Connection::Connection(int fd) : fd_(fd) { set_socket_options(fd_); }
Connection::~Connection() { close(); }
Connection::Connection(Connection&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
Connection& Connection::operator=(Connection&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

std::string Connection::peer_host() const {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  char host[NI_MAXHOST] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&a), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) return "?";
  return host;
}

void Connection::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Connection Connection::connect(const Endpoint& ep, double timeout_s) {
  const auto t0 = Clock::now();
  std::string last = "no address";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const int rc = getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &res);
    HS_CHECK(rc == 0, "coordinator ", ep.host, ":", ep.port, ": cannot resolve the host: ", gai_strerror(rc));
    for (addrinfo* a = res; a; a = a->ai_next) {
      const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      // A non-blocking connect bounded by poll, so an unreachable host cannot hang us for minutes.
      const int fl = fcntl(fd, F_GETFL);
      fcntl(fd, F_SETFL, fl | O_NONBLOCK);
      int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int left_ms = std::max(1, static_cast<int>((timeout_s - seconds_since(t0)) * 1000));
        if (poll(&p, 1, std::min(left_ms, 5000)) == 1) {
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = ETIMEDOUT;
        }
      }
      if (err == 0) {
        fcntl(fd, F_SETFL, fl);
        freeaddrinfo(res);
        return Connection(fd);
      }
      last = std::strerror(err);
      ::close(fd);
    }
    freeaddrinfo(res);
    HS_CHECK(seconds_since(t0) < timeout_s, "could not connect to the coordinator ", ep.host, ":", ep.port, " within ",
             timeout_s, " s (is rank 0 running and is the port reachable?): ", last);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void Connection::send(const Message& m) {
  HS_CHECK(fd_ >= 0, "control connection is closed");
  const std::vector<uint8_t> b = encode(m);
  size_t done = 0;
  while (done < b.size()) {
    const ssize_t w = ::send(fd_, b.data() + done, b.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw PeerClosed(cat("control connection lost while sending ", op_name(m.op), ": ", sys_error()));
    done += static_cast<size_t>(w);
  }
}

void Connection::read_exact(uint8_t* p, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::recv(fd_, p + done, n - done, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) throw PeerClosed("the peer closed the control connection");
    if (r < 0) throw PeerClosed(cat("control connection lost: ", sys_error()));
    done += static_cast<size_t>(r);
  }
}

Message Connection::recv() {
  HS_CHECK(fd_ >= 0, "control connection is closed");
  std::vector<uint8_t> b(kHeaderBytes);
  read_exact(b.data(), kHeaderBytes);
  const Header h = decode_header(b.data());
  b.resize(kHeaderBytes + h.payload_bytes);
  read_exact(b.data() + kHeaderBytes, h.payload_bytes);
  return decode(b.data(), b.size());
}

bool Connection::readable(int timeout_ms) const {
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLIN, 0};
  int r;
  do r = poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

int wait_readable(const std::vector<Connection*>& conns, int timeout_ms) {
  std::vector<pollfd> fds;
  std::vector<int> index;
  for (size_t i = 0; i < conns.size(); ++i)
    if (conns[i] && conns[i]->open()) {
      fds.push_back(pollfd{conns[i]->fd(), POLLIN, 0});
      index.push_back(static_cast<int>(i));
    }
  if (fds.empty()) {
    if (timeout_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
    return -1;
  }
  int r;
  do r = poll(fds.data(), fds.size(), timeout_ms);
  while (r < 0 && errno == EINTR);
  if (r <= 0) return -1;
  for (size_t i = 0; i < fds.size(); ++i)
    if (fds[i].revents) return index[i];
  return -1;
}

// ---- Listener

Listener::Listener(int port, const std::string& what) : what_(what) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  HS_CHECK(fd_ >= 0, "cannot create a socket for ", what_, ": ", sys_error());
  int one = 1;
  setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 64) != 0) {
    const std::string e = sys_error();
    ::close(fd_);
    fail("cannot listen on ", what_, " (port ", port, "): ", e);
  }
  socklen_t len = sizeof a;
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = ntohs(a.sin_port);
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

Connection Listener::accept(double timeout_s) {
  pollfd p{fd_, POLLIN, 0};
  int r;
  do r = poll(&p, 1, static_cast<int>(timeout_s * 1000));
  while (r < 0 && errno == EINTR);
  HS_CHECK(r > 0, "no rank connected to ", what_, " (port ", port_, ") within ", timeout_s, " s");
  const int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
  HS_CHECK(fd >= 0, "accept on ", what_, " failed: ", sys_error());
  return Connection(fd);
}

}  // namespace hs::dist
