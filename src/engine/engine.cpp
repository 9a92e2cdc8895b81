#include "engine/engine.h"

#include "engine/layer_split.h"
#ifdef HS_HAVE_CUDA
#include "kernels/cuda/device_context.h"
#endif

#include <algorithm>
#include <numeric>
#include <sstream>

#include "util/error.h"

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

std::unique_ptr<Ops> make_ops(const std::string& device, ThreadPool& pool, Numerics numerics) {
  if (device == "cpu") return std::make_unique<CpuOps>(pool);
  if (device.rfind("cuda:", 0) == 0) {
    const std::string id = device.substr(5);
    HS_CHECK(!id.empty() && id.find_first_not_of("0123456789") == std::string::npos, "device '", device,
             "': expected cuda:N");
#ifdef HS_HAVE_CUDA
    return make_cuda_ops(std::stoi(id), numerics);
#else
    (void)numerics;
    fail("device '", device, "': this build has no CUDA backend (configure with -DHS_CUDA=ON on a machine with nvcc)");
#endif
  }
  fail("unknown device '", device, "' (expected cpu or cuda:N)");
}

void Sequence::reset() {
  for (auto& s : shards) s->reset();
}

Engine::Engine(const std::string& model_path, const EngineOptions& opts)
    : Engine(ModelSource::open(model_path), opts) {}

Engine::Engine(std::unique_ptr<ModelSource> source, const EngineOptions& opts) : source_(std::move(source)) {
  config_ = source_->config();
  if (opts.numerics == Numerics::Model) {
    bool has_csa = false;
    for (int r : config_.compress_ratios) has_csa |= r == config_.csa_ratio;
    const int id = config_.index_head_dim;
    HS_CHECK(!has_csa || (id > 0 && (id & (id - 1)) == 0), "--numerics model: the indexer's Hadamard rotation needs a "
             "power-of-two index_head_dim, this model has ", id, " (use --numerics reference)");
  }
  const int model_k = config_.n_active_experts;
  if (opts.expert_top_k > 0) {
    HS_CHECK(opts.expert_top_k <= model_k, "--expert-top-k ", opts.expert_top_k, ": the model routes each token to ",
             model_k, " experts; the knob can only lower that (1..", model_k, ")");
    config_.n_active_experts = opts.expert_top_k;
  }
  HS_CHECK(opts.expert_top_k >= 0, "--expert-top-k must be positive (0: the model's), got ", opts.expert_top_k);
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
      ops_.emplace_back(devices[i], make_ops(devices[i], *pool_, opts.numerics));
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
    shards_.push_back(std::make_unique<Shard>(config_, std::move(w), *ops, opts.numerics));
    begin = end;
  }
  shard_offset_ = std::max(opts.only_shard, 0);
}

const std::string& Engine::shard_device(int i) const {
  const Ops* o = &shards_.at(static_cast<size_t>(i))->ops();
  for (const auto& [name, ops] : ops_)
    if (ops.get() == o) return name;
  fail("internal: shard ", i, " has no device");
}

std::unique_ptr<Sequence> Engine::new_sequence() const {
  auto s = std::make_unique<Sequence>();
  for (const auto& sh : shards_) s->shards.push_back(sh->new_sequence());
  return s;
}

bool Engine::complete() const {
  return !shards_.empty() && shards_.front()->owns_embedding() && shards_.back()->owns_output();
}

HcState Engine::forward_shards(Sequence& seq, const int32_t* tokens, int64_t n, HcState X) {
  HS_CHECK(seq.shards.size() == shards_.size(), "sequence has ", seq.shards.size(), " shard states, engine has ",
           shards_.size(), " shards");
  const int64_t per = config_.hc_mult * config_.dim;
  for (size_t i = 0; i < shards_.size(); ++i) {
    Ops& next = shards_[i]->ops();
    if (i > 0 && &next != &shards_[i - 1]->ops()) {  // (the first shard checks the state it is given)
      staging_.resize(static_cast<size_t>(n * per));
      shards_[i - 1]->ops().download(staging_.data(), X.data, n * per);
      X = HcState{next.alloc(n * per), n, per, &next};
      next.upload(X.data, staging_.data(), n * per);
    }
    shards_[i]->forward(*seq.shards[i], tokens, n, X);
  }
  return X;
}

void Engine::step(Sequence& seq, const int32_t* tokens, int64_t n, float* logits, bool all_positions) {
  HS_CHECK(complete(), "this engine holds only shard ", shard_offset_, " (layers [", shards_.front()->layer_begin(),
           ", ", shards_.back()->layer_end(), ")) of a multi-process pipeline: step() needs the whole model");
  HS_CHECK(seq.shards.size() == shards_.size(), "sequence has ", seq.shards.size(), " shard states, engine has ",
           shards_.size(), " shards");
  HS_CHECK(n > 0, "step needs at least one token");
  // The HC state goes from shard to shard in backend memory; between backends it is staged
  // through host memory. Every backend's scratch is returned at the end.
  std::vector<size_t> marks;
  for (auto& [name, o] : ops_) marks.push_back(o->mark());
  auto release = [&] {
    for (size_t i = 0; i < ops_.size(); ++i) ops_[i].second->release_to(marks[i]);
  };
  const int64_t per = config_.hc_mult * config_.dim;
  try {
    Ops* first = &shards_.front()->ops();
    HcState X{first->alloc(n * per), n, per, first};
    shards_.front()->embed(tokens, n, X.data);
    X = forward_shards(seq, tokens, n, X);
    Ops* cur = &shards_.back()->ops();
    const int64_t rows = all_positions ? n : 1;
    float* dev_logits = cur->alloc(rows * config_.vocab_size);
    shards_.back()->logits(X.data + (n - rows) * per, rows, dev_logits);
    cur->download(logits, dev_logits, rows * config_.vocab_size);
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
