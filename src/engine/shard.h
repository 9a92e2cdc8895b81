// A Shard: a contiguous layer range of one model on one backend. It owns its weights and the
// state pool of its layers (state_pool.h), which holds every sequence's state on the shard. Shard 0 owns the embedding, the last shard the
// output head; between shards only the HC state [n, hc, D] travels.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/state_pool.h"
#include "engine/step_graphs.h"
#include "engine/weights.h"
#include "model/config.h"

namespace hs {

// The HC state [n_tokens, hc, D] handed from one shard to the next, in the memory of the
// backend that holds it. A shard refuses a state of the wrong size or from another backend:
// nothing is ever resized, and nothing falls back to the embedding.
struct HcState {
  float* data = nullptr;
  int64_t n_tokens = 0;
  int64_t width = 0;  // hc * D
  const Ops* backend = nullptr;
};

// One sequence's rows in a batched pass over a shard: its state on this shard, its tokens
// (they drive the hash-routed layers), and how many rows it has (1 decoding, k for a prefill
// chunk). A batch's rows are the sequences' rows concatenated in this order.
struct SeqRows {
  SequenceState* state = nullptr;
  const int32_t* tokens = nullptr;
  int64_t n = 0;
};

// How errors name member i of a batch of `count`: "" for a batch of one (the single-sequence
// calls), else "sequence #i of the batch: ".
std::string batch_label(size_t i, size_t count);

class Shard {
 public:
  // make_pool false: the pool is made later by init_state() (the engine makes every shard's
  // pool once all weights are loaded, so a pool's share of a GPU is what the weights left).
  Shard(const ModelConfig& config, ShardWeights weights, Ops& ops, Numerics numerics = Numerics::Reference,
        const StatePoolOptions& state = {}, bool make_pool = true);
  ~Shard();

  const ModelConfig& config() const { return config_; }
  int layer_begin() const { return w_.begin; }
  int layer_end() const { return w_.end; }
  bool owns_embedding() const { return w_.has_embed; }
  bool owns_output() const { return w_.has_head; }
  // The embedding table / output head (shard 0 / the last shard): the MTP drafter shares them.
  const Mat& embedding() const { return w_.embed; }
  const Mat& head() const { return w_.head; }

  // A new empty sequence in this shard's pool (throws when every slot is taken).
  std::unique_ptr<SequenceState> new_sequence();
  void init_state(const StatePoolOptions& state);
  StatePool& pool() const;

  // X [n, hc, D] = the embedding of tokens copied into every stream (shard 0 only).
  void embed(const int32_t* tokens, int64_t n, float* X);
  // Runs this shard's layers over several sequences at once: X [sum n + pad, hc, D] holds their
  // rows concatenated, then `pad` padding rows (ops.h StepRows). Row-wise work (HC, norms,
  // every matmul, RoPE, MoE) runs once over all rows; the state ops (KV store, compressors,
  // indexer top-k, attention) run once per layer over all rows too, each row reading its own
  // sequence's pages. Every sequence's n_past advances by its n. Everything is checked, and the
  // pages reserved, before any state changes (StatePoolFull when the pool lacks them); a
  // sequence may appear only once.
  void forward_batch(std::span<const SeqRows> seqs, float* X, int64_t pad = 0);
  // The same, checking the handed-over state first (the pipeline's entry point).
  void forward_batch(std::span<const SeqRows> seqs, const HcState& X, int64_t pad = 0);
  // A batch of one sequence (n tokens at positions seq.n_past..).
  void forward(SequenceState& seq, const int32_t* tokens, int64_t n, float* X);
  void forward(SequenceState& seq, const int32_t* tokens, int64_t n, const HcState& X);
  // Throws unless `seq` was made for this shard's layers / unless every id is inside the
  // vocabulary (p0: the first token's position); `what` prefixes the error (batch_label).
  void check_state(const SequenceState& seq, const std::string& what = "") const;
  void check_tokens(const int32_t* tokens, int64_t n, int64_t p0, const std::string& what = "") const;
  Ops& ops() const { return ops_; }
  // Called with the HC state entering each layer (for bisecting against reference dumps).
  using LayerObserver = std::function<void(int layer, const float* X, int64_t n)>;
  void set_layer_observer(LayerObserver f) { observer_ = std::move(f); }
  // Called after each indexer top-k with the rows' positions and their selections [n, K]
  // (descending score, -1 padded) on the host; what it leaves in `sel` is what attention reads.
  // Lets a test tell selection differences (near-equal scores at the cut) from arithmetic
  // ones (tests/test_long_context.cpp). A step with a tap runs op by op (no graphs).
  using IndexerTap = std::function<void(int layer, std::span<const int64_t> pos, std::vector<int32_t>& sel, int K)>;
  void set_indexer_tap(IndexerTap f) { indexer_tap_ = std::move(f); }
  // The DSpark drafter's taps (Engine::run_stage): while `layers` is not empty, every step writes,
  // after each of those layers that is this shard's, the mean of each row's hc streams to
  // taps()[row, t, :] (t: the layer's index in `layers`; backend memory, [rows, T, D]). It is an
  // op of the step, so a decode step with taps still runs as a captured graph (keyed by it).
  void set_taps(std::vector<int> layers) { tap_layers_ = std::move(layers); }
  const float* taps() const { return tap_buf_ ? static_cast<const float*>(tap_buf_->data()) : nullptr; }
  // Weight bytes one decode token reads in this shard on its backend: every dense matrix and
  // vector, k of the E experts of each stack, one embedding row, the whole output head.
  int64_t weight_bytes_per_token() const;
  // logits [n, vocab] from X (last shard only).
  void logits(const float* X, int64_t n, float* out);
  // Decode steps as captured graphs on backends that have them (step_graphs.h); on by default.
  void set_graphs(bool on) { graphs_.set_enabled(on); }
  const StepGraphStats& graph_stats() const { return graphs_.stats(); }

 private:
  struct Batch;  // the rows of a forward_batch call: per-sequence offsets, positions, tokens
  // x_in: the normed rows; x: the FP8 linears' input (x_in's FP8 round trip under model numerics).
  void attention(const LayerWeights& L, const Batch& b, const float* x_in, const float* x, float* y);
  void layers(const Batch& b, float* X);  // every layer's ops over the batch's rows

  bool model() const { return numerics_ == Numerics::Model; }
  void bf16(float* x, int64_t n) { if (model()) ops_.round_bf16(x, n); }
  // The BF16 rounding points folded into an op (ops.h Ops::Bf16Round): none in reference numerics,
  // where the *_bf16 ops are the plain ones.
  Ops::Bf16Round rounding(bool in, bool out) const { return model() ? Ops::Bf16Round{in, out} : Ops::Bf16Round{}; }
  // bf16(x); y = rmsnorm(x); bf16(y) (one launch on a device backend).
  void norm_bf16(float* x, const std::vector<float>& w, int64_t rows, float* y) {
    ops_.rmsnorm_bf16(x, w, rows, config_.norm_eps, y, rounding(true, true));
  }

  ModelConfig config_;
  ShardWeights w_;
  Ops& ops_;
  Numerics numerics_;
  RopeTable rope_main_, rope_compress_;
  LayerObserver observer_;
  IndexerTap indexer_tap_;
  std::vector<int> tap_layers_;
  std::unique_ptr<Ops::StateMemory> tap_buf_;  // taps(): [tap_rows_, T, D]
  int64_t tap_rows_ = 0;
  void reserve_taps(int64_t rows);
  std::unique_ptr<StatePool> pool_;  // before graphs_: the graphs name its buffers
  StepGraphs graphs_;  // its graphs name this shard's weights, pool and scratch
};

}  // namespace hs
