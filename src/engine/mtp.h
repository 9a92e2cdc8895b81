// The MTP drafter (issue 16): DeepSeek's MTPBlock (inference/model.py of DeepSeek-V4; ds4-model-spec.md
// §7). Given the main model's final HC state X_p (all hc streams, before hc_head) at position p and the
// token t_{p+1} that follows it:
//   e = enorm(embed[t_{p+1}]),  X_in_j = e_proj·e + h_proj·hnorm(X_p,j)   (e broadcast over the streams)
//   X_out = Block_{n_layers}(X_in)   (one ordinary V4 block: its own SWA KV, score-routed MoE)
//   logits = head(norm(hc_head_mtp(X_out)))   (the main model's head; the MTP's own hc_head and norm)
// The logits are the draft distribution for t_{p+2}; X_out is the next draft's input in place of X_{p+1}.
// The block runs at position p (REF's MTP start_pos equals the main model's) through the same Shard code
// as the main layers, with its own state pool, so rollback (truncate) works exactly as for the model.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/shard.h"

namespace hs {

// One sequence's rows of a drafter pass: n positions from its state's n_past on.
struct DraftRows {
  SequenceState* state = nullptr;  // in the drafter's pool (MtpDrafter::new_sequence)
  const int32_t* tokens = nullptr; // [n]: the token after each row's position
  const float* hidden = nullptr;   // [n, hc * D] host memory: the HC state each row continues from
  int64_t n = 0;
};

class MtpDrafter {
 public:
  // embed and head are the main model's (they live on `ops`' backend, as do the weights).
  MtpDrafter(const ModelConfig& main, MtpWeights w, Ops& ops, const Mat& embed, const Mat& head, Numerics numerics,
             const StatePoolOptions& state);
  ~MtpDrafter();
  const ModelConfig& config() const { return main_; }
  std::unique_ptr<SequenceState> new_sequence() { return shard_->new_sequence(); }
  StatePool& pool() const { return shard_->pool(); }
  // Rolls a drafter state back to n rows (StatePool::truncate's limits).
  void truncate(SequenceState& s, int64_t n) const;
  // Runs the block over every sequence's rows (each state advances by its n) and writes, for the
  // last row of each sequence in order, its draft logits [seqs, vocab] and its output HC state
  // [seqs, hc * D] (host memory; either may be null: no logits is no head). Checked like
  // Shard::forward_batch.
  void forward(std::span<const DraftRows> seqs, float* logits, float* hidden_out);

 private:
  bool model() const { return numerics_ == Numerics::Model; }
  ModelConfig main_;
  MtpWeights w_;
  Ops& ops_;
  const Mat& embed_;
  const Mat& head_;
  Numerics numerics_;
  std::unique_ptr<Shard> shard_;  // the block as layer n_layers of main.with_mtp_layer()
};

// The drafter's pool options for a main model's pool (the same slots, context and rollback; its
// memory: what that many sequences of the block take).
StatePoolOptions mtp_pool_options(const ModelConfig& main, const StatePoolOptions& main_pool);

}  // namespace hs
