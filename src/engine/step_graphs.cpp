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

}  // namespace

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

bool StepGraphs::run(int64_t rows, const void* x, const void* taps, const std::function<void()>& layers) {
  key_.clear();
  key_.push_back(static_cast<uint64_t>(rows));
  key_.push_back(reinterpret_cast<uintptr_t>(x));
  key_.push_back(reinterpret_cast<uintptr_t>(taps));
  if (!ops_.step_key(key_)) return false;
  if (!enabled_ || failed_ || !ops_.can_capture()) {
    layers();
    ++stats_.eager;
    return true;
  }
  const uint64_t h = hash_key(key_);
  if (Entry* e = find(key_, h)) {
    ops_.replay(*e->graph);
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
  capture(key_, h, layers);
  return true;
}

void StepGraphs::capture(std::vector<uint64_t> key, uint64_t hash, const std::function<void()>& layers) {
  const size_t mark = ops_.mark();
  std::unique_ptr<Ops::Graph> graph;
  try {
    ops_.begin_capture();
    layers();
    graph = ops_.end_capture();
  } catch (const std::exception& err) {
    // Nothing ran on the device. Run the step op by op, and keep this shard op by op: a
    // capture that failed once would fail again.
    ops_.abort_capture();
    ops_.release_to(mark);
    failed_ = true;
    ++stats_.failed;
    std::fprintf(stderr, "hyperstream: capturing a decode step as a CUDA graph failed (%s); this shard decodes op by op\n",
                 err.what());
    layers();
    ++stats_.eager;
    return;
  }
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
