// The DSpark drafter (issue 16; docs/speculative.md): block-wise semi-autoregressive drafting.
// The target's tapped hidden states become context KV rows of each stage (add_context); a block
// [anchor, noise, ...] runs through the stages (V4 blocks whose attention sees the context ring
// and the whole block), then the target's head, a low-rank Markov bias on the previous token and
// a confidence head give, left to right, each draft's logits and how sure the drafter is.
// Only Ops are called; the block attention is Ops::attention_dense over the context ring (host
// memory, uploaded per block) and the block's own rows. Several sequences' context rows, and
// several blocks, go through one pass (the scheduler's probing and drafting requests of a step).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/ops.h"

namespace hs {

// One sequence's drafter state: per stage, the context KV rows of the last `window` positions.
struct DsparkSequence {
  std::vector<std::vector<float>> ring;  // per stage [window, head_dim]
  std::vector<int64_t> ring_pos;         // per ring slot: its position, -1 empty (shared by the stages)
  int64_t next = 0;                      // the position the next context row must have
  int64_t rows = 0;                      // context rows held (<= window)
  void reset();
};

// Context rows of one sequence: positions p0 .. p0 + n - 1 and their taps [n, tap_width] (host).
struct DsparkContextRows {
  DsparkSequence* seq = nullptr;
  int64_t p0 = 0;
  const float* taps = nullptr;
  int64_t n = 0;
};

// A drafted block: the rows' hc_head outputs and the logits before the Markov bias.
struct DsparkBlock {
  int64_t p = -1;            // the last context position; the anchor is at p + 1
  int32_t anchor = -1;
  int rows = 0;              // the rows drafted (the first `rows` of B; step() takes j < rows)
  std::vector<float> h;      // [rows, D]: hc_head of the last stage (the confidence head's input)
  std::vector<float> base;   // [rows, V]: head(norm(h))
};

class DsparkDrafter {
 public:
  // embed and head are the main model's, on `ops`' backend (as the weights are).
  DsparkDrafter(const ModelConfig& main, DsparkWeights w, Ops& ops, const Mat& embed, const Mat& head,
                Numerics numerics);
  const ModelConfig& config() const { return c_; }
  const DsparkConfig& dspark() const { return c_.dspark; }
  int block() const { return c_.dspark.block; }
  // Tapped width per row: target_layers * D.
  int64_t tap_width() const { return static_cast<int64_t>(c_.dspark.target_layers.size()) * c_.dim; }
  std::unique_ptr<DsparkSequence> new_sequence() const;
  // Context rows for positions p0 .. p0 + n - 1 from their taps [n, tap_width] (host). Rows that
  // do not continue the sequence's (p0 != next) restart it at p0.
  void add_context(DsparkSequence& s, int64_t p0, const float* taps, int64_t n);
  // The same for several sequences (each at most once) in one pass over all their rows.
  void add_context(std::span<const DsparkContextRows> seqs);
  // The block whose anchor (the token at position s.next) starts it; needs context.
  DsparkBlock draft_block(const DsparkSequence& s, int32_t anchor);
  // The blocks of several sequences in one pass (every op but the attention over all their
  // rows; the attention per block): each as draft_block would give it, but with the logits of
  // only its first drafts[i] rows (1..B; empty: all B).
  std::vector<DsparkBlock> draft_blocks(std::span<const DsparkSequence* const> seqs, std::span<const int32_t> anchors,
                                        std::span<const int> drafts = {});
  // Draft j of block b after token prev (the anchor for j = 0, else draft j - 1): its logits
  // [V] (base + Markov bias) and its confidence logit (sigmoid: the chance it is accepted).
  void step(const DsparkBlock& b, int j, int32_t prev, float* logits, float* confidence);
  // The logits of several blocks' drafts at once (draft js[i] of blocks[i] after prevs[i]) into
  // logits [n, V], without the confidence (the shadow probes of a step).
  void steps(std::span<const DsparkBlock* const> blocks, std::span<const int> js, std::span<const int32_t> prevs,
             float* logits);

 private:
  bool model() const { return numerics_ == Numerics::Model; }
  ModelConfig c_;   // main.with_dspark_layers(stages)
  int n_main_;      // the main model's layers (stage s is layer n_main_ + s)
  DsparkWeights w_;
  Ops& ops_;
  const Mat& embed_;
  const Mat& head_;
  Numerics numerics_;
  RopeTable rope_;
};

}  // namespace hs
