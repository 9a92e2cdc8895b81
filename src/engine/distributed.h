// A layer-split pipeline over several processes (one per shard, on one host or several):
// `--rank r --world n --coordinator host:port`. Rank r builds only shard r of the split (only
// its layers' weights are loaded); rank 0 owns the embedding, the tokens and the results.
//
// What travels (docs/multi-gpu.md):
//  * control, over one TCP connection from rank 0 to every rank (engine/distributed_control.h):
//    the handshake (protocol version, rank, world, config hash; the NCCL unique id back), then
//    per operation a small header (op, sequence id, n_tokens, position) and the token ids;
//  * data, over NCCL point-to-point: the HC state [n_tokens, hc, D] f32 from rank r to r + 1,
//    and the logits rows from the last rank back to rank 0.
//
// Failure: a rank that hits an error tells the others (an Error message to rank 0, which tells
// every rank) and exits non-zero; a rank that loses its control connection aborts its NCCL
// communicator (ncclCommAbort) and fails too. Every wait on NCCL watches the control
// connections, so no rank hangs on a peer that is gone.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hs {

struct DistributedOptions {
  int rank = -1;
  int world = 0;
  std::string coordinator;  // host:port; rank 0 listens on the port, the others connect
  double timeout_s = 600;   // longest wait for the others at start-up and for a peer inside a step
};

// Checks rank, world and coordinator; errors name the option and the value.
void validate(const DistributedOptions& d);
// The same, and what a rank's engine options must be: one cuda:N --device, no --devices, and a
// --layer-split (when given) of one entry per rank. Needs no model.
void validate(const DistributedOptions& d, const EngineOptions& opts);

// The layers per rank: `split` when given (it must have `world` entries summing to n_layers),
// else an even split. Errors name the mismatch.
std::vector<int> rank_layer_split(const std::vector<int>& split, int world, int n_layers);

// A fingerprint of what every rank must agree on: the model's configuration and tensor
// inventory (names, types, shapes), the numerics, the layer split and the world size.
uint64_t config_hash(const ModelSource& src, Numerics numerics, const std::vector<int>& split, int world,
                     int expert_top_k = 0);

class DistributedEngine {
 public:
  // Opens the model, joins the other ranks through the coordinator (rank 0 refuses a rank
  // whose config hash differs, naming both), loads this rank's shard on opts.device (cuda:N)
  // and creates the NCCL communicator. opts.layer_split: layers per rank (empty: even);
  // opts.devices must be empty (one device per process).
  DistributedEngine(const std::string& model_path, const EngineOptions& opts, const DistributedOptions& d);
  ~DistributedEngine();  // rank 0: shutdown() unless done or failed
  DistributedEngine(const DistributedEngine&) = delete;
  DistributedEngine& operator=(const DistributedEngine&) = delete;

  int rank() const;
  int world() const;
  const ModelConfig& config() const;
  Engine& local();  // this rank's shard
  int layer_begin() const;
  int layer_end() const;

  // ---- rank 0: every call is forwarded to all ranks.
  void new_sequence(int64_t seq_id);  // creates (or replaces) the sequence's state on every rank
  void reset(int64_t seq_id);
  void release(int64_t seq_id);
  int64_t n_past(int64_t seq_id) const;
  // n tokens of the sequence through every rank; logits [n, vocab], or only the last row's
  // [vocab] when all_positions is false. Bad input (unknown sequence, bad token ids) throws
  // before anything is sent; a failure after that stops the whole pipeline.
  void step(int64_t seq_id, const int32_t* tokens, int64_t n, float* logits, bool all_positions = true);
  // Tells every rank to finish; they exit 0.
  void shutdown();

  // ---- ranks > 0: runs what rank 0 sends until it says shutdown (returns) or something fails
  // (throws, after telling rank 0).
  void serve_forever();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs
