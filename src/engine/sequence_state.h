// Per-sequence, per-shard state: everything needed to continue a sequence from any position
// (ds4-model-spec.md §8.1). Created per request; reset() zeroes it (not just rewinds) so a
// reused slot can never see another request's data.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace hs {

class BackendState;

// One KV compressor (main or indexer) of one layer. A device backend keeps the buffers and
// entries in `device` and only the counters (buf_n, has_prev, n_entries) here.
struct CompressorState {
  int ratio = 0, coff = 1;
  int64_t d = 0;
  std::vector<float> buf_kv, buf_gate;    // [ratio, coff*d] tokens of the open window (gate without ape)
  int buf_n = 0;
  std::vector<float> prev_kv, prev_gate;  // [ratio, d] overlap half of the last closed window (CSA)
  bool has_prev = false;
  std::vector<float> entries;             // [n_entries, d] compressed rows (normed, RoPE'd)
  int64_t n_entries = 0;
  mutable std::shared_ptr<BackendState> device;  // set by a device backend on first use

  // host_buffers false: only the shape and counters (a device backend holds the data).
  void init(int ratio_, int coff_, int64_t d_, bool host_buffers = true);
  void reset();
};

// Device-side mirror of a layer's state, owned by the backend that made it (the CUDA backend
// keeps the ring and the compressed rows on the GPU). reset() must zero it.
class BackendState {
 public:
  virtual ~BackendState() = default;
  virtual void reset() = 0;
  virtual size_t bytes() const = 0;
};

struct LayerState {
  std::vector<float> ring;  // [window, head_dim]: the kv row of position p at slot p % window (host backends)
  CompressorState comp;     // ratio > 0
  CompressorState index;    // CSA layers: the indexer's key compressor
  mutable std::shared_ptr<BackendState> device;  // set by a device backend on first use
};

class SequenceState {
 public:
  int64_t n_past = 0;              // tokens already processed
  int layer_begin = 0;             // the shard's first layer
  std::vector<LayerState> layers;  // one per layer of the shard

  void reset();
  size_t bytes() const;            // memory held, for admission control / metrics
};

}  // namespace hs
