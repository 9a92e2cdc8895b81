// The prefix cache (docs/architecture.md, "Prefix cache"): snapshots of sequences' states
// (EngineSnapshot) at the points where a later request is likely to continue (the end of a
// prompt, the end of a generation, the chat-turn boundaries inside a prompt), in a radix tree
// over their token ids (SGLang's design). A request restores the longest cached prefix of its
// prompt and prefills only the rest; the state it gets is the very state the snapshot's
// sequence had, byte for byte, so its logits are those of a cold run.
//
// Tiers, least recently used first out of each:
//   device  the snapshot's full pages stay in the engine's pools (shared by reference with live
//           sequences and other snapshots); its other rows in host memory
//   host    the pages copied to host memory (one copy per page, shared by the snapshots that
//           need it), under --prefix-cache-ram
//   disk    files under --prefix-cache-dir (prefix_store.h), under --prefix-cache-disk; written
//           as soon as a snapshot is taken (by a background thread), so a restarted server finds
//           them again
// Pages are keyed by the hash of the tokens they depend on (every token up to the page's end),
// so a conversation's growing snapshots hold each compressed entry once, in every tier.
//
// Used on one thread (the scheduler's); the disk writes run on the store's own.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"

namespace hs {

class PrefixStore;

struct PrefixCacheOptions {
  int64_t ram_bytes = int64_t{8} << 30;    // host tier (page copies, and every snapshot's other rows)
  std::string dir;                         // disk tier; empty: none
  int64_t disk_bytes = int64_t{64} << 30;
  int64_t max_entries = 4096;
};

struct PrefixCacheStats {
  int64_t lookups = 0, hits = 0;           // restores asked for / that found a prefix
  int64_t hit_tokens = 0, miss_tokens = 0; // of the lookups' tokens: served from the cache / not
  int64_t inserts = 0;
  int64_t evictions_device = 0, evictions_host = 0, evictions_disk = 0;  // entries that left each tier
  int64_t entries = 0, device_entries = 0, host_entries = 0, disk_entries = 0;
  int64_t device_page_bytes = 0;           // compressed pages the device-tier entries hold (shared counted once per entry)
  int64_t host_bytes = 0, disk_bytes = 0;
  int64_t bad_files = 0;                   // disk entries refused (corrupt, short, another model)
};

class PrefixCache {
 public:
  PrefixCache(Engine& engine, const PrefixCacheOptions& o);
  ~PrefixCache();  // gives every device page back; queued disk writes finish
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // The longest cached prefix of tokens[0, max_len) restored into seq (empty): its length, 0 on
  // a miss (or when the pools lack room even after evicting cache pages).
  int64_t restore(std::span<const int32_t> tokens, int64_t max_len, Sequence& seq);
  // seq holds the state of tokens[0, seq.n_past()): keep a snapshot of it (no-op when one exists).
  void insert(std::span<const int32_t> tokens, const Sequence& seq);
  // Takes device-tier entries down a tier (least recently used first) until every pool has
  // `pages` free or no device entry is left. Returns how many entries moved.
  int64_t make_room(int64_t pages);
  PrefixCacheStats stats() const;
  void flush();  // waits for the disk writes
  int64_t page_bytes() const;  // bytes of one compressed page over all shards

 private:
  enum class Tier { device, host, disk };
  struct Entry;
  struct Node;
  struct HostPage {
    std::shared_ptr<const std::vector<uint8_t>> bytes;
    int64_t refs = 0;
  };

  Node* find(std::span<const int32_t> tokens, int64_t max_len, std::vector<Node*>* path);
  Node* make_node(std::span<const int32_t> tokens);
  void erase(Node* n);  // drops its entry; prunes nodes left without entries and children
  void touch(Entry& e);
  bool load(Node* n);   // brings an entry to the device tier; false (entry dropped) on failure
  void demote(Node* n);
  void drop_host(Entry& e);
  void drop_disk(Entry& e);
  void write_disk(Node* n, std::span<const int32_t> tokens);
  void enforce_budgets();
  std::vector<uint64_t> page_keys(std::span<const int32_t> tokens, int64_t n, size_t shard) const;
  Node* lru(Tier t, const Node* keep) const;
  template <typename F>
  void for_each_entry(F&& f) const;  // f(Node*) for every node holding an entry
  int64_t disk_page_bytes() const;   // the page files' bytes (each one shard's page)

  Engine& engine_;
  const Node* pinned_ = nullptr;  // the entry being restored: never evicted meanwhile
  PrefixCacheOptions opts_;
  uint64_t key_ = 0;  // hash of the engine's state key
  std::unique_ptr<Node> root_;
  std::unordered_map<uint64_t, HostPage> host_pages_;
  std::unordered_map<uint64_t, int64_t> disk_page_refs_;
  std::unique_ptr<PrefixStore> store_;
  uint64_t clock_ = 0;
  PrefixCacheStats st_;
};

}  // namespace hs
