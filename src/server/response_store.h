// The responses of /v1/responses kept in memory (store: true) for GET /v1/responses/{id} and
// for a later request's previous_response_id: bounded by a count and by bytes, the least
// recently used going first. Thread-safe.
#pragma once
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "server/json_util.h"

namespace hs::server {

class ResponseStore {
 public:
  struct Entry {
    ojson response;      // the Response object as answered
    ojson conversation;  // the items a follow-up continues: the earlier ones, this input, this output
  };
  // max_entries 0 stores nothing.
  ResponseStore(size_t max_entries, size_t max_bytes);

  void put(const std::string& id, Entry entry);
  std::optional<Entry> get(const std::string& id);
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Slot {
    std::string id;
    Entry entry;
    size_t bytes = 0;
  };
  void evict_locked();

  size_t max_entries_, max_bytes_;
  mutable std::mutex mu_;
  std::list<Slot> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Slot>::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace hs::server
