// The prefix cache's disk tier (engine/prefix_cache.h): snapshot and page files under one
// directory per engine state key, written atomically (a temporary file, then a rename) by a
// background thread, each with a versioned header and a checksum. A file of another version,
// another model or with a bad checksum is refused with a message and never loaded.
//
//   DIR/<key>/snaps/<hash>.hss   magic "HSPS", version, key, the tokens and per shard the page
//                                keys (checksummed apart: the tree and the pages' references are
//                                rebuilt from this head alone), then per shard the snapshot's
//                                host rows, then a checksum of everything
//   DIR/<key>/pages/<hash>.hsp   magic "HSPP", version, key, one compressed page of one shard
//
// Pages are files of their own, named by the hash of the tokens they depend on: a page shared
// by many snapshots (every turn of a conversation) is written once.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

namespace hs {

// A snapshot as stored: per shard the keys of its full pages and its host rows.
struct StoredShard {
  std::vector<uint64_t> pages;
  std::vector<uint8_t> partial, swa_rows;
  std::vector<float> ring;
};
struct StoredSnapshot {
  std::vector<int32_t> tokens;
  std::vector<StoredShard> shards;
};

// One snapshot file found on disk (its head read and checked; the rows are read on use).
struct SnapshotFile {
  std::string path;
  uint64_t id = 0;            // the file's name: the hash of its tokens
  std::vector<int32_t> tokens;
  std::vector<std::vector<uint64_t>> pages;  // per shard
  int64_t bytes = 0;
};

// 64-bit checksum of bytes (FNV-1a over 8-byte words, then the tail).
uint64_t checksum64(const void* data, size_t n, uint64_t h = 1469598103934665603ull);

class PrefixStore {
 public:
  // dir/<key hex>/ is made if absent; `key` is the hash of the engine's state key.
  PrefixStore(const std::string& dir, uint64_t key);
  ~PrefixStore();  // waits for the queued writes
  PrefixStore(const PrefixStore&) = delete;
  PrefixStore& operator=(const PrefixStore&) = delete;

  // The snapshot files of this key (bad ones are skipped, each with a log line, and counted
  // into *bad).
  std::vector<SnapshotFile> scan(int64_t* bad) const;
  bool has_page(uint64_t page) const;
  // Queued writes (the data is the store's from here on).
  void put_page(uint64_t page, std::shared_ptr<const std::vector<uint8_t>> bytes);
  void put_snapshot(uint64_t id, std::shared_ptr<const StoredSnapshot> snap);
  // The file's contents; nullopt (with a log line) when it is missing, short, of another
  // version or model, or fails its checksum.
  std::optional<StoredSnapshot> read_snapshot(const std::string& path) const;
  std::optional<std::vector<uint8_t>> read_page(uint64_t page, size_t bytes) const;
  void remove_snapshot(uint64_t id);
  void remove_page(uint64_t page);
  void flush();  // waits until every queued write is on disk
  std::string snapshot_path(uint64_t id) const;
  std::string page_path(uint64_t page) const;
  int64_t bytes_written() const;

 private:
  void writer();
  void enqueue(std::function<void()> job);

  std::string root_;
  uint64_t key_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::unordered_set<uint64_t> pages_;  // on disk or queued
  bool busy_ = false, stop_ = false;
  int64_t written_ = 0;
  std::thread thread_;
};

}  // namespace hs
