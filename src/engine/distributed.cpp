#include "engine/distributed.h"

#include "engine/layer_split.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "engine/distributed_impl.h"
#include "engine/distributed_wire.h"
#include "util/error.h"

namespace hs {

using dist::Connection;
using dist::Hello;
using dist::Message;
using dist::Op;
using dist::Clock;
using dist::seconds_since;

namespace {

std::string join(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return s;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// -1 for cpu (TCP between the ranks), N for cuda:N (NCCL).
int rank_device_id(const std::string& device) {
  try {
    return parse_device(device);
  } catch (const Error& e) {
    fail("--device: ", e.what());
  }
}

// What the ranks' state pools must agree on (Ready's payload), and the pages each has.
struct PoolTerms {
  int64_t slots = 0, page = 0, max_context = 0, max_rollback = 0, cmp = 0, swa = 0;
  static PoolTerms of(const StateLayout& l) {
    return {l.slots, l.page, l.max_context, l.max_rollback, l.cmp_blocks, l.swa_blocks};
  }
  std::string encode() const {
    std::vector<uint8_t> b;
    for (int64_t v : {slots, page, max_context, max_rollback, cmp, swa}) dist::wire::put(b, static_cast<uint64_t>(v), 8);
    return std::string(b.begin(), b.end());
  }
  static PoolTerms decode(const std::string& payload) {
    dist::wire::Reader r{payload, "ready"};
    PoolTerms t;
    for (int64_t* v : {&t.slots, &t.page, &t.max_context, &t.max_rollback, &t.cmp, &t.swa}) *v = r.i64();
    r.done();
    return t;
  }
  bool same_terms(const PoolTerms& o) const {
    return slots == o.slots && page == o.page && max_context == o.max_context && max_rollback == o.max_rollback;
  }
  std::string describe() const {
    return cat(slots, " slots (--max-seqs), contexts up to ", max_context, " tokens (--ctx-size), ", page,
               "-position pages, rollback ", max_rollback);
  }
};

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
  (void)rank_device_id(opts.device);
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


std::string DistributedEngine::Impl::who(int r) const {
  if (leader() && r > 0 && r < static_cast<int>(hellos.size()) && !hellos[static_cast<size_t>(r)].host.empty())
    return cat("rank ", r, " (", hellos[static_cast<size_t>(r)].device, " on ", hellos[static_cast<size_t>(r)].host,
               ")");
  return cat("rank ", r);
}

// Stops this rank for good: aborts NCCL, tells the peers (best effort), closes the connections,
// and throws `msg` as PipelineDown.
void DistributedEngine::Impl::fatal(const std::string& msg) {
  if (!broken) {
    broken = true;
    failure = msg;
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
    data_in.close();
    data_out.close();
    abort_comm();
  }
  throw PipelineDown(msg);
}

void DistributedEngine::Impl::fail(const std::string& why) { fatal(why); }

void DistributedEngine::Impl::end_step() {
  if (step_lock.owns_lock()) step_lock.unlock();
}

void DistributedEngine::Impl::require_up(const char* what) const {
  if (broken) throw PipelineDown(cat(what, ": the pipeline stopped after an earlier failure: ", failure));
  HS_CHECK(!shut, what, ": the pipeline was shut down");
}

// ncclCommAbort stops this rank's NCCL kernels at once, but then frees its resources in step
// with the other ranks of the node, and a dead rank never comes: give it two seconds, then
// leave it behind (the process is about to exit).
void DistributedEngine::Impl::abort_comm() {
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
void DistributedEngine::Impl::on_unexpected(size_t i) {
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
  } catch (const PipelineDown&) {
    throw;
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
void DistributedEngine::Impl::watch(int timeout_ms) {
  std::vector<Connection*> cs;
  for (auto& c : peers) cs.push_back(c.open() ? &c : nullptr);
  const int i = dist::wait_readable(cs, timeout_ms);
  if (i >= 0) on_unexpected(static_cast<size_t>(i));
}

void DistributedEngine::Impl::send_all(const Message& m) {
  for (size_t r = 1; r < peers.size(); ++r) {
    try {
      peers[r].send(m);
    } catch (const Error& e) {
      fatal(cat("cannot reach ", who(static_cast<int>(r)), ": ", e.what()));
    }
  }
}

// Blocking receive of the next message from rank 0 (ranks > 0).
Message DistributedEngine::Impl::next_from_leader() {
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

// ---- start-up: handshake (before any weight is read), load, ready barrier, data path

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
      HS_CHECK((h.device == "cpu") == (mine.device == "cpu"), "rank ", h.rank, " (", h.host, ") runs on ", h.device,
               ", rank 0 on ", mine.device, ": the ranks of a pipeline are all GPUs (NCCL between them) or all CPUs "
               "(TCP between them)");
      HS_CHECK(mine.device != "cpu" || h.data_port > 0, "rank ", h.rank, " (", h.host, ") gave no data port");
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

// After the handshake. GPU ranks: rank 0 makes the NCCL unique id (ncclGetUniqueId opens its
// bootstrap socket there) and sends it with the welcome. CPU ranks: the welcome names where the
// rank sends its HC state (the next rank's data port; nothing for the last). Returns what came.
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
  // Where rank r (r >= 1) reaches rank r + 1: the address rank 0 sees it at, or the coordinator's
  // host when that is a loopback address (rank r + 1 shares rank 0's host).
  auto data_address = [&](int r) {
    std::string host = peers[static_cast<size_t>(r)].peer_host();
    if (host.rfind("127.", 0) == 0 || host == "::1") host = dist::parse_endpoint(d.coordinator).host;
    if (host.find(':') != std::string::npos) host = "[" + host + "]";
    return cat(host, ":", hellos[static_cast<size_t>(r)].data_port);
  };
  std::string id;
#ifdef HS_HAVE_NCCL
  if (gpu()) {
    ncclUniqueId uid;
    check_nccl(ncclGetUniqueId(&uid), "ncclGetUniqueId");
    id.assign(reinterpret_cast<const char*>(&uid), sizeof uid);
  }
#endif
  for (int r = 1; r < d.world; ++r) {
    Message w;
    w.op = Op::Welcome;
    w.payload = gpu() ? id : r + 1 < d.world ? data_address(r + 1) : std::string();
    try {
      peers[static_cast<size_t>(r)].send(w);
    } catch (const Error& e) {
      fatal(cat("cannot reach ", who(r), ": ", e.what()));
    }
  }
  if (gpu()) return id;
  std::string host = peers[1].peer_host();
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return cat(host, ":", hellos[1].data_port);
}

// Every rank loaded its layers (Ready, with its state pool's terms); rank 0 checks that the pools
// agree and sends Go with the pages every rank keeps: the smallest rank's, so that a step rank 0
// can reserve fits on every rank.
void DistributedEngine::Impl::barrier_ready() {
  const PoolTerms mine = PoolTerms::of(eng->state_layout(0));
  Message m;
  if (!leader()) {
    m.op = Op::Ready;
    m.payload = mine.encode();
    try {
      peers[0].send(m);
    } catch (const Error& e) {
      fatal(cat("cannot reach rank 0: ", e.what()));
    }
    Message g = next_from_leader();
    if (g.op == Op::Error) fatal(cat("rank 0 stopped the pipeline: ", g.payload));
    if (g.op != Op::Go) fatal(cat("protocol error: expected 'go' from rank 0, got '", dist::op_name(g.op), "'"));
    const PoolTerms t = PoolTerms::decode(g.payload);
    eng->limit_state(t.cmp, t.swa);
    return;
  }
  // Loading takes as long as it takes: no timeout here, but a rank that fails or exits is seen.
  PoolTerms least = mine;
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
    PoolTerms t;
    try {
      t = PoolTerms::decode(r.payload);
    } catch (const Error& e) {
      fatal(cat(who(i), ": ", e.what()));
    }
    if (!t.same_terms(mine))
      fatal(cat(who(i), " has a state pool of ", t.describe(), "; rank 0 has ", mine.describe(),
                " (start every rank with the same --max-seqs and --ctx-size)"));
    least.cmp = std::min(least.cmp, t.cmp);
    least.swa = std::min(least.swa, t.swa);
    ready[static_cast<size_t>(i)] = true;
    --left;
  }
  eng->limit_state(least.cmp, least.swa);
  m.op = Op::Go;
  m.payload = least.encode();
  send_all(m);
}

// ---- ranks > 0: rank 0's step plans

void DistributedEngine::Impl::apply(const dist::StateOp& o) {
  auto find = [&](int64_t id) -> Sequence* {
    auto it = seqs.find(id);
    return it == seqs.end() ? nullptr : it->second.get();
  };
  Sequence* s = find(o.seq);
  switch (o.kind) {
    case dist::StateOp::Release:
      seqs.erase(o.seq);  // (a sequence never stepped was never made here)
      return;
    case dist::StateOp::Reset:
      if (s) s->reset();
      return;
    case dist::StateOp::Fork:
      HS_CHECK(!find(o.arg), "step plan: fork into sequence ", o.arg, ", which exists on rank ", d.rank);
      HS_CHECK(s || o.upto == 0, "step plan: fork of sequence ", o.seq, " up to ", o.upto, ", which rank ", d.rank,
               " never saw");
      seqs[o.arg] = s ? eng->fork(*s, o.upto) : eng->new_sequence();
      return;
    case dist::StateOp::Truncate:
      HS_CHECK(s || o.arg == 0, "step plan: truncate of sequence ", o.seq, ", which rank ", d.rank, " never saw");
      if (s) eng->truncate(*s, o.arg);
      return;
  }
}

void DistributedEngine::Impl::run_plan(const dist::StepPlan& p) {
  for (const dist::StateOp& o : p.ops) apply(o);
  std::vector<StepItem> items;
  size_t at = 0;
  for (const auto& it : p.items) {
    auto f = seqs.find(it.seq_id);
    if (f == seqs.end()) {
      HS_CHECK(it.position == 0, "step plan: sequence ", it.seq_id, " first seen at position ", it.position,
               " on rank ", d.rank);
      f = seqs.emplace(it.seq_id, eng->new_sequence()).first;
    }
    HS_CHECK(f->second->n_past() == it.position, "sequence ", it.seq_id, " is at position ", f->second->n_past(),
             " on rank ", d.rank, ", rank 0 stepped it at ", it.position);
    StepItem si;
    si.seq = f->second.get();
    si.tokens = p.tokens.data() + at;
    si.n = it.n;
    si.all_positions = (it.flags & dist::kFlagAllPositions) != 0;
    si.output = (it.flags & dist::kItemOutput) != 0;
    items.push_back(si);
    at += static_cast<size_t>(it.n);
  }
  if (!items.empty()) eng->step_planned(items, p.micro_batches);
}

void DistributedEngine::Impl::send_plan(const dist::StepPlan& plan) {
  require_up("step");
  step_lock.lock();  // until end_step: the idle watcher keeps off the connections
  Message m;
  m.op = Op::StepPlan;
  m.payload = dist::encode_step_plan(plan);
  send_all(m);
}

// ---- the public class

namespace {

// A rank > 0 that fails before its handshake tells rank 0 (best effort) rather than let it wait.
void report_early_failure(const DistributedOptions& d, const EngineOptions& opts, const std::exception& e) {
  if (d.rank == 0) return;
  try {
    Connection c = Connection::connect(dist::parse_endpoint(d.coordinator), std::min(d.timeout_s, 10.0));
    Message m;
    m.op = Op::Error;
    m.payload = cat("rank ", d.rank, " (", opts.device, " on ", host_name(), "): ", e.what());
    c.send(m);
  } catch (...) {
  }
}

std::unique_ptr<ModelSource> open_for_rank(const std::string& path, const EngineOptions& opts,
                                           const DistributedOptions& d) {
  try {
    validate(d, opts);
    return ModelSource::open(path);
  } catch (const std::exception& e) {
    report_early_failure(d, opts, e);
    throw;
  }
}

}  // namespace

DistributedEngine::DistributedEngine(const std::string& model_path, const EngineOptions& opts,
                                     const DistributedOptions& d)
    : DistributedEngine(open_for_rank(model_path, opts, d), model_path, opts, d) {}

DistributedEngine::DistributedEngine(std::unique_ptr<ModelSource> src, const std::string& name,
                                     const EngineOptions& opts, const DistributedOptions& d)
    : impl_(std::make_unique<Impl>()) {
  Impl& I = *impl_;
  I.d = d;
  Hello mine;
  try {
    validate(d, opts);
    I.device = rank_device_id(opts.device);
#ifndef HS_HAVE_NCCL
    HS_CHECK(!I.gpu(), "--rank/--world on ", opts.device, ": this build has no NCCL (configure with -DHS_CUDA=ON "
             "where the CUDA tree has NCCL); CPU ranks need none");
#endif
    I.split = rank_layer_split(opts.layer_split, d.world, src->config().n_layers);
    mine.rank = d.rank;
    mine.world = d.world;
    mine.config_hash = config_hash(*src, opts.numerics, I.split, d.world, opts.expert_top_k);
    mine.device = opts.device;
    mine.host = host_name();
    const ModelConfig& c = src->config();
    mine.description = cat(name, " (", src->format(), ", ", c.n_layers, " layers, dim ", c.dim, ", vocab ",
                           c.vocab_size, "; numerics ", opts.numerics == Numerics::Model ? "model" : "reference",
                           "; layer split ", join(I.split), ")");
    if (!I.gpu() && d.rank > 0) {  // where the previous rank will send the HC state
      I.data_listener = std::make_unique<dist::Listener>(0, cat("rank ", d.rank, "'s data port"));
      mine.data_port = I.data_listener->port();
    }
  } catch (const std::exception& e) {
    report_early_failure(d, opts, e);
    throw;
  }
  I.handshake(mine);  // before any weight is read: a mismatched rank is refused at once
  const std::string id = I.exchange_id();
  try {
    EngineOptions eo = opts;
    eo.devices.assign(static_cast<size_t>(d.world), opts.device);
    eo.layer_split = I.split;
    eo.only_shard = d.rank;
    eo.link = &I;
    I.eng = std::make_unique<Engine>(std::move(src), eo);
  } catch (const PipelineDown&) {
    throw;
  } catch (const std::exception& e) {
    I.fatal(cat("loading layers of rank ", d.rank, " failed: ", e.what()));
  }
  I.barrier_ready();
  try {
    if (I.gpu()) {
#ifdef HS_HAVE_NCCL
      I.init_nccl(id);
#endif
    } else {
      I.connect_data(id);
    }
  } catch (const PipelineDown&) {
    throw;
  } catch (const std::exception& e) {
    I.fatal(e.what());
  }
}

DistributedEngine::~DistributedEngine() {
  Impl& I = *impl_;
  I.stop_watching = true;
  if (I.watcher.joinable()) I.watcher.join();
  if (I.leader() && !I.shut && !I.broken) {
    try {
      shutdown();
    } catch (...) {
    }
  }
  I.seqs.clear();  // (before the engine)
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
bool DistributedEngine::down() const { return impl_->broken; }

void DistributedEngine::watch_when_idle(std::function<void(const std::string& why)> on_down) {
  Impl& I = *impl_;
  HS_CHECK(I.leader() && !I.watcher.joinable(), "internal: watch_when_idle is for rank 0, once");
  I.watcher = std::thread([&I, on_down = std::move(on_down)] {
    while (!I.stop_watching && !I.broken && !I.shut) {
      {
        std::unique_lock<std::mutex> lk(I.step_mu, std::try_to_lock);
        if (lk.owns_lock() && !I.broken && !I.shut) {
          try {
            I.watch(0);  // between steps nothing is expected: a message or an EOF stops the pipeline
          } catch (const std::exception& e) {
            if (on_down) on_down(e.what());
            return;
          }
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

void DistributedEngine::shutdown() {
  Impl& I = *impl_;
  if (I.shut || I.broken || !I.leader()) return;
  I.stop_watching = true;
  if (I.watcher.joinable()) I.watcher.join();
  Message m;
  m.op = Op::Shutdown;
  I.shut = true;
  I.send_all(m);
#ifdef HS_HAVE_NCCL
  I.close_comm();
#endif
  for (auto& c : I.peers) c.close();
  I.data_out.close();
}

void DistributedEngine::serve_forever() {
  Impl& I = *impl_;
  HS_CHECK(!I.leader(), "serve_forever is for ranks > 0 (rank 0 drives the pipeline)");
  I.require_up("serve_forever");
  for (;;) {
    Message m = I.next_from_leader();
    try {
      switch (m.op) {
        case Op::StepPlan:
          I.run_plan(dist::decode_step_plan(m.payload));
          break;
        case Op::Shutdown:
          I.shut = true;
#ifdef HS_HAVE_NCCL
          I.close_comm();
#endif
          I.peers[0].close();
          I.data_in.close();
          I.data_out.close();
          return;
        case Op::Error:
          I.peers[0].close();
          I.fatal(cat("rank 0 stopped the pipeline: ", m.payload));
        default:
          I.fatal(cat("protocol error: unexpected '", dist::op_name(m.op), "' message from rank 0"));
      }
    } catch (const PipelineDown&) {
      throw;
    } catch (const std::exception& e) {
      I.fatal(cat("rank ", I.d.rank, ": ", e.what()));
    }
  }
}

}  // namespace hs
