// The data path of a multi-process pipeline (DistributedEngine::Impl as a RankLink): the HC state
// rows from rank r to r + 1 and the logits rows from the last rank to rank 0. Between GPU ranks
// NCCL point-to-point on a stream of the rank's own; between CPU ranks TCP: a data connection
// from each rank to the next, and the last rank's control connection for the logits.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "engine/distributed_impl.h"
#include "util/error.h"

#ifdef HS_HAVE_NCCL
#include "kernels/cuda/device_context.h"
#endif

namespace hs {

using dist::Connection;
using dist::Message;
using dist::Op;
using dist::Clock;
using dist::seconds_since;

namespace {

constexpr int64_t kFloatsPerMessage = dist::kMaxPayload / 4;

}  // namespace

// ---- TCP (CPU ranks)

// Rank r connects to rank r + 1's data port (given in the welcome; rank 0 computes its own) and
// accepts rank r - 1's connection. Connecting first cannot deadlock: every listener is open
// before its rank's hello.
void DistributedEngine::Impl::connect_data(const std::string& next) {
  if (d.rank + 1 < d.world) {
    HS_CHECK(!next.empty(), "protocol error: no data address for rank ", d.rank + 1, " in the welcome");
    try {
      data_out = Connection::connect(dist::parse_endpoint(next, "the next rank's data address"), d.timeout_s);
    } catch (const Error& e) {
      fatal(cat("cannot connect to rank ", d.rank + 1, "'s data port ", next, ": ", e.what()));
    }
  }
  if (d.rank > 0) {
    try {
      data_in = data_listener->accept(d.timeout_s);
    } catch (const Error& e) {
      fatal(cat("rank ", d.rank - 1, " did not connect its data path: ", e.what()));
    }
    data_listener.reset();
  }
}

Message DistributedEngine::Impl::wait_message(Connection& c, const std::string& from) {
  const auto t0 = Clock::now();
  for (;;) {
    std::vector<Connection*> cs{&c};
    for (auto& p : peers) cs.push_back(&p == &c || !p.open() ? nullptr : &p);
    const int i = dist::wait_readable(cs, 100);
    if (i == 0) {
      Message m;
      try {
        m = c.recv();
      } catch (const dist::PeerClosed&) {
        c.close();
        fatal(cat(from, " closed its connection: the process exited or was killed"));
      } catch (const Error& e) {
        fatal(cat("connection to ", from, ": ", e.what()));
      }
      if (m.op == Op::Error) fatal(cat(from, " failed: ", m.payload));
      return m;
    }
    if (i > 0) on_unexpected(static_cast<size_t>(i - 1));
    if (seconds_since(t0) > d.timeout_s)
      fatal(cat("nothing from ", from, " within ", d.timeout_s, " s (a peer hangs? see --dist-timeout)"));
  }
}

void DistributedEngine::Impl::send_floats(Connection& c, Op op, const float* host, int64_t count,
                                          const std::string& to) {
  for (int64_t at = 0; at < count; at += kFloatsPerMessage) {
    const int64_t k = std::min(kFloatsPerMessage, count - at);
    Message m;
    m.op = op;
    m.position = at;
    m.n_tokens = count;
    m.payload.assign(reinterpret_cast<const char*>(host + at), static_cast<size_t>(k) * 4);
    try {
      c.send(m);
    } catch (const Error& e) {
      fatal(cat("cannot send the ", dist::op_name(op), " to ", to, ": ", e.what()));
    }
  }
}

void DistributedEngine::Impl::recv_floats(Connection& c, Op op, float* host, int64_t count, const std::string& from) {
  for (int64_t at = 0; at < count;) {
    const Message m = wait_message(c, from);
    const int64_t k = static_cast<int64_t>(m.payload.size() / 4);
    if (m.op != op || m.position != at || m.n_tokens != count || k == 0 || at + k > count)
      fatal(cat("protocol error: expected ", dist::op_name(op), " floats ", at, ".. of ", count, " from ", from,
                ", got '", dist::op_name(m.op), "' (", k, " floats at ", m.position, " of ", m.n_tokens, ")"));
    std::memcpy(host + at, m.payload.data(), static_cast<size_t>(k) * 4);
    at += k;
  }
}

// ---- the RankLink

void DistributedEngine::Impl::send_state(Ops& ops, const float* x, int64_t count) {
  require_up("step");
  const std::string to = cat("rank ", d.rank + 1);
#ifdef HS_HAVE_NCCL
  if (gpu()) return nccl_send(ops, x, count, d.rank + 1, cat("sending the HC state to ", to));
#endif
  staging.resize(static_cast<size_t>(count));
  ops.download(staging.data(), x, count);
  send_floats(data_out, Op::State, staging.data(), count, to);
}

void DistributedEngine::Impl::recv_state(Ops& ops, float* x, int64_t count) {
  require_up("step");
  const std::string from = cat("rank ", d.rank - 1);
#ifdef HS_HAVE_NCCL
  if (gpu()) return nccl_recv(x, count, d.rank - 1, cat("receiving the HC state from ", from));
#endif
  staging.resize(static_cast<size_t>(count));
  recv_floats(data_in, Op::State, staging.data(), count, from);
  ops.upload(x, staging.data(), count);
}

void DistributedEngine::Impl::send_outputs(Ops& ops, const float* x, int64_t count) {
  require_up("step");
#ifdef HS_HAVE_NCCL
  if (gpu()) return nccl_send(ops, x, count, 0, "sending the logits to rank 0");
#endif
  staging.resize(static_cast<size_t>(count));
  ops.download(staging.data(), x, count);
  send_floats(peers[0], Op::Outputs, staging.data(), count, "rank 0");
}

void DistributedEngine::Impl::recv_outputs(Ops& ops, float* x, int64_t count) {
  require_up("step");
  const int last = d.world - 1;
#ifdef HS_HAVE_NCCL
  if (gpu()) return nccl_recv(x, count, last, cat("receiving the logits from rank ", last));
#endif
  staging.resize(static_cast<size_t>(count));
  recv_floats(peers[static_cast<size_t>(last)], Op::Outputs, staging.data(), count, who(last));
  ops.upload(x, staging.data(), count);
}

// ---- NCCL (GPU ranks)

#ifdef HS_HAVE_NCCL

void DistributedEngine::Impl::check_nccl(ncclResult_t r, const std::string& what) {
  if (r != ncclSuccess && r != ncclInProgress)
    fatal(cat(what, ": NCCL error: ", ncclGetErrorString(r), comm ? cat(" (", ncclGetLastError(comm), ")") : ""));
}

// Waits for the communicator (and, with stream_too, the NCCL work queued on our stream),
// watching the control connections so that a peer that fails or vanishes stops us.
void DistributedEngine::Impl::wait_nccl(const std::string& what, bool stream_too) {
  const auto t0 = Clock::now();
  for (long spin = 0;; ++spin) {
    ncclResult_t st = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &st);
    cudaError_t e = cudaSuccess;
    if (q == ncclSuccess && st == ncclSuccess) {
      if (!stream_too) return;
      e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return;
    }
    const bool failed = q != ncclSuccess || (st != ncclSuccess && st != ncclInProgress) ||
                        (e != cudaSuccess && e != cudaErrorNotReady);
    if (failed) {
      watch(50);  // a peer that died is the better explanation: name it
      check_nccl(q, what);
      check_nccl(st, what);
      fatal(cat(what, ": CUDA error: ", cudaGetErrorString(e)));
    }
    // A short hand-over is caught by spinning; a long one (a peer still computing) sleeps in poll.
    watch(spin < 4000 ? 0 : 1);
    if (seconds_since(t0) > d.timeout_s)
      fatal(cat(what, ": no progress within ", d.timeout_s, " s (a peer hangs? see --dist-timeout)"));
  }
}

void DistributedEngine::Impl::init_nccl(const std::string& id) {
  HS_CHECK(id.size() == sizeof(ncclUniqueId), "protocol error: NCCL unique id of ", id.size(), " bytes, expected ",
           sizeof(ncclUniqueId));
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof uid);
  HS_CUDA_CHECK(cudaSetDevice(device));
  HS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;  // every wait goes through wait_nccl, which watches the peers
  check_nccl(ncclCommInitRankConfig(&comm, d.world, uid, d.rank, &cfg), "creating the NCCL communicator");
  wait_nccl("creating the NCCL communicator", false);
}

// The engine's work on its own stream is fenced (a 4-byte download) before NCCL reads it.
void DistributedEngine::Impl::nccl_send(Ops& ops, const float* p, int64_t n, int peer, const std::string& what) {
  cuda::DeviceGuard guard(device);
  float fence = 0;
  ops.download(&fence, p, 1);
  check_nccl(ncclSend(p, static_cast<size_t>(n), ncclFloat32, peer, comm, stream), what);
  wait_nccl(what, true);
}

void DistributedEngine::Impl::nccl_recv(float* p, int64_t n, int peer, const std::string& what) {
  cuda::DeviceGuard guard(device);
  check_nccl(ncclRecv(p, static_cast<size_t>(n), ncclFloat32, peer, comm, stream), what);
  wait_nccl(what, true);
}

void DistributedEngine::Impl::close_comm() {
  if (comm) {
    const auto t0 = Clock::now();
    ncclResult_t st = ncclCommFinalize(comm);
    while (st == ncclInProgress && seconds_since(t0) < 30) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) break;
    }
    if (st == ncclSuccess)
      ncclCommDestroy(comm);
    else
      ncclCommAbort(comm);
    comm = nullptr;
  }
  if (stream) {
    cudaStreamDestroy(stream);
    stream = nullptr;
  }
}

#endif  // HS_HAVE_NCCL

}  // namespace hs
