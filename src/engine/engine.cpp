#include "engine/engine.h"

#include "engine/dspark.h"
#include "engine/engine_micro.h"
#include "engine/layer_split.h"
#include "engine/mtp.h"
#include "engine/pipeline_runner.h"
#include "engine/rank_link.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <numeric>
#include <sstream>
#include <utility>

#include "util/error.h"
#include "util/log.h"

namespace hs {

Numerics parse_numerics(const std::string& s) {
  if (s == "reference") return Numerics::Reference;
  if (s == "model") return Numerics::Model;
  fail("--numerics: expected 'reference' or 'model', got '", s, "'");
}

int gpu_count() {
#ifdef HS_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

int parse_device(const std::string& device) {
  if (device == "cpu") return -1;
  HS_CHECK(device.rfind("cuda:", 0) == 0, "unknown device '", device, "' (expected cpu or cuda:N)");
  const std::string id = device.substr(5);
  HS_CHECK(!id.empty() && id.size() < 7 && id.find_first_not_of("0123456789") == std::string::npos, "device '",
           device, "': expected cuda:N");
  return std::stoi(id);
}

// A backend with the options' kernel tuning applied (backends without those kernels ignore it).
std::unique_ptr<Ops> make_ops(const std::string& device, ThreadPool& pool, const EngineOptions& opts) {
  const int id = parse_device(device);
  if (id < 0) return std::make_unique<CpuOps>(pool);
#ifdef HS_HAVE_CUDA
  std::unique_ptr<Ops> ops = make_cuda_ops(id, opts.numerics);
  ops->set_moe_ksplit(opts.moe_ksplit[0], opts.moe_ksplit[1]);
  ops->set_pdl(opts.pdl);
  ops->set_fused_handover(opts.fused_handover);
  return ops;
#else
  (void)opts;
  fail("device '", device, "': this build has no CUDA backend (configure with -DHS_CUDA=ON on a machine with nvcc)");
#endif
}

std::unique_ptr<Ops> make_ops(const std::string& device, ThreadPool& pool, Numerics numerics) {
  EngineOptions opts;
  opts.numerics = numerics;
  return make_ops(device, pool, opts);
}

// Pins the calling thread to a device (a pipeline worker, once): the CUDA backend pins its
// device at every op anyway; this makes the thread's own runtime calls land there too.
static void pin_device(const std::string& device) {
#ifdef HS_HAVE_CUDA
  if (device.rfind("cuda:", 0) == 0) HS_CUDA_CHECK(cudaSetDevice(std::stoi(device.substr(5))));
#else
  (void)device;
#endif
}

std::string parse_draft_kind(const std::string& s) {
  if (s == "auto" || s == "mtp" || s == "dspark" || s == "off") return s;
  fail("--draft: expected auto, mtp, dspark or off, got '", s, "'");
}

Engine::Engine(const std::string& model_path, const EngineOptions& opts)
    : Engine(ModelSource::open(model_path), opts) {}

Engine::~Engine() = default;

Engine::Engine(std::unique_ptr<ModelSource> source, const EngineOptions& opts) : source_(std::move(source)) {
  config_ = source_->config();
  if (opts.numerics == Numerics::Model) {
    bool has_csa = false;
    for (int r : config_.compress_ratios) has_csa |= r == config_.csa_ratio;
    const int id = config_.index_head_dim;
    HS_CHECK(!has_csa || (id > 0 && (id & (id - 1)) == 0), "--numerics model: the indexer's Hadamard rotation needs a "
             "power-of-two index_head_dim, this model has ", id, " (use --numerics reference)");
  }
  // Options first: a typo must not cost a load of the weights.
  HS_CHECK(opts.max_seqs >= 1 && opts.max_seqs <= 4096, "--max-seqs must be in [1, 4096], got ", opts.max_seqs);
  HS_CHECK(opts.max_context >= 0, "--ctx-size must be positive, got ", opts.max_context);
  if (opts.max_context > config_.max_position && config_.max_position > 0)
    log_warn("--ctx-size ", opts.max_context, " is longer than the model was trained for (", config_.max_position,
             " positions): positions beyond that are extrapolated");
  HS_CHECK(opts.state_memory >= 0, "--state-memory must be positive, got ", opts.state_memory);
  HS_CHECK(opts.max_rollback >= 0 && opts.max_rollback <= 1024, "max_rollback must be in [0, 1024], got ",
           opts.max_rollback);
  HS_CHECK(!opts.link || opts.only_shard >= 0, "internal: a rank link without only_shard");
  HS_CHECK(opts.pipeline_micro_batches >= 0, "--micro-batches must be at least 0 (0: automatic), got ",
           opts.pipeline_micro_batches);
  HS_CHECK(opts.peer_access == "auto" || opts.peer_access == "on" || opts.peer_access == "off",
           "--peer-access: expected auto, on or off, got '", opts.peer_access, "'");
  const int model_k = config_.n_active_experts;
  if (opts.expert_top_k > 0) {
    HS_CHECK(opts.expert_top_k <= model_k, "--expert-top-k ", opts.expert_top_k, ": the model routes each token to ",
             model_k, " experts; the knob can only lower that (1..", model_k, ")");
    config_.n_active_experts = opts.expert_top_k;
  }
  HS_CHECK(opts.expert_top_k >= 0, "--expert-top-k must be positive (0: the model's), got ", opts.expert_top_k);
  const std::string draft = parse_draft_kind(opts.draft);
  HS_CHECK(opts.draft_model.empty() || draft != "off", "a drafter file (", opts.draft_model,
           ") needs --draft mtp, dspark or auto");
  if (!opts.draft_model.empty()) draft_source_ = open_gguf_drafter(opts.draft_model, config_);
  if (!opts.draft_device.empty()) {  // refused before any weight is loaded
    int id = -1;
    try {
      id = parse_device(opts.draft_device);
    } catch (const Error& e) {
      fail("--draft-device: ", e.what());
    }
    HS_CHECK(id < gpu_count(), "--draft-device ", opts.draft_device, ": this machine has ", gpu_count(),
             " usable CUDA device(s)");
    HS_CHECK(draft != "off", "--draft-device needs --draft mtp, dspark or auto");
  }
  const ModelSource& draft_src = draft_source_ ? *draft_source_ : *source_;
  // auto: DSpark first (V4-Flash-0731 ships it; its stages also sit under mtp.<s>.*).
  const bool want_dspark = draft == "dspark" || (draft == "auto" && draft_src.has_dspark());
  const bool want_mtp = !want_dspark && (draft == "mtp" || (draft == "auto" && draft_src.has_mtp()));
  if ((want_dspark || want_mtp) && opts.only_shard < 0) {  // the tensors are checked before any weight is loaded
    const auto problems = want_dspark ? draft_src.validate_dspark() : draft_src.validate_mtp();
    if (!problems.empty()) {
      std::string msg = cat("--draft ", draft, ": ", draft_src.path(), ": the ",
                            want_dspark ? "DSpark drafter" : "MTP block", " cannot be used (", problems.size(),
                            " problem(s)):");
      for (size_t i = 0; i < problems.size() && i < 8; ++i) msg += "\n  " + problems[i];
      fail(msg);
    }
  }
  pool_ = std::make_unique<ThreadPool>(opts.threads);
  std::vector<std::string> devices = opts.devices;
  if (devices.empty()) devices.assign(opts.layer_split.empty() ? 1 : opts.layer_split.size(), opts.device);
  HS_CHECK(opts.layer_split.empty() || opts.layer_split.size() == devices.size(), "--layer-split has ",
           opts.layer_split.size(), " entries but there are ", devices.size(), " devices");
  // Layer counts, or relative shares; by default each device's free memory.
  const std::vector<double> shares =
      !opts.layer_split.empty() ? std::vector<double>(opts.layer_split.begin(), opts.layer_split.end())
      : devices.size() == 1     ? std::vector<double>{1.0}
                                : free_memory_shares(devices);
  const std::vector<int> split = split_layers(shares, config_.n_layers, "--layer-split");
  HS_CHECK(opts.only_shard < static_cast<int>(split.size()), "shard ", opts.only_shard, " asked for, the split has ",
           split.size(), " shards");
  int begin = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    if (opts.only_shard >= 0 && static_cast<int>(i) != opts.only_shard) {
      begin += split[i];
      continue;
    }
    Ops* ops = nullptr;
    for (auto& [name, o] : ops_)
      if (name == devices[i]) ops = o.get();
    if (!ops) {
      ops_.emplace_back(devices[i], make_ops(devices[i], *pool_, opts));
      ops = ops_.back().second.get();
    }
    const int end = begin + split[i];
    ShardWeights w = load_shard_weights(*source_, begin, end, i == 0, i + 1 == split.size(), ops->weight_form(),
                                        [ops](Mat& m) { ops->adopt_weight(m); });
    const int k = config_.n_active_experts;
    if (k < model_k)  // hash layers: keep the first k experts of each token's row
      for (auto& L : w.layers) {
        if (L.tid2eid.empty()) continue;
        const size_t V = L.tid2eid.size() / static_cast<size_t>(model_k);
        for (size_t t = 0; t < V; ++t)
          for (int j = 0; j < k; ++j) L.tid2eid[t * k + j] = L.tid2eid[t * model_k + j];
        L.tid2eid.resize(V * k);
      }
    shards_.push_back(std::make_unique<Shard>(config_, std::move(w), *ops, opts.numerics, StatePoolOptions{}, false));
    shards_.back()->set_graphs(opts.cuda_graphs);
    begin = end;
  }
  // The state pools, once every weight is on its device: shards sharing a backend split what
  // it suggests (or each takes --state-memory).
  for (size_t i = 0; i < shards_.size(); ++i) {
    StatePoolOptions po;
    po.slots = opts.max_seqs;
    po.max_context = opts.max_context;
    po.max_rollback = opts.max_rollback;
    po.memory_bytes = opts.state_memory;
    if (po.memory_bytes == 0) {
      int64_t sharing = 0;
      for (size_t j = i; j < shards_.size(); ++j) sharing += &shards_[j]->ops() == &shards_[i]->ops();
      po.memory_bytes = -std::max<int64_t>(1, sharing);  // StatePool: the backend's hint over this many shards
    }
    shards_[i]->init_state(po);
  }
  shard_offset_ = std::max(opts.only_shard, 0);
  link_ = opts.link;
  if (link_ && link_->rank() == 0) log_ = std::make_shared<SequenceLog>();
  if ((want_mtp || want_dspark) && opts.only_shard < 0) {
    Shard& last = *shards_.back();
    Ops* dops = &last.ops();
    if (!opts.draft_device.empty()) {  // --draft-device: a backend of a shard, or one of its own
      dops = nullptr;
      for (auto& [name, o] : ops_)
        if (name == opts.draft_device) dops = o.get();
      if (!dops) {  // (not in ops_: no shard runs there, so no pipeline stage or lock for it)
        try {
          draft_ops_ = make_ops(opts.draft_device, *pool_, opts);
        } catch (const std::exception& e) {
          fail("--draft-device: ", e.what());
        }
        dops = draft_ops_.get();
      }
    }
    Ops& ops = *dops;
    // The embedding and the head the drafter shares with the model, on its backend.
    auto copy_global = [&](const char* name, Mat& m) {
      for (const TensorSpec& t : global_tensor_specs(config_))
        if (t.name == name) {
          m.rows = t.shape[0];
          m.cols = t.shape[1];
          if (ops.weight_form() == WeightForm::Native) m.native = source_->native(t);
          if (!m.native) m.w = source_->read_f32(t);
          ops.adopt_weight(m);
          return;
        }
      fail("internal: no global tensor ", name);
    };
    const Mat* embed = &shards_.front()->embedding();
    if (&shards_.front()->ops() != &ops) {
      copy_global("token_embd", draft_embed_);
      embed = &draft_embed_;
    }
    const Mat* head = &last.head();
    if (&last.ops() != &ops) {
      copy_global("output", draft_head_);
      head = &draft_head_;
    }
    const ModelSource& dsrc = draft_source_ ? *draft_source_ : *source_;
    auto adopt = [&ops](Mat& m) { ops.adopt_weight(m); };
    ModelConfig dc = config_;  // (the expert count as overridden) with the drafter's own keys
    if (want_dspark) {
      dc.dspark = dsrc.config().dspark;
      dspark_ = std::make_unique<DsparkDrafter>(dc, load_dspark_weights(dsrc, ops.weight_form(), adopt), ops, *embed,
                                                *head, opts.numerics);
    } else {
      StatePoolOptions po;
      po.slots = opts.max_seqs;
      po.max_context = opts.max_context;
      po.max_rollback = opts.max_rollback;
      po.packed = opts.numerics == Numerics::Model;
      dc.mtp_ratio = dsrc.config().mtp_ratio;  // the drafter's own schedule entry
      drafter_ = std::make_unique<MtpDrafter>(dc, load_mtp_weights(dsrc, ops.weight_form(), adopt), ops, *embed,
                                              *head, opts.numerics, mtp_pool_options(dc, po));
    }
  }
  // What decides the state's bits: the weights, the numerics and row forms, the expert count,
  // where every layer runs (CPU and CUDA kernels round differently), the page size.
  {
    std::ostringstream k;
    k << std::hex << source_->fingerprint() << std::dec << "|numerics " << static_cast<int>(opts.numerics)
      << "|experts " << config_.n_active_experts << "|page " << shards_.front()->pool().layout().page;
    for (const auto& sh : shards_)
      k << "|[" << sh->layer_begin() << "," << sh->layer_end() << ") " << (sh->ops().device_index() < 0 ? "cpu" : "cuda");
    state_key_ = k.str();
  }
  for (size_t i = 0; i < ops_.size(); ++i) ops_locks_.push_back(std::make_unique<std::mutex>());
  // A pipeline pays off only when the shards sit on different devices (ops_ has one backend per device).
  micro_batches_ = opts.pipeline_micro_batches > 0 ? opts.pipeline_micro_batches
                   : link_                           ? link_->world()
                   : ops_.size() >= 2                ? n_shards()
                                                     : 1;
  setup_handoffs(opts.peer_access);
}

// Which shard boundaries hand the HC state over device to device (EngineOptions::peer_access).
void Engine::setup_handoffs(const std::string& mode) {
  handoffs_.clear();
  for (size_t s = 0; s + 1 < shards_.size(); ++s) {
    Ops &from = shards_[s]->ops(), &to = shards_[s + 1]->ops();
    const int a = from.device_index(), b = to.device_index();
    if (a < 0 || b < 0 || a == b || mode == "off") {
      handoffs_.push_back(make_handoff(from, to, false));
      continue;
    }
#ifdef HS_HAVE_CUDA
    if (mode == "on")
      HS_CHECK(cuda::can_access_peer(a, b) && cuda::can_access_peer(b, a), "--peer-access on: cuda:", a,
               " and cuda:", b, " cannot reach each other's memory (cudaDeviceCanAccessPeer says no); use "
               "--peer-access auto (copies staged by the driver) or off");
    // Where peer access is impossible the copy still works, staged by the driver.
    cuda::enable_peer_access(a, b);
    cuda::enable_peer_access(b, a);
#endif
    handoffs_.push_back(make_handoff(from, to, true));
  }
}

const std::string& Engine::shard_device(int i) const {
  const Ops* o = &shards_.at(static_cast<size_t>(i))->ops();
  for (const auto& [name, ops] : ops_)
    if (ops.get() == o) return name;
  fail("internal: shard ", i, " has no device");
}

int64_t Engine::padded_rows(int64_t rows) const {
  int64_t p = rows;
  for (const auto& sh : shards_) p = std::max(p, sh->ops().padded_rows(rows));
  return p;
}

StepGraphStats Engine::graph_stats() const {
  StepGraphStats t;
  for (const auto& sh : shards_) {
    const StepGraphStats& g = sh->graph_stats();
    t.eager += g.eager;
    t.captured += g.captured;
    t.replayed += g.replayed;
    t.failed += g.failed;
    t.cached += g.cached;
    t.nodes += g.nodes;
  }
  return t;
}

bool Engine::complete() const {
  return !shards_.empty() && shards_.front()->owns_embedding() && shards_.back()->owns_output();
}

// (On a pipeline of ranks the logits come home through rank 0's link: it samples on the host.)
bool Engine::can_sample() const { return !link_ && !shards_.empty() && shards_.back()->ops().can_sample(); }

void Engine::check_items(std::span<const StepItem> items) const {
  HS_CHECK(!items.empty(), "a step needs at least one sequence");
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    const std::string what = batch_label(i, items.size());
    HS_CHECK(it.seq != nullptr, what, "no sequence given");
    HS_CHECK(it.seq->shards.size() == shards_.size(), what, "sequence has ", it.seq->shards.size(),
             " shard states, engine has ", shards_.size(), " shards");
    HS_CHECK(it.n > 0 && it.tokens != nullptr, what, "step needs at least one token");
    HS_CHECK(!it.taps || dspark_, what, "DSpark taps asked for, but this engine has no DSpark drafter");
    HS_CHECK(!link_ || !it.hidden, what, "the drafter's input (hidden) is not available on a pipeline of ranks");
    const bool logits_here = !link_ || link_->rank() == 0;  // (a rank > 0 sends them to rank 0)
    HS_CHECK(!logits_here || !it.output || it.logits != nullptr || (it.sample && can_sample()), what,
             "no buffer for the logits given");
    if (it.output && it.sample) {
      HS_CHECK(!it.all_positions, what, "device sampling takes the last position only, not all_positions");
      const DeviceSampling& d = it.sample->spec;
      HS_CHECK(std::isfinite(d.temperature) && d.top_k >= 0 && d.top_p > 0 && d.top_p <= 1 && d.min_p >= 0 &&
                   d.min_p <= 1 && d.u >= 0 && d.u < 1,
               what, "bad device sampling parameters: temperature ", d.temperature, ", top_k ", d.top_k, ", top_p ",
               d.top_p, ", min_p ", d.min_p, ", u ", d.u);
    }
    for (size_t s = 0; s < shards_.size(); ++s) {
      shards_[s]->check_state(*it.seq->shards[s], what);
      HS_CHECK(it.seq->shards[s]->n_past() == it.seq->n_past(), what, "shard ", s, " of the sequence is at position ",
               it.seq->shards[s]->n_past(), ", shard 0 at ", it.seq->n_past(),
               " (a step failed half-way through the pipeline): reset the sequence");
    }
    for (size_t j = 0; j < i; ++j)
      HS_CHECK(items[j].seq != it.seq, "sequence #", j, " and #", i,
               " of the batch are the same sequence: each may appear once per step");
    shards_.front()->check_tokens(it.tokens, it.n, it.seq->n_past(), what);
  }
}

// The HC state buffers of a micro-batch: X0 (or a new one) on the first shard's backend, and a
// new one wherever the backend changes. Allocated up front, before any stage runs: the stages
// of a pipeline run on other threads, and each leaves its backend's scratch stack as it found it.
void Engine::prepare(Micro& mb, HcState X0) {
  const int64_t per = config_.hc_mult * config_.dim;
  mb.X.clear();
  mb.flights.assign(shards_.empty() ? 0 : shards_.size() - 1, HandoffFlight{});
  for (const auto& sh : shards_) {
    Ops& o = sh->ops();
    if (mb.X.empty() && X0.data) mb.X.push_back(X0);
    else if (!mb.X.empty() && mb.X.back().backend == &o) mb.X.push_back(mb.X.back());
    else mb.X.push_back(HcState{o.alloc((mb.rows + mb.pad) * per), mb.rows + mb.pad, per, &o});
  }
}

// Shard s over micro-batch mb: take the state over from the previous backend (or embed the
// tokens), run the layers, hand the state on (or write the logits).
void Engine::run_stage(size_t s, Micro& mb, bool embed, bool logits) {
  Shard& sh = *shards_[s];
  Ops& ops = sh.ops();
  size_t b = 0;
  while (ops_[b].second.get() != &ops) ++b;
  // Shards on one backend take turns: its scratch is one stack and CpuOps shares one thread pool.
  std::lock_guard<std::mutex> lk(*ops_locks_[b]);
  const int64_t count = (mb.rows + mb.pad) * config_.hc_mult * config_.dim;
  const HcState& X = mb.X[s];
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t per = config_.hc_mult * config_.dim;
  if (s == 0 && embed) {
    std::vector<int32_t> tokens;
    for (const StepItem& it : mb.items) tokens.insert(tokens.end(), it.tokens, it.tokens + it.n);
    tokens.resize(static_cast<size_t>(mb.rows + mb.pad), 0);  // padding rows: token 0
    sh.embed(tokens.data(), mb.rows + mb.pad, X.data);
  } else if (s > 0) {
    handoffs_[s - 1]->receive(X.data, count, mb.flights[s - 1]);
  } else if (link_) {
    // The items' rows from the previous rank; each rank pads for its own backend, with zero rows
    // (finite: padding rows are computed on and never read).
    link_->recv_state(ops, X.data, mb.rows * per);
    if (mb.pad > 0) {
      const std::vector<float> zeros(static_cast<size_t>(mb.pad * per), 0.0f);
      ops.upload(X.data + mb.rows * per, zeros.data(), mb.pad * per);
    }
  }
  std::vector<SeqRows> seqs;
  for (const StepItem& it : mb.items) seqs.push_back({it.seq->shards[s].get(), it.tokens, it.n});
  // The DSpark taps: the items' rows of the HC state after each target layer on this shard,
  // averaged over the hc streams on the backend (Shard::set_taps), downloaded after the step.
  const std::vector<int>* tl = nullptr;
  for (const StepItem& it : mb.items)
    if (it.taps) tl = &dspark_->dspark().target_layers;
  auto holds = [&sh](int l) { return l >= sh.layer_begin() && l < sh.layer_end(); };
  if (tl && std::none_of(tl->begin(), tl->end(), holds)) tl = nullptr;
  struct ClearTaps {
    Shard* sh;
    ~ClearTaps() {
      if (sh) sh->set_taps({});
    }
  } clear{tl ? &sh : nullptr};
  if (tl) sh.set_taps(*tl);
  sh.forward_batch(seqs, X, mb.pad);
  if (tl) {
    const int64_t D = config_.dim, T = static_cast<int64_t>(tl->size());
    std::vector<float> host(static_cast<size_t>(mb.rows * T * D));
    ops.download(host.data(), sh.taps(), mb.rows * T * D);
    int64_t row = 0;
    for (const StepItem& it : mb.items) {
      for (int64_t r = 0; it.taps && r < it.n; ++r)
        for (int64_t t = 0; t < T; ++t)
          if (holds((*tl)[t]))
            std::copy_n(host.data() + ((row + r) * T + t) * D, D, it.taps + (r * T + t) * D);
      row += it.n;
    }
  }
  if (s + 1 < shards_.size()) handoffs_[s]->send(X.data, mb.X[s + 1].data, count, mb.flights[s]);
  else if (link_ && !sh.owns_output()) link_->send_state(ops, X.data, mb.rows * per);
  if (s + 1 == shards_.size() && logits && sh.owns_output()) write_logits(mb);
  if (stage_timing_) {
    ops.synchronize();
    stage_seconds_[s] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

namespace {

using RowRuns = std::vector<std::pair<int64_t, int64_t>>;  // (first row, rows), ascending

void add_row_run(RowRuns& runs, int64_t first, int64_t k) {
  if (!runs.empty() && runs.back().first + runs.back().second == first) runs.back().second += k;
  else runs.emplace_back(first, k);
}

// The rows `runs` of x ([.., per], backend memory) as one block: in place when they are one
// run, else gathered into new scratch.
const float* gather_rows(Ops& ops, const float* x, int64_t per, const RowRuns& runs) {
  if (runs.size() == 1) return x + runs.front().first * per;
  int64_t total = 0;
  for (const auto& r : runs) total += r.second;
  float* g = ops.alloc(total * per);
  int64_t at = 0;
  for (const auto& [first, k] : runs) {
    ops.copy(g + at * per, x + first * per, k * per);
    at += k;
  }
  return g;
}

}  // namespace

// The logits of every wanted row (all of an all_positions item, else its last) in one pass of
// the head over those rows, gathered first when they are not one run. Items asking for device
// sampling (where the backend can) get their token in one Ops::sample over their rows instead
// of their logits; the others' logits are downloaded.
void Engine::write_logits(Micro& mb) {
  Shard& last = *shards_.back();
  Ops& ops = last.ops();
  const int64_t per = config_.hc_mult * config_.dim, V = config_.vocab_size;
  const bool device = ops.can_sample();
  RowRuns runs, sample_runs;  // rows of the state to run the head over; rows of its output to sample
  std::vector<DeviceSampling> specs;
  int64_t row = 0, wanted = 0;
  for (const StepItem& it : mb.items) {  // the drafter's input first (StepItem::hidden)
    if (it.hidden) ops.download(it.hidden, mb.X.back().data + row * per, it.n * per);
    row += it.n;
  }
  row = 0;
  for (const StepItem& it : mb.items) {
    if (!it.output) {
      row += it.n;
      continue;
    }
    const int64_t first = it.all_positions ? row : row + it.n - 1, k = it.all_positions ? it.n : 1;
    add_row_run(runs, first, k);
    if (it.sample) {  // (an item with output)
      it.sample->sampled = device;
      if (device) {
        add_row_run(sample_runs, wanted, 1);
        specs.push_back(it.sample->spec);
      }
    }
    row += it.n;
    wanted += k;
  }
  if (runs.empty()) return;  // only prefill chunks without output
  const size_t mark = ops.mark();
  const float* H = gather_rows(ops, mb.X.back().data, per, runs);
  float* out = ops.alloc(wanted * V);
  last.logits(H, wanted, out);
  if (link_) {  // the last rank: sent to rank 0 at the end of the step (the step releases the scratch)
    mb.out = out;
    mb.out_rows = wanted;
    return;
  }
  if (!specs.empty()) {
    std::vector<int32_t> tokens(specs.size());
    const bool done = ops.sample(gather_rows(ops, out, V, sample_runs), static_cast<int64_t>(specs.size()), V, specs,
                                 tokens.data());
    HS_CHECK(done, "internal: backend ", ops.name(), " says it can sample but did not");
    size_t j = 0;
    for (const StepItem& it : mb.items)
      if (it.output && it.sample) it.sample->token = tokens[j++];
  }
  scatter_logits(mb, out);
  ops.release_to(mark);
}

// The logits rows of mb's items (out: [wanted rows, vocab] on the last local shard's backend)
// into their buffers; items sampled on the device have none.
void Engine::scatter_logits(const Micro& mb, const float* out) {
  Ops& ops = shards_.back()->ops();
  const int64_t V = config_.vocab_size;
  int64_t at = 0;
  for (const StepItem& it : mb.items) {
    if (!it.output) continue;
    const int64_t k = it.all_positions ? it.n : 1;
    if (!(it.sample && it.sample->sampled)) ops.download(it.logits, out + at * V, k * V);
    at += k;
  }
}

PipelineRunner& Engine::runner() {
  if (!runner_)
    runner_ = std::make_unique<PipelineRunner>(n_shards(), [this](int s) { pin_device(shard_device(s)); });
  return *runner_;
}

void Engine::step(Sequence& seq, const int32_t* tokens, int64_t n, float* logits, bool all_positions) {
  const StepItem item{&seq, tokens, n, logits, all_positions};
  step_batch({&item, 1});
}

void Engine::step_batch(std::span<const StepItem> items) {
  HS_CHECK(complete() || (link_ && link_->rank() == 0), "this engine holds only shard ", shard_offset_, " (layers [",
           shards_.front()->layer_begin(), ", ", shards_.back()->layer_end(),
           ")) of a multi-process pipeline: rank 0 steps it");
  run_step(items, micro_batches_);
}

void Engine::check_pages(std::span<const StepItem> items) const {
  for (size_t s = 0; s < shards_.size(); ++s) {
    const StatePool& p = shards_[s]->pool();
    int64_t cmp = 0, swa = 0;
    for (const StepItem& it : items) {
      const auto [c, w] = p.blocks_needed(*it.seq->shards[s], it.n);
      cmp += c;
      swa += w;
    }
    const StatePoolStats st = p.stats();
    if (cmp > st.cmp_total - st.cmp_used || swa > st.swa_total - st.swa_used)
      throw StatePoolFull(cat("the state pool of shard ", s + static_cast<size_t>(shard_offset_), " is full: this step needs ", cmp, " more pages (",
                              st.cmp_total - st.cmp_used, " of ", st.cmp_total, " free) and ", swa, " SWA pages (",
                              st.swa_total - st.swa_used, " of ", st.swa_total, " free)"));
  }
}

void Engine::run_step(std::span<const StepItem> items, int micro_batches) {
  check_items(items);
  // Pages for every item on every shard, before anything runs: a step that cannot have them
  // changes nothing (the scheduler then preempts a sequence). (The ranks of a pipeline budget
  // alike: limit_state.)
  check_pages(items);
  const size_t stages = link_ ? static_cast<size_t>(link_->world()) : shards_.size();
  const size_t M = stages < 2 ? 1 : std::min<size_t>(static_cast<size_t>(micro_batches), items.size());
  struct EndStep {  // (however the step ends)
    RankLink* link;
    ~EndStep() {
      if (link) link->end_step();
    }
  } end_step{log_ ? link_ : nullptr};
  if (log_) link_->send_plan(make_plan(items, static_cast<int>(M)));

  int64_t total = 0;
  for (const StepItem& it : items) total += it.n;
  std::vector<Micro> mbs;
  size_t begin = 0;
  int64_t done = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    done += items[i].n;
    const size_t groups_after = M - mbs.size() - 1, items_after = items.size() - i - 1;
    const bool share_reached = done * static_cast<int64_t>(M) >= total * static_cast<int64_t>(mbs.size() + 1);
    if (items_after == 0 || (groups_after > 0 && (items_after == groups_after || share_reached))) {
      Micro mb;
      mb.items = items.subspan(begin, i + 1 - begin);
      bool decode = true;
      for (const StepItem& it : mb.items) {
        mb.rows += it.n;
        decode = decode && it.n == 1;
      }
      if (decode) mb.pad = padded_rows(mb.rows) - mb.rows;
      mbs.push_back(std::move(mb));
      begin = i + 1;
    }
  }
  // Every backend's scratch is returned at the end, also on failure.
  std::vector<size_t> marks;
  for (auto& [name, o] : ops_) marks.push_back(o->mark());
  auto release = [&] {
    for (size_t i = 0; i < ops_.size(); ++i) ops_[i].second->release_to(marks[i]);
  };
  try {
    for (Micro& mb : mbs) prepare(mb, HcState{});
    if (link_) {  // one shard here: the micro-batches one after the other, the ranks overlapping them
      for (Micro& mb : mbs) run_stage(0, mb, shards_.front()->owns_embedding(), true);
      exchange_outputs(mbs);
    } else if (mbs.size() == 1) {
      for (size_t s = 0; s < shards_.size(); ++s) run_stage(s, mbs[0], true, true);
    } else {
      runner().run(static_cast<int>(mbs.size()),
                   [&](int s, int m) { run_stage(static_cast<size_t>(s), mbs[static_cast<size_t>(m)], true, true); });
    }
  } catch (const PipelineDown&) {
    release();
    throw;
  } catch (const std::exception& e) {
    release();
    // The other ranks are inside this step, waiting on this one: the pipeline cannot go on.
    if (link_) link_->fail(cat("rank ", link_->rank(), ": ", e.what()));
    throw;
  } catch (...) {
    release();
    throw;
  }
  release();
}

int64_t Engine::weight_bytes_per_token() const {
  int64_t b = 0;
  for (const auto& s : shards_) b += s->weight_bytes_per_token();
  return b;
}

double Engine::copy_bandwidth_gbs() {
  for (auto& [name, o] : ops_)
    if (const double g = o->copy_bandwidth_gbs(); g > 0) return g;
  return 0.0;
}

void Engine::set_stage_timing(bool on) {
  stage_timing_ = on;
  stage_seconds_.assign(shards_.size(), 0.0);
}

void Engine::set_profiling(bool on) {
  for (auto& [name, o] : ops_) o->set_profiling(on);
}

std::string Engine::profile_report() {
  std::string out;
  for (auto& [name, o] : ops_) {
    const std::string r = o->profile_report();
    if (r.empty()) continue;
    out += name;  // (separate appends: GCC 12 warns falsely on a + chain here)
    out += ":\n";
    out += r;
  }
  return out;
}

std::vector<int64_t> parse_chunk_spec(const std::string& spec, int64_t total) {
  std::vector<int64_t> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    long long v = std::strtoll(item.c_str(), &end, 10);
    HS_CHECK(!item.empty() && end && *end == '\0' && v > 0, "chunk spec '", spec, "': '", item,
             "' is not a positive integer");
    out.push_back(v);
  }
  HS_CHECK(!out.empty(), "chunk spec is empty");
  if (out.size() == 1 && spec.find(',') == std::string::npos) {
    const int64_t k = out[0];
    out.clear();
    for (int64_t done = 0; done < total; done += k) out.push_back(std::min(k, total - done));
    return out;
  }
  const int64_t sum = std::accumulate(out.begin(), out.end(), int64_t{0});
  HS_CHECK(sum == total, "chunk spec '", spec, "' sums to ", sum, " but there are ", total, " tokens");
  return out;
}

}  // namespace hs
