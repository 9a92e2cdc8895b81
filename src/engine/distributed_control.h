// The control channel of a multi-process pipeline (engine/distributed.h): small versioned
// messages over one TCP connection between rank 0 (which listens on the coordinator port) and
// each other rank. Only control travels here (ops, sequence ids, positions, token ids, the
// handshake and the NCCL unique id); the HC state and the logits go through NCCL.
//
// Wire format, little-endian: a 40-byte header
//   magic "HSPL" | u16 version | u16 op | u32 flags | i64 seq_id | i64 n_tokens | i64 position |
//   u32 payload bytes
// then the payload: n_tokens int32 token ids for Step, bytes for Hello / Welcome / Error / StepPlan.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "util/error.h"

namespace hs::dist {

// 2: Op::StepPlan (engine/distributed_plan.h).
inline constexpr uint16_t kProtocolVersion = 2;
inline constexpr size_t kHeaderBytes = 40;
inline constexpr uint32_t kMaxPayload = 64u << 20;

enum class Op : uint16_t {
  Hello = 1,        // rank -> 0: rank, world, config hash, description (payload: encode_hello)
  Welcome = 2,      // 0 -> rank: handshake accepted (payload: the NCCL unique id)
  Ready = 3,        // rank -> 0: this rank's weights are loaded
  Go = 4,           // 0 -> rank: every rank is ready; create the NCCL communicator
  Step = 5,         // 0 -> rank: run n_tokens tokens of sequence seq_id at `position`
  NewSequence = 6,  // 0 -> rank: create (or replace) a sequence's state
  Reset = 7,        // 0 -> rank: zero a sequence's state
  Release = 8,      // 0 -> rank: drop a sequence's state
  Shutdown = 9,     // 0 -> rank: finish and exit 0
  Error = 10,       // either way: the sender failed (payload: the message); the receiver stops
  StepPlan = 11,    // 0 -> rank: one engine step over many sequences (payload: encode_step_plan)
};
const char* op_name(Op op);

inline constexpr uint32_t kFlagAllPositions = 1;  // Step: logits of every position, not only the last

struct Message {
  Op op = Op::Step;
  uint32_t flags = 0;
  int64_t seq_id = 0;
  int64_t n_tokens = 0;
  int64_t position = 0;
  std::vector<int32_t> tokens;  // Step: n_tokens ids
  std::string payload;          // Hello / Welcome / Error
  bool operator==(const Message&) const = default;
};

struct Header {
  uint16_t version = 0;
  Op op = Op::Step;
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

// Rank 0's listening socket (all IPv4 interfaces, the coordinator's port).
class Listener {
 public:
  explicit Listener(int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;
  int port() const { return port_; }
  // The next connection, or throws when none arrives within timeout_s.
  Connection accept(double timeout_s);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Waits until one of the connections has something to read; returns its index, or -1 after
// timeout_ms (-1: forever). Closed connections are skipped.
int wait_readable(const std::vector<Connection*>& conns, int timeout_ms);

}  // namespace hs::dist
