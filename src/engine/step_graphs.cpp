#include "engine/step_graphs.h"

#include <algorithm>
#include <cstdio>

#include "util/error.h"

namespace hs {

namespace {

uint64_t hash_key(const std::vector<uint64_t>& key) {  // FNV-1a over the words
  uint64_t h = 1469598103934665603ull;
  for (uint64_t w : key) {
    h ^= w;
    h *= 1099511628211ull;
  }
  return h;
}

// The counters of every compressor of a sequence (all the host state a decode step changes
// besides n_past, which the shard advances).
struct Counters {
  int buf_n;
  bool has_prev;
  int64_t n_entries;
  bool operator==(const Counters&) const = default;
};

template <typename F>
void for_compressors(SequenceState& s, F&& f) {
  for (LayerState& l : s.layers)
    for (CompressorState* cs : {&l.comp, &l.index})
      if (cs->ratio > 0) f(*cs);
}

std::vector<Counters> counters(std::span<SequenceState* const> seqs) {
  std::vector<Counters> out;
  for (SequenceState* s : seqs)
    for_compressors(*s, [&](CompressorState& cs) { out.push_back({cs.buf_n, cs.has_prev, cs.n_entries}); });
  return out;
}

void restore(std::span<SequenceState* const> seqs, const std::vector<Counters>& saved) {
  size_t i = 0;
  for (SequenceState* s : seqs)
    for_compressors(*s, [&](CompressorState& cs) {
      cs.buf_n = saved[i].buf_n;
      cs.has_prev = saved[i].has_prev;
      cs.n_entries = saved[i].n_entries;
      ++i;
    });
}

}  // namespace

void advance_decode_counters(SequenceState& s) {
  for_compressors(s, [](CompressorState& cs) {
    if (cs.buf_n + 1 < cs.ratio) {
      ++cs.buf_n;
      return;
    }
    cs.buf_n = 0;
    ++cs.n_entries;
    if (cs.coff == 2) cs.has_prev = true;
  });
}

void StepGraphs::set_enabled(bool on) {
  enabled_ = on;
  if (!on) clear();
}

void StepGraphs::clear() {
  cache_.clear();
  seen_.clear();
  stats_.cached = 0;
}

StepGraphs::Entry* StepGraphs::find(const std::vector<uint64_t>& key, uint64_t hash) {
  for (Entry& e : cache_)
    if (e.hash == hash && e.key == key) return &e;
  return nullptr;
}

bool StepGraphs::run(const ModelConfig& c, std::span<SequenceState* const> seqs, const int64_t* pos,
                     const int32_t* tokens, const void* x, const std::function<void()>& layers) {
  key_.clear();
  key_.push_back(seqs.size());
  key_.push_back(reinterpret_cast<uintptr_t>(x));
  if (!ops_.prepare_step(c, seqs, key_)) return false;
  ops_.begin_step(pos, tokens, static_cast<int64_t>(seqs.size()));
  struct EndStep {
    Ops& ops;
    ~EndStep() { ops.end_step(); }
  } end{ops_};

  if (!enabled_ || failed_ || !ops_.can_capture()) {
    layers();
    ++stats_.eager;
    return true;
  }
  const uint64_t h = hash_key(key_);
  if (Entry* e = find(key_, h)) {
    ops_.replay(*e->graph);
    for (SequenceState* s : seqs) advance_decode_counters(*s);
    e->last_use = ++clock_;
    ++stats_.replayed;
    return true;
  }
  // A shape seen for the first time runs op by op: that also grows every buffer the step
  // needs, so the capture that follows on its second sight allocates nothing.
  auto it = std::lower_bound(seen_.begin(), seen_.end(), h);
  if (it == seen_.end() || *it != h) {
    if (seen_.size() >= kMaxSeen) seen_.clear();
    seen_.insert(std::lower_bound(seen_.begin(), seen_.end(), h), h);
    layers();
    ++stats_.eager;
    return true;
  }
  capture(seqs, key_, h, layers);
  return true;
}

void StepGraphs::capture(std::span<SequenceState* const> seqs, std::vector<uint64_t> key, uint64_t hash,
                         const std::function<void()>& layers) {
  const std::vector<Counters> before = counters(seqs);
  const size_t mark = ops_.mark();
  std::unique_ptr<Ops::Graph> graph;
  try {
    ops_.begin_capture();
    layers();
    graph = ops_.end_capture();
  } catch (const std::exception& err) {
    // Nothing ran on the device; only the host counters moved. Put them back and run the step
    // op by op, and keep this shard op by op: a capture that failed once would fail again.
    ops_.abort_capture();
    ops_.release_to(mark);
    restore(seqs, before);
    failed_ = true;
    ++stats_.failed;
    std::fprintf(stderr, "hyperstream: capturing a decode step as a CUDA graph failed (%s); this shard decodes op by op\n",
                 err.what());
    layers();
    ++stats_.eager;
    return;
  }
  // The replays advance the counters without running the ops: they must move exactly as the
  // ops just moved them.
  const std::vector<Counters> after = counters(seqs);
  restore(seqs, before);
  for (SequenceState* s : seqs) advance_decode_counters(*s);
  HS_CHECK(counters(seqs) == after, "internal: a decode step moved the compressor counters differently from "
                                    "advance_decode_counters; its graph cannot be replayed");
  ops_.replay(*graph);
  ++stats_.captured;
  stats_.nodes = graph->nodes();
  if (cache_.size() >= kMaxGraphs) {  // evict the least recently used
    size_t lru = 0;
    for (size_t i = 1; i < cache_.size(); ++i)
      if (cache_[i].last_use < cache_[lru].last_use) lru = i;
    cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(lru));
  }
  cache_.push_back(Entry{std::move(key), hash, std::move(graph), ++clock_});
  stats_.cached = cache_.size();
}

}  // namespace hs
