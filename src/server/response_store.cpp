#include "server/response_store.h"

namespace hs::server {

ResponseStore::ResponseStore(size_t max_entries, size_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}

void ResponseStore::put(const std::string& id, Entry entry) {
  if (max_entries_ == 0) return;
  // What an entry costs is its JSON size (the ojson trees are a small multiple of it).
  const size_t bytes = dump_json(entry.response).size() + dump_json(entry.conversation).size();
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = index_.find(id); it != index_.end()) {
    bytes_ -= it->second->bytes;
    lru_.erase(it->second);
    index_.erase(it);
  }
  lru_.push_front({id, std::move(entry), bytes});
  index_[id] = lru_.begin();
  bytes_ += bytes;
  evict_locked();
}

void ResponseStore::evict_locked() {
  // The newest entry stays even when it alone is over the byte bound.
  while (lru_.size() > max_entries_ || (bytes_ > max_bytes_ && lru_.size() > 1)) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().id);
    lru_.pop_back();
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->entry;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = index_.find(id);
  if (it == index_.end()) return false;
  bytes_ -= it->second->bytes;
  lru_.erase(it->second);
  index_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lk(mu_);
  return lru_.size();
}

}  // namespace hs::server
