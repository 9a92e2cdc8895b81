#include "engine/prefix_cache.h"

#include <algorithm>
#include <set>

#include "engine/prefix_store.h"
#include "util/error.h"
#include "util/log.h"

namespace hs {

namespace {

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

}  // namespace

struct PrefixCache::Entry {
  Tier tier = Tier::device;
  uint64_t id = 0;                           // hash of the tokens (the disk file's name)
  int64_t n = 0;
  EngineSnapshot dev;                        // device tier: pages in the pools, rows here
  std::vector<PoolSnapshot> rows;            // host tier: per shard the rows (no pages)
  std::vector<std::vector<uint64_t>> keys;   // host and disk tiers: per shard the page keys
  bool on_disk = false;
  std::string path;
  int64_t file_bytes = 0;
  uint64_t last_use = 0;
  int64_t row_bytes() const {
    int64_t b = dev.host_bytes();
    for (const PoolSnapshot& r : rows) b += r.host_bytes();
    return b;
  }
};

struct PrefixCache::Node {
  std::vector<int32_t> edge;  // the tokens from the parent's end to this node's end
  int64_t end = 0;
  Node* parent = nullptr;
  std::unordered_map<int32_t, std::unique_ptr<Node>> kids;  // by the first token of their edge
  std::unique_ptr<Entry> entry;                             // a snapshot at `end`
};

template <typename F>
void PrefixCache::for_each_entry(F&& f) const {
  std::vector<Node*> stack{root_.get()};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& [t, k] : n->kids) stack.push_back(k.get());
    if (n->entry) f(n);
  }
}

PrefixCache::PrefixCache(Engine& engine, const PrefixCacheOptions& o)
    : engine_(engine), opts_(o), root_(std::make_unique<Node>()) {
  HS_CHECK(o.ram_bytes >= 0 && o.disk_bytes >= 0 && o.max_entries >= 1, "prefix cache: bad budgets");
  for (const char c : engine.state_key()) key_ = mix(key_, static_cast<uint8_t>(c));
  if (o.dir.empty()) return;
  store_ = std::make_unique<PrefixStore>(o.dir, key_);
  int64_t found = 0;
  for (SnapshotFile& f : store_->scan(&st_.bad_files)) {
    if (f.pages.size() != static_cast<size_t>(engine_.n_shards()) || f.tokens.empty()) {
      log_warn("prefix cache: ignoring ", f.path, ": made for another layer split");
      ++st_.bad_files;
      continue;
    }
    Node* n = make_node(f.tokens);
    if (n->entry) continue;
    auto e = std::make_unique<Entry>();
    e->tier = Tier::disk;
    e->id = f.id;
    e->n = static_cast<int64_t>(f.tokens.size());
    e->keys = std::move(f.pages);
    e->on_disk = true;
    e->path = f.path;
    e->file_bytes = f.bytes;
    for (const auto& ks : e->keys)
      for (uint64_t k : ks) ++disk_page_refs_[k];
    n->entry = std::move(e);
    ++found;
  }
  if (found) log_info("prefix cache: ", found, " snapshots on disk under ", o.dir);
}

PrefixCache::~PrefixCache() {
  // Every device page goes back to the pools (the entries' files stay on disk).
  for_each_entry([&](Node* n) {
    if (n->entry->tier == Tier::device) engine_.release(n->entry->dev);
  });
}

int64_t PrefixCache::page_bytes() const {
  int64_t b = 0;
  for (int s = 0; s < engine_.n_shards(); ++s) b += engine_.state_layout(s).cmp_page_bytes;
  return b;
}

int64_t PrefixCache::disk_page_bytes() const {
  return static_cast<int64_t>(disk_page_refs_.size()) * (page_bytes() / std::max(1, engine_.n_shards()));
}

void PrefixCache::flush() {
  if (store_) store_->flush();
}

std::vector<uint64_t> PrefixCache::page_keys(std::span<const int32_t> tokens, int64_t n, size_t shard) const {
  const int64_t P = engine_.state_layout(0).page;
  std::vector<uint64_t> keys;
  uint64_t h = mix(key_, shard);
  for (int64_t i = 0; i < n / P * P; ++i) {
    h = mix(h, static_cast<uint32_t>(tokens[static_cast<size_t>(i)]));
    if ((i + 1) % P == 0) keys.push_back(h);
  }
  return keys;
}

PrefixCache::Node* PrefixCache::find(std::span<const int32_t> tokens, int64_t max_len, std::vector<Node*>* path) {
  Node* cur = root_.get();
  for (;;) {
    if (cur->entry && path) path->push_back(cur);
    if (cur->end >= max_len) break;
    auto it = cur->kids.find(tokens[static_cast<size_t>(cur->end)]);
    if (it == cur->kids.end()) break;
    Node* k = it->second.get();
    if (k->end > max_len) break;
    if (!std::equal(k->edge.begin(), k->edge.end(), tokens.begin() + cur->end)) break;
    cur = k;
  }
  return cur;
}

PrefixCache::Node* PrefixCache::make_node(std::span<const int32_t> tokens) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  Node* cur = root_.get();
  while (cur->end < n) {
    const int32_t t = tokens[static_cast<size_t>(cur->end)];
    auto it = cur->kids.find(t);
    if (it == cur->kids.end()) {
      auto k = std::make_unique<Node>();
      k->edge.assign(tokens.begin() + cur->end, tokens.end());
      k->end = n;
      k->parent = cur;
      Node* raw = k.get();
      cur->kids.emplace(t, std::move(k));
      return raw;
    }
    Node* k = it->second.get();
    int64_t m = 0;  // the length of the edge's part the tokens share
    while (m < static_cast<int64_t>(k->edge.size()) && cur->end + m < n &&
           k->edge[static_cast<size_t>(m)] == tokens[static_cast<size_t>(cur->end + m)])
      ++m;
    if (m == static_cast<int64_t>(k->edge.size())) {
      cur = k;
      continue;
    }
    // Split the edge at m: a new node takes its first m tokens.
    auto mid = std::make_unique<Node>();
    mid->edge.assign(k->edge.begin(), k->edge.begin() + m);
    mid->end = cur->end + m;
    mid->parent = cur;
    std::unique_ptr<Node> old = std::move(it->second);
    old->edge.erase(old->edge.begin(), old->edge.begin() + m);
    old->parent = mid.get();
    mid->kids.emplace(old->edge.front(), std::move(old));
    Node* raw = mid.get();
    it->second = std::move(mid);
    cur = raw;
  }
  return cur;
}

void PrefixCache::erase(Node* n) {
  n->entry.reset();
  while (n != root_.get() && !n->entry && n->kids.empty()) {
    Node* p = n->parent;
    p->kids.erase(n->edge.front());
    n = p;
  }
}

void PrefixCache::touch(Entry& e) { e.last_use = ++clock_; }

// The least recently used entry of a tier (disk: any entry with a file), other than `keep`.
PrefixCache::Node* PrefixCache::lru(Tier t, const Node* keep) const {
  Node* best = nullptr;
  for_each_entry([&](Node* n) {
    const Entry& e = *n->entry;
    if (n == keep || n == pinned_ || (t == Tier::disk ? !e.on_disk : e.tier != t)) return;
    if (!best || e.last_use < best->entry->last_use) best = n;
  });
  return best;
}

void PrefixCache::drop_host(Entry& e) {
  for (const auto& ks : e.keys)
    for (uint64_t k : ks) {
      auto it = host_pages_.find(k);
      if (it != host_pages_.end() && --it->second.refs == 0) host_pages_.erase(it);
    }
  e.rows.clear();
}

void PrefixCache::drop_disk(Entry& e) {
  if (!e.on_disk || !store_) return;
  store_->remove_snapshot(e.id);
  for (const auto& ks : e.keys)
    for (uint64_t k : ks) {
      auto it = disk_page_refs_.find(k);
      if (it != disk_page_refs_.end() && --it->second == 0) {
        disk_page_refs_.erase(it);
        store_->remove_page(k);
      }
    }
  e.on_disk = false;
}

// One tier down: device -> host (pages copied to host memory), or -> disk when there is no
// host tier, or out.
void PrefixCache::demote(Node* node) {
  Entry& e = *node->entry;
  ++st_.evictions_device;
  if (opts_.ram_bytes > 0) {
    std::vector<int32_t> tokens;
    for (const Node* n = node; n != root_.get(); n = n->parent) tokens.insert(tokens.begin(), n->edge.begin(), n->edge.end());
    e.keys.clear();
    e.rows.clear();
    for (size_t s = 0; s < e.dev.shards.size(); ++s) {
      PoolSnapshot& ps = e.dev.shards[s];
      std::vector<uint64_t> keys = page_keys(tokens, e.n, s);
      for (size_t j = 0; j < keys.size(); ++j) {
        HostPage& hp = host_pages_[keys[j]];
        if (!hp.bytes)
          hp.bytes = std::make_shared<const std::vector<uint8_t>>(engine_.shard(static_cast<int>(s)).pool().read_page(ps.pages[j]));
        ++hp.refs;
      }
      e.keys.push_back(std::move(keys));
      PoolSnapshot rows;
      rows.n = ps.n;
      rows.partial = std::move(ps.partial);
      rows.swa_rows = std::move(ps.swa_rows);
      rows.ring = std::move(ps.ring);
      e.rows.push_back(std::move(rows));
    }
    engine_.release(e.dev);
    e.tier = Tier::host;
    return;
  }
  engine_.release(e.dev);
  if (e.on_disk) {
    e.tier = Tier::disk;
    return;
  }
  erase(node);
}

// Brings an entry to the device tier: its pages written into new blocks (from host copies or
// files). false when the pools lack room or a file is bad (then the entry is dropped).
bool PrefixCache::load(Node* node) {
  Entry& e = *node->entry;
  if (e.tier == Tier::device) return true;
  std::optional<StoredSnapshot> file;
  if (e.tier == Tier::disk) {
    file = store_->read_snapshot(e.path);
    std::vector<int32_t> tokens;
    for (const Node* n = node; n != root_.get(); n = n->parent) tokens.insert(tokens.begin(), n->edge.begin(), n->edge.end());
    if (file && (file->tokens != tokens || file->shards.size() != static_cast<size_t>(engine_.n_shards()))) {
      log_warn("prefix cache: ignoring ", e.path, ": its tokens or shards are not the ones its head named");
      file.reset();
    }
    if (!file) {
      ++st_.bad_files;
      drop_disk(e);
      erase(node);
      return false;
    }
    e.keys.clear();
    for (const StoredShard& sh : file->shards) e.keys.push_back(sh.pages);
  }
  EngineSnapshot dev;
  bool ok = true, bad = false;  // bad: a page is missing or corrupt (not just no room)
  for (int s = 0; s < engine_.n_shards() && ok; ++s) {
    StatePool& pool = engine_.shard(s).pool();
    PoolSnapshot ps;
    ps.n = e.n;
    for (uint64_t k : e.keys[static_cast<size_t>(s)]) {
      std::shared_ptr<const std::vector<uint8_t>> bytes;
      if (auto it = host_pages_.find(k); it != host_pages_.end()) bytes = it->second.bytes;
      if (!bytes && store_) {
        if (auto v = store_->read_page(k, static_cast<size_t>(pool.layout().cmp_page_bytes)))
          bytes = std::make_shared<const std::vector<uint8_t>>(std::move(*v));
      }
      if (!bytes) {
        ok = false;
        bad = true;
        ++st_.bad_files;
        break;
      }
      int32_t b = pool.write_page(bytes->data());
      if (b < 0) {  // room from other device entries (never this one), then once more
        make_room(pool.free_pages() + 1);
        b = pool.write_page(bytes->data());
      }
      if (b < 0) {
        ok = false;
        break;
      }
      ps.pages.push_back(b);
    }
    if (ok) {
      if (e.tier == Tier::host) {
        const PoolSnapshot& r = e.rows[static_cast<size_t>(s)];
        ps.partial = r.partial;
        ps.swa_rows = r.swa_rows;
        ps.ring = r.ring;
      } else {
        StoredShard& sh = file->shards[static_cast<size_t>(s)];
        ps.partial = std::move(sh.partial);
        ps.swa_rows = std::move(sh.swa_rows);
        ps.ring = std::move(sh.ring);
      }
    }
    dev.shards.push_back(std::move(ps));
  }
  if (!ok) {
    engine_.release(dev);
    if (bad) {  // a page file missing or bad: the entry can never be loaded
      drop_disk(e);
      erase(node);
    }
    return false;
  }
  if (e.tier == Tier::host) drop_host(e);
  e.dev = std::move(dev);
  e.tier = Tier::device;
  return true;
}

int64_t PrefixCache::restore(std::span<const int32_t> tokens, int64_t max_len, Sequence& seq) {
  ++st_.lookups;
  max_len = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size()));
  std::vector<Node*> path;  // the nodes with an entry along the tokens, shallowest first
  if (max_len > 0) find(tokens, max_len, &path);
  int64_t got = 0;
  // The deepest entry first; one that cannot be loaded gives way to a shorter one (dropping an
  // entry removes no node above it that has an entry, so the shorter candidates stay valid).
  for (auto it = path.rbegin(); it != path.rend() && got == 0; ++it) {
    Node* n = *it;
    if (n == root_.get() || !n->entry) continue;
    pinned_ = n;
    if (load(n)) {
      touch(*n->entry);
      bool ok = engine_.restore(n->entry->dev, seq);
      if (!ok) {
        make_room(engine_.free_pages() + 1);
        ok = engine_.restore(n->entry->dev, seq);
      }
      if (ok) got = n->entry->n;
    }
    pinned_ = nullptr;
  }
  if (got > 0) ++st_.hits;
  st_.hit_tokens += got;
  st_.miss_tokens += static_cast<int64_t>(tokens.size()) - got;
  return got;
}

void PrefixCache::insert(std::span<const int32_t> tokens, const Sequence& seq) {
  const int64_t n = seq.n_past();
  if (n <= 0) return;
  HS_CHECK(static_cast<int64_t>(tokens.size()) >= n, "internal: a prefix-cache insert of ", n, " tokens with ",
           tokens.size(), " given");
  const std::span<const int32_t> prefix = tokens.first(static_cast<size_t>(n));
  Node* node = make_node(prefix);
  if (node->entry) {
    touch(*node->entry);
    return;
  }
  auto e = std::make_unique<Entry>();
  e->n = n;
  e->dev = engine_.snapshot(seq);
  uint64_t id = key_;
  for (const int32_t t : prefix) id = mix(id, static_cast<uint32_t>(t));
  e->id = id;
  node->entry = std::move(e);
  touch(*node->entry);
  ++st_.inserts;
  if (store_) write_disk(node, prefix);
  enforce_budgets();
}

// The entry's file and its new pages, queued for the store's thread (write-through).
void PrefixCache::write_disk(Node* node, std::span<const int32_t> tokens) {
  Entry& e = *node->entry;
  auto snap = std::make_shared<StoredSnapshot>();
  snap->tokens.assign(tokens.begin(), tokens.end());
  e.keys.clear();
  int64_t bytes = static_cast<int64_t>(tokens.size()) * 4;
  for (size_t s = 0; s < e.dev.shards.size(); ++s) {
    const PoolSnapshot& ps = e.dev.shards[s];
    StatePool& pool = engine_.shard(static_cast<int>(s)).pool();
    StoredShard sh;
    sh.pages = page_keys(tokens, e.n, s);
    for (size_t j = 0; j < sh.pages.size(); ++j) {
      const uint64_t k = sh.pages[j];
      if (disk_page_refs_[k]++ == 0 && !store_->has_page(k)) {
        auto it = host_pages_.find(k);
        store_->put_page(k, it != host_pages_.end() ? it->second.bytes
                                                    : std::make_shared<const std::vector<uint8_t>>(pool.read_page(ps.pages[j])));
      }
    }
    sh.partial = ps.partial;
    sh.swa_rows = ps.swa_rows;
    sh.ring = ps.ring;
    bytes += static_cast<int64_t>(sh.pages.size() * 8) + ps.host_bytes();
    e.keys.push_back(sh.pages);
    snap->shards.push_back(std::move(sh));
  }
  store_->put_snapshot(e.id, snap);
  e.on_disk = true;
  e.path = store_->snapshot_path(e.id);
  e.file_bytes = bytes;
}

int64_t PrefixCache::make_room(int64_t pages) {
  int64_t moved = 0;
  while (engine_.free_pages() < pages) {
    Node* n = lru(Tier::device, nullptr);
    if (!n) break;
    demote(n);
    ++moved;
  }
  if (moved) enforce_budgets();
  return moved;
}

void PrefixCache::enforce_budgets() {
  auto count = [&] {
    int64_t entries = 0, host = 0, disk = 0;
    for_each_entry([&](Node* n) {
      ++entries;
      host += n->entry->row_bytes();
      if (n->entry->on_disk) disk += n->entry->file_bytes;
    });
    for (const auto& [k, hp] : host_pages_) host += static_cast<int64_t>(hp.bytes->size());
    disk += disk_page_bytes();
    return std::array<int64_t, 3>{entries, host, disk};
  };
  for (auto c = count(); c[0] > opts_.max_entries || c[1] > opts_.ram_bytes; c = count()) {
    // Host copies go first (to disk where they are written, else out), then device entries.
    Node* n = lru(Tier::host, nullptr);
    Tier from = Tier::host;
    if (!n) {
      n = lru(Tier::device, nullptr);
      from = Tier::device;
    }
    if (!n) break;
    Entry& e = *n->entry;
    if (from == Tier::host) {
      ++st_.evictions_host;
      drop_host(e);
    } else {
      ++st_.evictions_device;
      engine_.release(e.dev);
    }
    if (e.on_disk && c[0] <= opts_.max_entries) {  // over the RAM budget only: the file stays
      e.tier = Tier::disk;
    } else {
      drop_disk(e);
      erase(n);
    }
  }
  for (auto c = count(); store_ && c[2] > opts_.disk_bytes; c = count()) {
    Node* n = lru(Tier::disk, nullptr);
    if (!n) break;
    ++st_.evictions_disk;
    Entry& e = *n->entry;
    drop_disk(e);
    if (e.tier == Tier::disk) erase(n);
  }
}

PrefixCacheStats PrefixCache::stats() const {
  PrefixCacheStats s = st_;
  std::set<std::pair<size_t, int32_t>> blocks;
  for_each_entry([&](Node* n) {
    const Entry& e = *n->entry;
    ++s.entries;
    s.device_entries += e.tier == Tier::device;
    s.host_entries += e.tier == Tier::host;
    s.disk_entries += e.tier == Tier::disk;
    s.host_bytes += e.row_bytes();
    if (e.on_disk) s.disk_bytes += e.file_bytes;
    for (size_t sh = 0; sh < e.dev.shards.size(); ++sh)
      for (int32_t b : e.dev.shards[sh].pages) blocks.insert({sh, b});
  });
  for (const auto& [k, hp] : host_pages_) s.host_bytes += static_cast<int64_t>(hp.bytes->size());
  for (const auto& [sh, b] : blocks) s.device_page_bytes += engine_.state_layout(static_cast<int>(sh)).cmp_page_bytes;
  if (store_) s.disk_bytes += disk_page_bytes();
  return s;
}

}  // namespace hs
