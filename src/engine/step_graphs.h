// One CUDA graph per decode step of a shard (docs/architecture.md, "Decode steps as CUDA
// graphs"). Every op of a step reads the step's rows (positions, tokens, slots) from the
// backend's device row block and each sequence's page table, so a step's work depends only on
// its shape: its row count (a decode step is padded to a bucket, Ops::padded_rows), the HC
// state's address, and what the backend's step_key() adds (the row block's address, the
// scratch layout, the capacities its grids were sized by). Which sequences are in the step,
// and where they are, does not matter: one capture serves every step of the same shape.
// The first time a shape is seen the step runs op by op; the second time it is captured;
// after that it is replayed.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
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
  // Runs one decode step of `rows` rows (the backend's begin_rows() was called) with the HC
  // state at x and the taps it writes at `taps` (nullptr: none; Shard::set_taps), whose op-by-op
  // form is `layers`. Returns false, having done nothing, where the backend has no graphs: the
  // caller runs `layers` itself.
  bool run(int64_t rows, const void* x, const void* taps, const std::function<void()>& layers);
  const StepGraphStats& stats() const { return stats_; }
  void clear();  // drops every graph (the backend's buffers they name are about to go)

 private:
  struct Entry {
    std::vector<uint64_t> key;
    uint64_t hash = 0;  // of key: compared first
    std::unique_ptr<Ops::Graph> graph;
    uint64_t last_use = 0;
  };
  static constexpr size_t kMaxGraphs = 16;   // per shard: one per row bucket and capacity
  static constexpr size_t kMaxSeen = 4096;   // shapes remembered as seen once

  Entry* find(const std::vector<uint64_t>& key, uint64_t hash);
  void capture(std::vector<uint64_t> key, uint64_t hash, const std::function<void()>& layers);

  Ops& ops_;
  bool enabled_ = true;
  bool failed_ = false;  // a capture failed: this shard runs op by op from then on
  std::vector<Entry> cache_;
  std::vector<uint64_t> seen_;    // hashes of shapes run once, sorted
  std::vector<uint64_t> key_;     // reused between steps
  uint64_t clock_ = 0;
  StepGraphStats stats_;
};

}  // namespace hs
