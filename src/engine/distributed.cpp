#include "engine/distributed.h"

#include "engine/layer_split.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <thread>

#include "engine/distributed_control.h"
#include "util/error.h"

#ifdef HS_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "kernels/cuda/device_context.h"
#endif

namespace hs {

using dist::Connection;
using dist::Hello;
using dist::Message;
using dist::Op;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

[[maybe_unused]] std::string host_name() {  // (used only where NCCL is built in)
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

int cuda_device_id(const std::string& device) {
  HS_CHECK(device.rfind("cuda:", 0) == 0, "--device '", device, "': a pipeline rank needs a cuda:N device (NCCL "
           "carries the HC state between GPUs)");
  const std::string id = device.substr(5);
  HS_CHECK(!id.empty() && id.size() < 4 && id.find_first_not_of("0123456789") == std::string::npos, "--device '",
           device, "': expected cuda:N");
  return std::stoi(id);
}

}  // namespace

void validate(const DistributedOptions& d) {
  HS_CHECK(d.world >= 2, "--world ", d.world, ": a pipeline of processes needs at least 2 ranks (a single process "
           "needs no --rank/--world)");
  HS_CHECK(d.world <= 1024, "--world ", d.world, ": at most 1024 ranks");
  HS_CHECK(d.rank >= 0 && d.rank < d.world, "--rank ", d.rank, " is outside 0..", d.world - 1, " (--world ", d.world,
           ")");
  HS_CHECK(!d.coordinator.empty(), "--rank/--world need --coordinator host:port (rank 0 listens there)");
  (void)dist::parse_endpoint(d.coordinator);
  HS_CHECK(d.timeout_s > 0, "--dist-timeout must be positive");
}

void validate(const DistributedOptions& d, const EngineOptions& opts) {
  validate(d);
  HS_CHECK(opts.devices.empty(), "--devices cannot be used with --rank: each rank runs one shard on its --device");
  (void)cuda_device_id(opts.device);
  HS_CHECK(opts.layer_split.empty() || static_cast<int>(opts.layer_split.size()) == d.world, "--layer-split ",
           join(opts.layer_split), " has ", opts.layer_split.size(), " entries but --world is ", d.world,
           " (one layer count per rank)");
}

// Each rank sees only its own device, so the default is an even split (not free memory).
std::vector<int> rank_layer_split(const std::vector<int>& split, int world, int n_layers) {
  HS_CHECK(split.empty() || static_cast<int>(split.size()) == world, "--layer-split ", join(split), " has ",
           split.size(), " entries but --world is ", world, " (one share per rank)");
  const std::vector<double> shares = split.empty() ? std::vector<double>(static_cast<size_t>(world), 1.0)
                                                   : std::vector<double>(split.begin(), split.end());
  return split_layers(shares, n_layers, split.empty() ? "--world " + std::to_string(world) : "--layer-split " + join(split));
}

uint64_t config_hash(const ModelSource& src, Numerics numerics, const std::vector<int>& split, int world,
                     int expert_top_k) {
  const ModelConfig& c = src.config();
  std::string s = cat("hs-pipeline-config 1|", src.format(), "|", c.vocab_size, "|", c.dim, "|", c.n_layers, "|",
                      c.n_heads, "|", c.head_dim, "|", c.rope_dim, "|", c.q_lora_rank, "|", c.o_groups, "|",
                      c.o_lora_rank, "|", c.window, "|", c.csa_ratio, "|", c.index_n_heads, "|", c.index_head_dim,
                      "|", c.index_topk, "|", c.n_experts, "|", c.n_active_experts, "|", c.n_shared_experts, "|",
                      c.moe_inter, "|", c.n_hash_layers, "|", c.route_scale, "|", c.swiglu_limit, "|", c.hc_mult,
                      "|", c.hc_sinkhorn_iters, "|", c.hc_eps, "|", c.norm_eps, "|", c.rope_theta, "|",
                      c.compress_rope_theta, "|", c.yarn.factor, "|", c.yarn.original_ctx, "|", c.yarn.beta_fast,
                      "|", c.yarn.beta_slow, "|", c.max_position, "|", c.bos_token_id, "|", c.eos_token_id, "|",
                      c.n_mtp_layers, "|ratios ", join(c.compress_ratios), "|numerics ",
                      numerics == Numerics::Model ? "model" : "reference", "|split ", join(split), "|world ", world,
                      "|expert_top_k ", expert_top_k);
  for (const StoredTensor& t : src.stored_tensors()) {
    s += cat("|", t.name, ":", t.type, ":", t.nbytes);
    for (int64_t d : t.shape) s += cat(",", d);
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

struct DistributedEngine::Impl {
  DistributedOptions d;
  std::string device_name;
  int device = -1;
  std::vector<int> split;
  std::unique_ptr<Engine> eng;
  std::map<int64_t, std::unique_ptr<Sequence>> seqs;
  // rank 0: peers[r] is the connection to rank r (peers[0] unused); others: peers[0] is rank 0.
  std::vector<Connection> peers;
  std::vector<Hello> hellos;      // rank 0: what each rank said in the handshake
  std::deque<Message> pending;    // ranks > 0: messages read while waiting on NCCL
  bool broken = false, shut = false;
#ifdef HS_HAVE_NCCL
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
#endif

  bool leader() const { return d.rank == 0; }

  std::string who(int r) const {
    if (leader() && r > 0 && r < static_cast<int>(hellos.size()) && !hellos[static_cast<size_t>(r)].host.empty())
      return cat("rank ", r, " (", hellos[static_cast<size_t>(r)].device, " on ", hellos[static_cast<size_t>(r)].host,
                 ")");
    return cat("rank ", r);
  }

  // Stops this rank for good: aborts NCCL, tells the peers (best effort), closes the control
  // connections, and throws `msg`.
  [[noreturn]] void fatal(const std::string& msg) {
    if (!broken) {
      broken = true;
      Message err;
      err.op = Op::Error;
      err.payload = msg;
      for (auto& c : peers) {
        if (!c.open()) continue;
        try {
          c.send(err);
        } catch (...) {
        }
        c.close();
      }
      abort_comm();
    }
    throw Error(msg);
  }

  // ncclCommAbort stops this rank's NCCL kernels at once, but then frees its resources in step
  // with the other ranks of the node, and a dead rank never comes: give it two seconds, then
  // leave it behind (the process is about to exit).
  void abort_comm() {
#ifdef HS_HAVE_NCCL
    if (!comm) return;
    ncclComm_t c = comm;
    comm = nullptr;
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread t([c, done] {
      ncclCommAbort(c);
      done->store(true);
    });
    for (int i = 0; i < 200 && !done->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (done->load())
      t.join();
    else
      t.detach();
#endif
  }

  // A message from peer `i` arrived while none was expected (or it closed): fatal, except a
  // rank > 0 keeps rank 0's next operations for later.
  void on_unexpected(size_t i) {
    Connection& c = peers[i];
    Message m;
    try {
      m = c.recv();
    } catch (const dist::PeerClosed&) {
      c.close();
      if (leader())
        fatal(cat(who(static_cast<int>(i)), " closed its control connection: the process exited or was killed"));
      if (!pending.empty() && pending.back().op == Op::Shutdown) return;  // rank 0 is done, and so are we
      fatal("lost the control connection to rank 0: it exited or was killed");
    } catch (const Error& e) {
      fatal(cat("control connection to ", leader() ? who(static_cast<int>(i)) : "rank 0", ": ", e.what()));
    }
    if (m.op == Op::Error) {
      c.close();
      if (leader()) fatal(cat(who(static_cast<int>(i)), " failed: ", m.payload));
      fatal(cat("rank 0 stopped the pipeline: ", m.payload));
    }
    if (leader())
      fatal(cat("protocol error: unexpected '", dist::op_name(m.op), "' message from ", who(static_cast<int>(i))));
    pending.push_back(std::move(m));
  }

  // Polls the control connections once (waiting up to timeout_ms).
  void watch(int timeout_ms) {
    std::vector<Connection*> cs;
    for (auto& c : peers) cs.push_back(c.open() ? &c : nullptr);
    const int i = dist::wait_readable(cs, timeout_ms);
    if (i >= 0) on_unexpected(static_cast<size_t>(i));
  }

  void send_all(const Message& m) {
    for (size_t r = 1; r < peers.size(); ++r) {
      try {
        peers[r].send(m);
      } catch (const Error& e) {
        fatal(cat("cannot reach ", who(static_cast<int>(r)), ": ", e.what()));
      }
    }
  }

  // Blocking receive of the next message from rank 0 (ranks > 0).
  Message next_from_leader() {
    if (!pending.empty()) {
      Message m = std::move(pending.front());
      pending.pop_front();
      return m;
    }
    try {
      return peers[0].recv();
    } catch (const dist::PeerClosed&) {
      peers[0].close();
      fatal("lost the control connection to rank 0: it exited or was killed");
    } catch (const Error& e) {
      fatal(cat("control connection to rank 0: ", e.what()));
    }
  }

  void handshake(const Hello& mine);
  std::string exchange_id();
  void barrier_ready();
#ifdef HS_HAVE_NCCL
  void wait_nccl(const std::string& what, bool stream_too);
  void check_nccl(ncclResult_t r, const std::string& what);
  void init_nccl(const std::string& id);
  void send(const float* p, int64_t n, int peer, const std::string& what);
  void recv(float* p, int64_t n, int peer, const std::string& what);
  void close_comm();
#endif
  void run_step(const Message& m);
  Sequence& seq(int64_t id) {
    auto it = seqs.find(id);
    HS_CHECK(it != seqs.end(), "unknown sequence id ", id, " (new_sequence first)");
    return *it->second;
  }
};

// ---- start-up: handshake (before any weight is read), load, ready barrier, NCCL

void DistributedEngine::Impl::handshake(const Hello& mine) {
  const dist::Endpoint ep = dist::parse_endpoint(d.coordinator);
  const auto t0 = Clock::now();
  auto left = [&] { return std::max(0.1, d.timeout_s - seconds_since(t0)); };
  if (!leader()) {
    peers.resize(1);
    peers[0] = Connection::connect(ep, d.timeout_s);
    Message m;
    m.op = Op::Hello;
    m.payload = dist::encode_hello(mine);
    peers[0].send(m);
    if (!peers[0].readable(static_cast<int>(left() * 1000)))
      fatal(cat("rank 0 did not complete the handshake within ", d.timeout_s, " s (are all ", d.world,
                " ranks started?)"));
    return;
  }
  dist::Listener listener(ep.port);
  peers.resize(static_cast<size_t>(d.world));
  hellos.assign(static_cast<size_t>(d.world), Hello{});
  hellos[0] = mine;
  for (int joined = 1; joined < d.world; ++joined) {
    Connection c;
    try {
      c = listener.accept(left());
    } catch (const Error&) {
      std::string missing;
      for (int r = 1; r < d.world; ++r)
        if (!peers[static_cast<size_t>(r)].open()) missing += (missing.empty() ? "" : ",") + std::to_string(r);
      fatal(cat("only ", joined - 1, " of ", d.world - 1, " ranks joined within ", d.timeout_s, " s (missing: rank ",
                missing, ")"));
    }
    Hello h;
    try {
      HS_CHECK(c.readable(static_cast<int>(left() * 1000)), "a peer connected but sent no handshake");
      Message m = c.recv();
      HS_CHECK(m.op != Op::Error, "a rank failed before joining: ", m.payload);
      HS_CHECK(m.op == Op::Hello, "expected 'hello' from a connecting rank, got '", dist::op_name(m.op), "'");
      h = dist::decode_hello(m.payload);
      HS_CHECK(h.world == d.world, "rank ", h.rank, " (", h.device, " on ", h.host, ") was started with --world ",
               h.world, ", rank 0 with --world ", d.world);
      HS_CHECK(h.rank >= 1 && h.rank < d.world, "a rank connected as rank ", h.rank, ", outside 1..", d.world - 1);
      HS_CHECK(!peers[static_cast<size_t>(h.rank)].open(), "two processes claim rank ", h.rank, " (", h.device, " on ",
               h.host, ", and ", hellos[static_cast<size_t>(h.rank)].device, " on ",
               hellos[static_cast<size_t>(h.rank)].host, ")");
      HS_CHECK(h.config_hash == mine.config_hash, "rank ", h.rank, " runs another model or configuration than rank 0: "
               "rank 0 has ", mine.description, " [config hash ", std::hex, mine.config_hash, "], rank ", std::dec,
               h.rank, " (", h.host, ") has ", h.description, " [config hash ", std::hex, h.config_hash, "]");
    } catch (const Error& e) {
      Message err;
      err.op = Op::Error;
      err.payload = e.what();
      try {
        c.send(err);
      } catch (...) {
      }
      fatal(e.what());
    }
    hellos[static_cast<size_t>(h.rank)] = h;
    peers[static_cast<size_t>(h.rank)] = std::move(c);
  }
}

// After the handshake: rank 0 makes the NCCL unique id (ncclGetUniqueId opens its bootstrap
// socket there) and sends it with the welcome; the others wait for it (or for a refusal).
std::string DistributedEngine::Impl::exchange_id() {
  if (!leader()) {
    Message r = next_from_leader();
    if (r.op == Op::Error) {
      peers[0].close();
      fatal(cat("rank 0 refused this rank: ", r.payload));
    }
    if (r.op != Op::Welcome)
      fatal(cat("protocol error: expected 'welcome' from rank 0, got '", dist::op_name(r.op), "'"));
    return r.payload;
  }
  std::string id;
#ifdef HS_HAVE_NCCL
  ncclUniqueId uid;
  check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
  id.assign(reinterpret_cast<const char*>(&uid), sizeof uid);
#endif
  Message w;
  w.op = Op::Welcome;
  w.payload = id;
  send_all(w);
  return id;
}

void DistributedEngine::Impl::barrier_ready() {
  Message m;
  if (!leader()) {
    m.op = Op::Ready;
    try {
      peers[0].send(m);
    } catch (const Error& e) {
      fatal(cat("cannot reach rank 0: ", e.what()));
    }
    Message g = next_from_leader();
    if (g.op == Op::Error) fatal(cat("rank 0 stopped the pipeline: ", g.payload));
    if (g.op != Op::Go) fatal(cat("protocol error: expected 'go' from rank 0, got '", dist::op_name(g.op), "'"));
    return;
  }
  // Loading takes as long as it takes: no timeout here, but a rank that fails or exits is seen.
  std::vector<bool> ready(peers.size(), false);
  for (int left = d.world - 1; left > 0;) {
    std::vector<Connection*> cs;
    for (size_t r = 0; r < peers.size(); ++r) cs.push_back(r > 0 && !ready[r] ? &peers[r] : nullptr);
    const int i = dist::wait_readable(cs, 1000);
    if (i < 0) continue;
    Message r;
    try {
      r = peers[static_cast<size_t>(i)].recv();
    } catch (const Error&) {
      peers[static_cast<size_t>(i)].close();
      fatal(cat(who(i), " closed its control connection while loading: the process exited or was killed"));
    }
    if (r.op == Op::Error) fatal(cat(who(i), " failed: ", r.payload));
    if (r.op != Op::Ready)
      fatal(cat("protocol error: expected 'ready' from ", who(i), ", got '", dist::op_name(r.op), "'"));
    ready[static_cast<size_t>(i)] = true;
    --left;
  }
  m.op = Op::Go;
  send_all(m);
}

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

void DistributedEngine::Impl::send(const float* p, int64_t n, int peer, const std::string& what) {
  check_nccl(ncclSend(p, static_cast<size_t>(n), ncclFloat32, peer, comm, stream), what);
  wait_nccl(what, true);
}

void DistributedEngine::Impl::recv(float* p, int64_t n, int peer, const std::string& what) {
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

// ---- one step on this rank: receive (or embed), run the shard, send on (or the logits back)

void DistributedEngine::Impl::run_step(const Message& m) {
#ifdef HS_HAVE_NCCL
  cuda::DeviceGuard guard(device);
  const int64_t n = m.n_tokens;
  const int64_t per = eng->config().hc_mult * eng->config().dim;
  const int64_t V = eng->config().vocab_size;
  Sequence& s = seq(m.seq_id);
  HS_CHECK(s.n_past() == m.position, "sequence ", m.seq_id, " is at position ", s.n_past(), " on rank ", d.rank,
           ", rank 0 stepped it at ", m.position);
  Shard& shard = eng->shard(0);
  Ops& ops = shard.ops();
  const size_t mark = ops.mark();
  try {
    HcState X{ops.alloc(n * per), n, per, &ops};
    if (leader())
      shard.embed(m.tokens.data(), n, X.data);
    else
      recv(X.data, n * per, d.rank - 1, cat("receiving the HC state from rank ", d.rank - 1));
    X = eng->forward_shards(s, m.tokens.data(), n, X);
    float fence = 0;
    if (d.rank + 1 < d.world) {
      ops.download(&fence, X.data, 1);  // the shard's work is done before NCCL reads it
      send(X.data, n * per, d.rank + 1, cat("sending the HC state to rank ", d.rank + 1));
    } else {
      const int64_t rows = (m.flags & dist::kFlagAllPositions) ? n : 1;
      float* L = ops.alloc(rows * V);
      shard.logits(X.data + (n - rows) * per, rows, L);
      ops.download(&fence, L, 1);
      send(L, rows * V, 0, "sending the logits to rank 0");
    }
  } catch (...) {
    ops.release_to(mark);
    throw;
  }
  ops.release_to(mark);
#else
  (void)m;
  fail("internal: no NCCL in this build");
#endif
}

// ---- the public class

DistributedEngine::DistributedEngine(const std::string& model_path, const EngineOptions& opts,
                                     const DistributedOptions& d)
    : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.d = d;
  validate(d, opts);
  I.device_name = opts.device;
  I.device = cuda_device_id(opts.device);
#ifndef HS_HAVE_NCCL
  (void)model_path;
  fail("--rank/--world: this build has no NCCL (configure with -DHS_CUDA=ON where the CUDA tree has NCCL)");
#else
  std::unique_ptr<ModelSource> src;
  Hello mine;
  try {
    src = ModelSource::open(model_path);
    I.split = rank_layer_split(opts.layer_split, d.world, src->config().n_layers);
    mine.rank = d.rank;
    mine.world = d.world;
    mine.config_hash = config_hash(*src, opts.numerics, I.split, d.world, opts.expert_top_k);
    mine.device = opts.device;
    mine.host = host_name();
    const ModelConfig& c = src->config();
    mine.description = cat(model_path, " (", src->format(), ", ", c.n_layers, " layers, dim ", c.dim, ", vocab ",
                           c.vocab_size, "; numerics ", opts.numerics == Numerics::Model ? "model" : "reference",
                           "; layer split ", join(I.split), ")");
  } catch (const std::exception& e) {
    if (!I.leader()) {  // tell rank 0 (best effort) rather than let it wait for us
      try {
        Connection c = Connection::connect(dist::parse_endpoint(d.coordinator), std::min(d.timeout_s, 10.0));
        Message m;
        m.op = Op::Error;
        m.payload = cat("rank ", d.rank, " (", opts.device, " on ", host_name(), "): ", e.what());
        c.send(m);
      } catch (...) {
      }
    }
    throw;
  }
  I.handshake(mine);  // before any weight is read: a mismatched rank is refused at once
  const std::string id = I.exchange_id();
  try {
    EngineOptions eo = opts;
    eo.devices.assign(static_cast<size_t>(d.world), opts.device);
    eo.layer_split = I.split;
    eo.only_shard = d.rank;
    I.eng = std::make_unique<Engine>(std::move(src), eo);
  } catch (const std::exception& e) {
    I.fatal(cat("loading layers of rank ", d.rank, " failed: ", e.what()));
  }
  I.barrier_ready();
  try {
    I.init_nccl(id);
  } catch (const std::exception& e) {
    if (!I.broken) I.fatal(e.what());
    throw;
  }
#endif
}

DistributedEngine::~DistributedEngine() {
  Impl& I = *impl_;
  if (I.leader() && !I.shut && !I.broken) {
    try {
      shutdown();
    } catch (...) {
    }
  }
  I.abort_comm();
#ifdef HS_HAVE_NCCL
  if (I.stream && !I.broken) cudaStreamDestroy(I.stream);
#endif
}

int DistributedEngine::rank() const { return impl_->d.rank; }
int DistributedEngine::world() const { return impl_->d.world; }
const ModelConfig& DistributedEngine::config() const { return impl_->eng->config(); }
Engine& DistributedEngine::local() { return *impl_->eng; }
int DistributedEngine::layer_begin() const { return impl_->eng->shard(0).layer_begin(); }
int DistributedEngine::layer_end() const { return impl_->eng->shard(0).layer_end(); }

static void require_usable(const DistributedEngine::Impl& I, const char* what) {
  HS_CHECK(I.leader(), what, " is for rank 0 (rank ", I.d.rank, " runs serve_forever)");
  HS_CHECK(!I.broken, what, ": the pipeline stopped after an earlier failure");
  HS_CHECK(!I.shut, what, ": the pipeline was shut down");
}

void DistributedEngine::new_sequence(int64_t seq_id) {
  Impl& I = *impl_;
  require_usable(I, "new_sequence");
  Message m;
  m.op = Op::NewSequence;
  m.seq_id = seq_id;
  I.send_all(m);
  I.seqs[seq_id] = I.eng->new_sequence();
}

void DistributedEngine::reset(int64_t seq_id) {
  Impl& I = *impl_;
  require_usable(I, "reset");
  Sequence& s = I.seq(seq_id);
  Message m;
  m.op = Op::Reset;
  m.seq_id = seq_id;
  I.send_all(m);
  s.reset();
}

void DistributedEngine::release(int64_t seq_id) {
  Impl& I = *impl_;
  require_usable(I, "release");
  (void)I.seq(seq_id);
  Message m;
  m.op = Op::Release;
  m.seq_id = seq_id;
  I.send_all(m);
  I.seqs.erase(seq_id);
}

int64_t DistributedEngine::n_past(int64_t seq_id) const { return impl_->seq(seq_id).n_past(); }

void DistributedEngine::step(int64_t seq_id, const int32_t* tokens, int64_t n, float* logits, bool all_positions) {
  Impl& I = *impl_;
  require_usable(I, "step");
  // Bad input is refused here, before any rank hears of the step.
  HS_CHECK(n > 0, "step needs at least one token");
  Sequence& s = I.seq(seq_id);
  const int64_t V = config().vocab_size;
  for (int64_t t = 0; t < n; ++t)
    HS_CHECK(tokens[t] >= 0 && tokens[t] < V, "token id ", tokens[t], " at position ", s.n_past() + t,
             " is outside the vocabulary [0, ", V, ")");
  Message m;
  m.op = Op::Step;
  m.flags = all_positions ? dist::kFlagAllPositions : 0;
  m.seq_id = seq_id;
  m.n_tokens = n;
  m.position = s.n_past();
  m.tokens.assign(tokens, tokens + n);
  I.send_all(m);
  try {
#ifdef HS_HAVE_NCCL
    I.run_step(m);
    cuda::DeviceGuard guard(I.device);
    Ops& ops = I.eng->shard(0).ops();
    const size_t mark = ops.mark();
    const int64_t rows = all_positions ? n : 1;
    float* L = ops.alloc(rows * V);
    I.recv(L, rows * V, I.d.world - 1, cat("receiving the logits from rank ", I.d.world - 1));
    ops.download(logits, L, rows * V);
    ops.release_to(mark);
#else
    (void)logits;
#endif
  } catch (const std::exception& e) {
    if (!I.broken) I.fatal(e.what());
    throw;
  }
}

void DistributedEngine::shutdown() {
  Impl& I = *impl_;
  if (I.shut || I.broken || !I.leader()) return;
  Message m;
  m.op = Op::Shutdown;
  I.shut = true;
  I.send_all(m);
#ifdef HS_HAVE_NCCL
  I.close_comm();
#endif
  for (auto& c : I.peers) c.close();
}

void DistributedEngine::serve_forever() {
  Impl& I = *impl_;
  HS_CHECK(!I.leader(), "serve_forever is for ranks > 0 (rank 0 drives the pipeline)");
  HS_CHECK(!I.broken && !I.shut, "serve_forever: the pipeline is down");
  for (;;) {
    Message m = I.next_from_leader();
    try {
      switch (m.op) {
        case Op::Step:
          I.run_step(m);
          break;
        case Op::NewSequence:
          I.seqs[m.seq_id] = I.eng->new_sequence();
          break;
        case Op::Reset:
          I.seq(m.seq_id).reset();
          break;
        case Op::Release:
          I.seqs.erase(m.seq_id);
          break;
        case Op::Shutdown:
          I.shut = true;
#ifdef HS_HAVE_NCCL
          I.close_comm();
#endif
          I.peers[0].close();
          return;
        case Op::Error:
          I.peers[0].close();
          I.fatal(cat("rank 0 stopped the pipeline: ", m.payload));
        default:
          I.fatal(cat("protocol error: unexpected '", dist::op_name(m.op), "' message from rank 0"));
      }
    } catch (const std::exception& e) {
      if (!I.broken) I.fatal(e.what());
      throw;
    }
  }
}

}  // namespace hs
