// A layer-split pipeline over several processes (one per shard, on one host or several):
// `--rank r --world n --coordinator host:port`. Rank r builds only shard r of the split (only
// its layers' weights are loaded); rank 0 owns the embedding, the tokens, the scheduler and the
// results. There is one step path: rank 0's Engine::step_batch sends the step plan and runs its
// shard; every other rank runs the plan through its own Engine (engine/rank_link.h).
//
// What travels (docs/multi-gpu.md):
//  * control, over one TCP connection from rank 0 to every rank (engine/distributed_control.h):
//    the handshake (protocol version, rank, world, config hash; the NCCL unique id back), the
//    state pools' terms, then one step plan per step (engine/distributed_plan.h);
//  * data: the HC state rows from rank r to r + 1 and the logits rows from the last rank to
//    rank 0, over NCCL point-to-point between GPU ranks, over TCP between CPU ranks (a data
//    connection from each rank to the next; the logits over the last rank's control connection).
//
// Failure: a rank that hits an error tells the others (an Error message to rank 0, which tells
// every rank) and exits non-zero; a rank that loses its control connection aborts its NCCL
// communicator (ncclCommAbort) and fails too. Every wait watches the control connections, so no
// rank hangs on a peer that is gone; rank 0's calls then throw PipelineDown.
#pragma once
#include <cstdint>
#include <functional>
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
// The same, and what a rank's engine options must be: one --device (cpu or cuda:N), no --devices, and a
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
  // whose config hash or device kind differs, naming both), loads this rank's shard on
  // opts.device (cpu or cuda:N), agrees on the state pools (the smallest rank's pages) and
  // connects the data path (NCCL, or TCP for CPU ranks). opts.layer_split: layers per rank
  // (empty: even); opts.devices must be empty (one device per process).
  DistributedEngine(const std::string& model_path, const EngineOptions& opts, const DistributedOptions& d);
  // The same on a source already open (a synthetic model every rank makes alike: bench
  // --synthetic); `name` stands for it in messages.
  DistributedEngine(std::unique_ptr<ModelSource> src, const std::string& name, const EngineOptions& opts,
                    const DistributedOptions& d);
  ~DistributedEngine();  // rank 0: shutdown() unless done or failed
  DistributedEngine(const DistributedEngine&) = delete;
  DistributedEngine& operator=(const DistributedEngine&) = delete;

  int rank() const;
  int world() const;
  const ModelConfig& config() const;
  // Rank 0: the pipeline's engine. Its sequences, step_batch, fork and truncate reach every
  // rank (snapshots do not: no prefix cache across ranks); can_sample() is false (the logits
  // come home). Other ranks: this rank's shard, which serve_forever drives.
  Engine& local();
  int layer_begin() const;
  int layer_end() const;
  // Whether the pipeline stopped after a failure (every later step throws PipelineDown).
  bool down() const;
  // Rank 0 of a server: between steps a thread watches the other ranks, so that one that dies
  // while nothing runs is noticed at once (the pipeline goes down and on_down(why) is called on
  // that thread) rather than at the next step.
  void watch_when_idle(std::function<void(const std::string& why)> on_down);

  // ---- rank 0: tells every rank to finish; they exit 0.
  void shutdown();

  // ---- ranks > 0: runs rank 0's step plans until it says shutdown (returns) or something
  // fails (throws, after telling rank 0).
  void serve_forever();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs
