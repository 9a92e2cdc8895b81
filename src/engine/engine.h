// Engine: a model loaded as a pipeline of shards (contiguous layer ranges) on backends,
// with per-sequence state. The HC state [n, hc, D] is the only thing handed between shards.
#pragma once
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "engine/cpu_ops.h"
#include "engine/distributed_plan.h"
#include "engine/dspark.h"
#include "engine/shard.h"
#include "engine/shard_handoff.h"
#include "model/source.h"
#include "util/thread_pool.h"

namespace hs {

class RankLink;

struct EngineOptions {
  std::string device = "cpu";     // "cpu" or "cuda:N"
  Numerics numerics = Numerics::Reference;
  int threads = 0;                // 0: all cores
  // Layers per shard (when they sum to n_layers) or relative shares (engine/layer_split.h);
  // empty: shares = the devices' free memory.
  std::vector<int> layer_split;
  // One device per shard ("cpu", "cuda:N"; the same device may appear twice). Empty: `device`
  // for every shard.
  std::vector<std::string> devices;
  // >= 0: build only this shard of the split (only its layers' weights are loaded; the other
  // shards live in other processes, engine/distributed.h), reaching the others through `link`
  // (not owned; DistributedEngine makes both). Rank 0 then steps the whole pipeline with
  // step_batch; the other ranks run rank 0's plans (step_planned).
  int only_shard = -1;
  RankLink* link = nullptr;
  // > 0: route every token to this many experts instead of the model's k (an approximation
  // that trades quality for speed; applied identically in every shard; hash layers use the
  // first N of their k experts). 0: the model's.
  int expert_top_k = 0;
  // Micro-batches a step_batch is cut into to run through the shards as a pipeline (one worker
  // thread per shard): shard s works on micro-batch m while shard s+1 works on m-1, so two
  // devices are not idle half the time. 0: the number of shards when they sit on at least two
  // distinct devices, else 1 (no pipeline). Shards that share a backend take turns on it, so on
  // cpu,cpu a value > 1 runs the machinery without any overlap (the tests force it there).
  int pipeline_micro_batches = 0;
  // How the HC state goes between shards on two different GPUs: "auto" a device-to-device copy
  // (direct over NVLink/PCIe where peer access is possible, else staged by the driver through
  // pinned host memory), "on" the same but refusing a pair without peer access, "off" through
  // this engine's host buffer (download, then upload). Nothing waits on the host in the first two.
  std::string peer_access = "auto";
  // Decode steps replayed as captured CUDA graphs (engine/step_graphs.h) on CUDA shards; false:
  // the same step-mode ops, launched one by one.
  bool cuda_graphs = true;
  // Tuning of the CUDA decode MoE for the q2 mix (IQ2_XXS gate/up, Q2_K down): K-splits per block
  // of its tensor-core kernels, {gate/up, down}, each 1, 2, 4 or 8 (0: the measured rule).
  int moe_ksplit[2] = {0, 0};
  // Programmatic dependent launch on CUDA shards (kernels/cuda/launch.cuh): each kernel of a step
  // launches while the one before it runs and waits for it on the device. On by default: +4-5 %
  // at batch-1 decode on an H100, neutral at 8 and 32 sequences (docs/performance.md).
  bool pdl = true;
  // The hand-over between sub-layers (hc_post, the next hc_pre and its norm: Ops::hc_post_pre)
  // as one cluster launch on CUDA shards, for the rows the device runs as clusters at once. The
  // same bits as the three ops; off by default: on an H100 it measured 17.6 us against the three
  // ops' 16.9 at one row (docs/performance.md), and its later form has not been timed yet.
  bool fused_handover = false;
  // The state pools, one per shard (engine/state_pool.h): sequences alive at once, the longest
  // sequence (0: the model's max_position), the bytes of each shard's pool (0: what its backend
  // suggests: a share of RAM on the CPU, most of a GPU's free memory after the weights), and
  // how many tokens truncate() may take back.
  int max_seqs = 32;
  int64_t max_context = 0;
  int64_t state_memory = 0;
  int max_rollback = 16;
  // The speculative-decoding drafter (engine/mtp.h, engine/dspark.h): "off", "mtp" (the model's
  // MTP block; an error when it has none or it does not fit the model), "dspark" (its DSpark
  // drafter, the same), "auto" (dspark when the model has one, else mtp when it has that).
  // It runs on the last shard's backend, or on draft_device.
  std::string draft = "off";
  // Where the drafter runs (cpu or cuda:N; --draft-device); empty: the last shard's device. Its
  // inputs (hidden states, taps) come through host memory, so any device will do; the embedding
  // and the output head it shares with the model are copied there when no shard on it has them.
  std::string draft_device;
  // A drafter file apart from the model (an MTP-only GGUF: antirez's, llama.cpp's); empty: the
  // model's own MTP block. Checked against the model (open_gguf_drafter).
  std::string draft_model;
};

// "auto" | "mtp" | "dspark" | "off" (the --draft option); errors name the value.
std::string parse_draft_kind(const std::string& s);

// "reference" | "model" (the --numerics option); errors name the value.
Numerics parse_numerics(const std::string& s);

// CUDA devices usable by this build (0 without CUDA, a driver or a GPU).
int gpu_count();

// The backend for a device name ("cpu", "cuda:N"); errors name the device.
// "cpu" -> -1, "cuda:N" -> N; anything else throws naming the device.
int parse_device(const std::string& device);
// The backend with `opts`' numerics and kernel tuning (moe_ksplit, pdl) applied.
std::unique_ptr<Ops> make_ops(const std::string& device, ThreadPool& pool, const EngineOptions& opts);
std::unique_ptr<Ops> make_ops(const std::string& device, ThreadPool& pool, Numerics numerics);  // default tuning
#ifdef HS_HAVE_CUDA
std::unique_ptr<Ops> make_cuda_ops(int device, Numerics numerics);  // engine/cuda_ops.cpp
#endif

// What rank 0 did to its sequences since its last step, in order, for the step plan
// (engine/distributed_plan.h); the sequences write to it (their release and reset), and so does
// the engine (fork, truncate).
struct SequenceLog {
  std::mutex mu;
  std::vector<dist::StateOp> ops;
  void add(const dist::StateOp& op);
  std::vector<dist::StateOp> take();
};

// The state of one sequence across all shards: a handle in each shard's pool. Destroy it
// before its engine.
struct Sequence {
  Sequence() = default;
  Sequence(const Sequence&) = delete;
  Sequence& operator=(const Sequence&) = delete;
  ~Sequence();  // (rank 0 of a pipeline: logs its release)
  // Its name in a multi-process pipeline's step plans (rank 0's engine numbers them; -1 elsewhere).
  int64_t id = -1;
  std::shared_ptr<SequenceLog> log;
  std::vector<std::unique_ptr<SequenceState>> shards;
  // The drafter's state (Engine::drafter(); null without one). Its rows lag the model's: row p
  // continues the model's state at p with token p + 1, at position p - draft_offset.
  std::unique_ptr<SequenceState> draft;
  int64_t draft_offset = 0;
  // The DSpark drafter's state (Engine::dspark(); null without one): context rows of committed
  // positions only, so it never rolls back.
  std::unique_ptr<DsparkSequence> dspark;
  int64_t n_past() const { return shards.empty() ? 0 : shards.front()->n_past(); }
  void reset();
};

// A sequence's state at one position on every shard (StatePool::snapshot), for the prefix cache.
struct EngineSnapshot {
  std::vector<PoolSnapshot> shards;
  int64_t n() const { return shards.empty() ? 0 : shards.front().n; }
  int64_t host_bytes() const {
    int64_t b = 0;
    for (const PoolSnapshot& s : shards) b += s.host_bytes();
    return b;
  }
};

// The state pools of an engine's shards, summed (pages of different shards hold different
// layers of the same positions).
struct EngineStateStats {
  int64_t pages_total = 0, pages_used = 0, pages_shared = 0;  // compressed pages
  int64_t swa_pages_total = 0, swa_pages_used = 0;
  int slots_total = 0, slots_used = 0;
  int64_t token_capacity = 0;  // the most tokens one sequence can hold (the tightest shard)
  int64_t bytes_per_token = 0; // compressed-page bytes per position, all shards
};

class PipelineRunner;
class MtpDrafter;
class DsparkDrafter;

// A request to sample an item's last position on the last shard's backend (StepItem::sample):
// `spec` in; `sampled`, `token` out. sampled = true: token holds the id and the item's logits
// were not written. sampled = false (the backend has no sampler, Engine::can_sample()): the
// logits were written as without the request and the caller samples on the host.
struct StepSample {
  DeviceSampling spec;
  bool sampled = false;
  int32_t token = -1;
};

// One sequence's part of a batched step (Engine::step_batch).
struct StepItem {
  Sequence* seq = nullptr;
  const int32_t* tokens = nullptr;  // n tokens, at positions seq->n_past()..
  int64_t n = 0;                    // 1 decoding, k for a prefill chunk
  float* logits = nullptr;          // [n, vocab] when all_positions, else the last position's [vocab]
  bool all_positions = false;
  // Optional (not with all_positions): sample the last position on the device instead of
  // downloading its logits; logits may then be null where can_sample().
  StepSample* sample = nullptr;
  // false: a prefill chunk whose logits nobody reads (not the prompt's last): the head is not run
  // for it, and logits/sample are ignored.
  bool output = true;
  // Optional: the final HC state [n, hc * D] of every row (host memory; before hc_head), what
  // the MTP drafter takes as its input (engine/mtp.h). Written whether or not `output` is.
  float* hidden = nullptr;
  // Optional: the DSpark drafter's taps of every row [n, T * D] (host memory): the mean over the
  // hc streams of the HC state after each of config().dspark.target_layers (engine/dspark.h).
  // Written whether or not `output` is; computed on the shards' backends (a decode step with
  // taps still runs as a captured graph) and downloaded after each shard's part of the step.
  float* taps = nullptr;
};

class Engine {
 public:
  Engine(const std::string& model_path, const EngineOptions& opts);
  // From a source already open (e.g. an in-memory synthetic model).
  Engine(std::unique_ptr<ModelSource> source, const EngineOptions& opts);
  ~Engine();
  const ModelConfig& config() const { return config_; }
  const ModelSource& source() const { return *source_; }
  int n_shards() const { return static_cast<int>(shards_.size()); }
  const std::string& shard_device(int i) const;

  // A new empty sequence (a slot in every shard's pool; throws when none is free).
  std::unique_ptr<Sequence> new_sequence() const;
  // A new sequence holding the first `upto` tokens of src: full pages shared with it, the last
  // partial page and the open windows copied (StatePool::fork). Both continue independently.
  std::unique_ptr<Sequence> fork(const Sequence& src, int64_t upto) const;
  // Rolls seq back to its first n tokens (n >= the furthest it got - max_rollback).
  void truncate(Sequence& seq, int64_t n) const;
  // seq's state now, its full pages shared (release() it, or the pages stay taken). Not on a
  // rank of a multi-process pipeline (the other ranks' state cannot be snapshot from here).
  EngineSnapshot snapshot(const Sequence& seq) const;
  // seq (empty) = the snapshot's state; false, changing nothing, when a shard's pool lacks room.
  bool restore(const EngineSnapshot& snap, Sequence& seq) const;
  void release(EngineSnapshot& snap) const;
  // What identifies this engine's state bits (weights, numerics, layer split and devices,
  // expert top-k, row forms): a prefix-cache entry is reused only under an equal key.
  const std::string& state_key() const { return state_key_; }
  // Whether every shard has the pages for n more tokens of seq (what a step of n rows takes).
  bool can_reserve(const Sequence& seq, int64_t n) const;
  // Pages n more tokens of an empty sequence take on the tightest shard, and that shard's free pages.
  EngineStateStats state_stats() const;
  int64_t pages_for(int64_t n_tokens) const;
  int64_t free_pages() const;
  const StateLayout& state_layout(int shard) const { return shards_.at(static_cast<size_t>(shard))->pool().layout(); }
  Shard& shard(int i) { return *shards_.at(static_cast<size_t>(i)); }
  // Processes n tokens (a prefill chunk or one decode token) and writes logits [n, vocab],
  // or only the last position's [vocab] when all_positions is false (serving). A batch of one.
  void step(Sequence& seq, const int32_t* tokens, int64_t n, float* logits, bool all_positions = true);
  // One forward over several sequences (continuous batching): each shard runs once over all
  // the items' rows, so the weights are streamed once per step, not once per sequence; each
  // sequence advances by its own n and gets the logits step() would give it. Every item is
  // checked (sequence, token ids, shard states; a sequence may appear once) before anything
  // runs. With micro_batches() > 1 the items are cut into that many groups of whole items that
  // flow through the shards as a pipeline. If a step fails while running (a device error),
  // the items' sequences are left half-advanced: reset them.
  void step_batch(std::span<const StepItem> items);
  int micro_batches() const { return micro_batches_; }
  // The MTP drafter (EngineOptions::draft), or null.
  MtpDrafter* drafter() const { return drafter_.get(); }
  // The DSpark drafter (EngineOptions::draft dspark, or auto on a model with one), or null.
  DsparkDrafter* dspark() const { return dspark_.get(); }
  // Whether this engine holds the whole pipeline (embedding to output head).
  bool complete() const;
  // A rank of a multi-process pipeline (EngineOptions::link), or null.
  RankLink* link() const { return link_; }
  // Ranks > 0: one step as rank 0 planned it (the items made from its plan, in its order, and its
  // micro-batch count): the state comes from the previous rank, goes to the next, and the last
  // rank's logits rows go to rank 0.
  void step_planned(std::span<const StepItem> items, int micro_batches);
  // Every shard's pool cut to at most this many compressed / SWA pages (empty pools only): the
  // ranks of a pipeline hold the same sequences, so they budget by the smallest rank's pool.
  void limit_state(int64_t cmp_pages, int64_t swa_pages);
  // Decode steps as CUDA graphs (engine/step_graphs.h), summed over this engine's shards.
  StepGraphStats graph_stats() const;
  // Whether the last shard's backend samples tokens itself (StepItem::sample; Ops::sample).
  bool can_sample() const;

  // Roofline inputs for benchmarks: weight bytes per decode token over all shards, and the
  // measured copy bandwidth of the first device backend (0 when every shard is on the CPU).
  int64_t weight_bytes_per_token() const;
  double copy_bandwidth_gbs();
  // Per-op device time of every backend (bench --profile): start recording, and the tables.
  void set_profiling(bool on);
  std::string profile_report();
  // Split cost for benchmarks: while on, every shard's part of a step (handoff in, layers)
  // waits for its device before the next begins, and its wall time is added to
  // stage_seconds()[s] (the "shard alone" times whose sum a pipelined step is compared with).
  void set_stage_timing(bool on);
  const std::vector<double>& stage_seconds() const { return stage_seconds_; }

 private:
  std::unique_ptr<ModelSource> source_;
  ModelConfig config_;
  std::unique_ptr<ThreadPool> pool_;
  std::vector<std::pair<std::string, std::unique_ptr<Ops>>> ops_;  // one backend per distinct device
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<std::unique_ptr<std::mutex>> ops_locks_;  // per ops_ entry: shards sharing a backend take turns
  int shard_offset_ = 0;        // index in the split of shards_[0] (EngineOptions::only_shard)
  RankLink* link_ = nullptr;    // EngineOptions::link
  std::shared_ptr<SequenceLog> log_;  // rank 0 of a pipeline
  mutable int64_t next_id_ = 0;       // the next Sequence::id (rank 0)
  int micro_batches_ = 1;       // EngineOptions::pipeline_micro_batches, resolved
  std::vector<std::unique_ptr<ShardHandoff>> handoffs_;  // per boundary s: shard s to shard s + 1
  bool stage_timing_ = false;
  std::vector<double> stage_seconds_;
  std::string state_key_;

  struct Micro;  // one micro-batch on its way through the shards (engine.cpp)
  int64_t padded_rows(int64_t rows) const;
  void check_items(std::span<const StepItem> items) const;
  void check_pages(std::span<const StepItem> items) const;
  void run_step(std::span<const StepItem> items, int micro_batches);
  dist::StepPlan make_plan(std::span<const StepItem> items, int micro_batches) const;
  void exchange_outputs(std::vector<Micro>& mbs);  // a pipeline's logits, last rank -> rank 0
  void scatter_logits(const Micro& mb, const float* out);
  void prepare(Micro& mb, HcState X0);
  void setup_handoffs(const std::string& peer_access);
  void run_stage(size_t s, Micro& mb, bool embed, bool logits);
  void write_logits(Micro& mb);
  PipelineRunner& runner();
  std::unique_ptr<ModelSource> draft_source_;  // EngineOptions::draft_model
  std::unique_ptr<Ops> draft_ops_;  // EngineOptions::draft_device where no shard is (before what it holds)
  Mat draft_embed_;  // the drafter's copy of the embedding when shard 0 is on another backend
  Mat draft_head_;   // ... of the output head when the last shard is
  std::unique_ptr<MtpDrafter> drafter_;
  std::unique_ptr<DsparkDrafter> dspark_;
  std::unique_ptr<PipelineRunner> runner_;  // last: its threads stop before anything they use goes
};

// "5,11,1" -> {5,11,1}; "k" -> chunks of k covering total. Errors name the spec.
std::vector<int64_t> parse_chunk_spec(const std::string& spec, int64_t total);

}  // namespace hs
