#include "engine/engine.h"

#include <numeric>
#include <sstream>

#include "util/error.h"

namespace hs {

std::unique_ptr<Ops> make_ops(const std::string& device, ThreadPool& pool, Numerics numerics) {
  if (device == "cpu") return std::make_unique<CpuOps>(pool);
  if (device.rfind("cuda:", 0) == 0) {
    const std::string id = device.substr(5);
    HS_CHECK(!id.empty() && id.find_first_not_of("0123456789") == std::string::npos, "device '", device,
             "': expected cuda:N");
#ifdef HS_HAVE_CUDA
    HS_CHECK(numerics == Numerics::Reference, "--numerics model is not implemented on CUDA yet (use --numerics reference)");
    return make_cuda_ops(std::stoi(id), pool);
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
  pool_ = std::make_unique<ThreadPool>(opts.threads);
  ops_ = make_ops(opts.device, *pool_, opts.numerics);
  std::vector<int> split = opts.layer_split;
  if (split.empty()) split = {config_.n_layers};
  int total = 0;
  for (int s : split) {
    HS_CHECK(s > 0, "layer split: every shard needs at least one layer");
    total += s;
  }
  HS_CHECK(total == config_.n_layers, "layer split sums to ", total, " layers, the model has ", config_.n_layers);
  int begin = 0;
  for (size_t i = 0; i < split.size(); ++i) {
    const int end = begin + split[i];
    ShardWeights w = load_shard_weights(*source_, begin, end, i == 0, i + 1 == split.size());
    shards_.push_back(std::make_unique<Shard>(config_, std::move(w), *ops_, opts.numerics));
    begin = end;
  }
}

std::unique_ptr<Sequence> Engine::new_sequence() const {
  auto s = std::make_unique<Sequence>();
  for (const auto& sh : shards_) s->shards.push_back(sh->new_sequence());
  return s;
}

void Engine::step(Sequence& seq, const int32_t* tokens, int64_t n, float* logits, bool all_positions) {
  HS_CHECK(seq.shards.size() == shards_.size(), "sequence has ", seq.shards.size(), " shard states, engine has ",
           shards_.size(), " shards");
  HS_CHECK(n > 0, "step needs at least one token");
  for (int64_t t = 0; t < n; ++t)
    HS_CHECK(tokens[t] >= 0 && tokens[t] < config_.vocab_size, "token id ", tokens[t], " (input position ", t,
             ") is outside the vocabulary [0, ", config_.vocab_size, ")");
  // The HC state handed from shard to shard, and the logits, in backend memory.
  const size_t mark = ops_->mark();
  const int64_t per = config_.hc_mult * config_.dim;
  float* X = ops_->alloc(n * per);
  const int64_t rows = all_positions ? n : 1;
  float* dev_logits = ops_->alloc(rows * config_.vocab_size);
  try {
    shards_.front()->embed(tokens, n, X);
    for (size_t i = 0; i < shards_.size(); ++i) shards_[i]->forward(*seq.shards[i], tokens, n, X);
    shards_.back()->logits(X + (n - rows) * per, rows, dev_logits);
    ops_->download(logits, dev_logits, rows * config_.vocab_size);
  } catch (...) {
    ops_->release_to(mark);
    throw;
  }
  ops_->release_to(mark);
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
