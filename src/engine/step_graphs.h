// One CUDA graph per decode step of a shard (docs/architecture.md, "Decode steps as CUDA
// graphs"). A decode step (every sequence of the batch has one row) runs in the backend's step
// mode (ops.h: positions and tokens read from a device step block), so its work depends only
// on the step's shape. The first time a shape is seen the step runs op by op; the second time
// it is captured; after that it is replayed, and the host only uploads the step block,
// launches the graph and advances the sequences' counters the way the ops would have.
//
// The shape (the key) is everything a capture bakes in: the batch size, the HC state's
// address, every state buffer's address and capacity, which compressor windows close, the
// scratch layout (ops.h prepare_step). A graph is replayed only for an equal key, so a
// sequence whose buffers moved (a capacity grew, a slot was reused by another sequence) or a
// step where another window closes gets its own capture, never a stale graph.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/ops.h"
#include "model/config.h"

namespace hs {

struct StepGraphStats {
  int64_t eager = 0;     // decode steps run op by op (first sight of a shape, graphs off, profiling)
  int64_t captured = 0;  // steps captured (each also ran once, as its graph's first launch)
  int64_t replayed = 0;  // steps run by replaying an earlier capture
  int64_t failed = 0;    // captures that failed (the shard then stays op by op)
  size_t cached = 0;     // graphs held now
  size_t nodes = 0;      // operations (kernels, copies) in the latest capture
};

class StepGraphs {
 public:
  explicit StepGraphs(Ops& ops) : ops_(ops) {}
  // false: steps still run in step mode, op by op (the reference the graphs are tested against).
  void set_enabled(bool on);
  bool enabled() const { return enabled_; }
  // Runs one decode step of `seqs` (one row each, at positions pos with tokens `tokens`, HC
  // state at x) whose op-by-op form is `layers` (it must not advance n_past). Returns false,
  // having done nothing, where the backend has no step mode: the caller runs `layers` itself.
  bool run(const ModelConfig& c, std::span<SequenceState* const> seqs, const int64_t* pos, const int32_t* tokens,
           const void* x, const std::function<void()>& layers);
  const StepGraphStats& stats() const { return stats_; }
  void clear();  // drops every graph (the backend's buffers they name are about to go)

 private:
  struct Entry {
    std::vector<uint64_t> key;
    uint64_t hash = 0;  // of key: compared first
    std::unique_ptr<Ops::Graph> graph;
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxGraphs = 16;   // per shard: a single sequence needs 3-6
  static constexpr size_t kMaxSeen = 4096;   // shapes remembered as seen once

  Entry* find(const std::vector<uint64_t>& key, uint64_t hash);
  void capture(std::span<SequenceState* const> seqs, std::vector<uint64_t> key, uint64_t hash,
               const std::function<void()>& layers);

  Ops& ops_;
  bool enabled_ = true;
  bool failed_ = false;  // a capture failed: this shard runs op by op from then on
  std::vector<Entry> cache_;
  std::vector<uint64_t> seen_;    // hashes of shapes run once, sorted
  std::vector<uint64_t> key_;     // reused between steps
  uint64_t clock_ = 0;
  StepGraphStats stats_;
};

// How the counters of a decode step's compressors move (what compressor_update does to them for
// one row): the window fills, or closes into one new entry.
void advance_decode_counters(SequenceState& s);

}  // namespace hs
