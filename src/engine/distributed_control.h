// The control channel of a multi-process pipeline (engine/distributed.h): small versioned
// messages over one TCP connection between rank 0 (which listens on the coordinator port) and
// each other rank: the handshake, the NCCL unique id, one step plan per engine step
// (engine/distributed_plan.h). Between GPU ranks the HC state and the logits go through NCCL;
// between CPU ranks they are State / Outputs messages (State over a data connection from each
// rank to the next, Outputs from the last rank to rank 0 over its control connection).
//
// Wire format, little-endian: a 40-byte header
//   magic "HSPL" | u16 version | u16 op | u32 flags | i64 seq_id | i64 n_tokens | i64 position |
//   u32 payload bytes
// then the payload's bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace hs::dist {

// 2: Op::StepPlan (engine/distributed_plan.h). 3: the step plan is the only step (the
// one-sequence ops are gone), its state operations in order; State / Outputs; Hello's data port.
inline constexpr uint16_t kProtocolVersion = 3;
inline constexpr size_t kHeaderBytes = 40;
inline constexpr uint32_t kMaxPayload = 64u << 20;

enum class Op : uint16_t {
  Hello = 1,        // rank -> 0: rank, world, config hash, description (payload: encode_hello)
  Welcome = 2,      // 0 -> rank: handshake accepted (payload: the NCCL unique id)
  Ready = 3,        // rank -> 0: this rank's weights are loaded
  Go = 4,           // 0 -> rank: every rank is ready; create the NCCL communicator
  // (5..8: protocol 2's one-sequence step, new_sequence, reset, release)
  Shutdown = 9,     // 0 -> rank: finish and exit 0
  Error = 10,       // either way: the sender failed (payload: the message); the receiver stops
  StepPlan = 11,    // 0 -> rank: one engine step over many sequences (payload: encode_step_plan)
  State = 12,       // rank r -> r + 1 (CPU ranks): HC state floats; position = the first float's index
  Outputs = 13,     // last rank -> 0 (CPU ranks): logits floats; position = the first float's index
};
const char* op_name(Op op);

struct Message {
  Op op = Op::Error;
  uint32_t flags = 0;
  int64_t seq_id = 0;
  int64_t n_tokens = 0;
  int64_t position = 0;
  std::string payload;
  bool operator==(const Message&) const = default;
};

struct Header {
  uint16_t version = 0;
  Op op = Op::Error;
  uint32_t flags = 0;
  int64_t seq_id = 0, n_tokens = 0, position = 0;
  uint32_t payload_bytes = 0;
};

std::vector<uint8_t> encode(const Message& m);
// Throws hs::Error on a bad magic, another protocol version (naming both), an unknown op or
// inconsistent sizes.
Header decode_header(const uint8_t* p);
Message decode(const uint8_t* p, size_t n);  // header + payload, exactly n bytes

// The handshake a rank sends first.
struct Hello {
  int32_t rank = 0, world = 0;
  uint64_t config_hash = 0;
  std::string device;       // "cuda:1"
  std::string host;         // for messages
  std::string description;  // the model and configuration in words
  int32_t data_port = 0;    // CPU ranks > 0: where the previous rank connects to send the HC state
  bool operator==(const Hello&) const = default;
};
std::string encode_hello(const Hello& h);
Hello decode_hello(const std::string& payload);

// The peer closed the connection (exited, was killed, or gave up).
class PeerClosed : public Error {
 public:
  using Error::Error;
};

// "host:port" or "[v6addr]:port"; errors name the value.
struct Endpoint {
  std::string host;
  int port = 0;
};
Endpoint parse_endpoint(const std::string& s, const std::string& what = "--coordinator");

// One TCP connection (blocking I/O, TCP_NODELAY, keep-alive probes so a vanished host is noticed).
class Connection {
 public:
  Connection() = default;
  explicit Connection(int fd);
  ~Connection();
  Connection(Connection&& o) noexcept;
  Connection& operator=(Connection&& o) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to the endpoint, retrying refused connections until timeout_s (the listener
  // may start later).
  static Connection connect(const Endpoint& ep, double timeout_s);

  bool open() const { return fd_ >= 0; }
  std::string peer_host() const;  // the peer's address, numeric
  int fd() const { return fd_; }
  void send(const Message& m);  // throws PeerClosed when the peer is gone
  Message recv();               // blocks for a whole message; PeerClosed on EOF
  // Waits up to timeout_ms (-1: forever) for something to read (a message or EOF).
  bool readable(int timeout_ms) const;
  void close();

 private:
  void read_exact(uint8_t* p, size_t n);
  int fd_ = -1;
};

// A listening socket on all IPv4 interfaces: rank 0's on the coordinator port, a CPU rank's
// for its data connection (port 0: one the system picks; port() tells).
class Listener {
 public:
  explicit Listener(int port, const std::string& what = "the coordinator port");
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  // The next connection, or throws when none arrives within timeout_s.
  Connection accept(double timeout_s);

 private:
  int fd_ = -1;
  int port_ = 0;
  std::string what_;
};

// Waits until one of the connections has something to read; returns its index, or -1 after
// timeout_ms (-1: forever). Closed connections are skipped.
int wait_readable(const std::vector<Connection*>& conns, int timeout_ms);

}  // namespace hs::dist
