#include "engine/prefix_store.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.h"
#include "util/log.h"

namespace hs {

namespace fs = std::filesystem;

namespace {

constexpr uint32_t kVersion = 1;
constexpr char kSnapMagic[4] = {'H', 'S', 'P', 'S'};
constexpr char kPageMagic[4] = {'H', 'S', 'P', 'P'};

std::string hex(uint64_t v) {
  std::ostringstream os;
  os << std::hex;
  os.width(16);
  os.fill('0');
  os << v;
  return os.str();
}

// Appends little-endian fields to a byte buffer.
struct Out {
  std::vector<uint8_t> b;
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b.insert(b.end(), c, c + n);
  }
  template <typename T>
  void put(T v) { raw(&v, sizeof v); }
  template <typename T>
  void vec(const std::vector<T>& v) {
    put<uint64_t>(v.size());
    raw(v.data(), v.size() * sizeof(T));
  }
  void sum() { put<uint64_t>(checksum64(b.data(), b.size())); }
};

// Reads fields back; every read is bounds-checked (a short or corrupt file throws).
struct In {
  const std::vector<uint8_t>& b;
  size_t at = 0;
  void raw(void* p, size_t n) {
    HS_CHECK(n <= b.size() - at, "the file ends early");
    std::memcpy(p, b.data() + at, n);
    at += n;
  }
  template <typename T>
  T get() {
    T v;
    raw(&v, sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> vec() {
    const uint64_t n = get<uint64_t>();
    HS_CHECK(n <= (b.size() - at) / sizeof(T), "a field of ", n, " elements is longer than the file");
    std::vector<T> v(static_cast<size_t>(n));
    raw(v.data(), v.size() * sizeof(T));
    return v;
  }
  void check_sum() {  // the checksum of everything before it
    const size_t end = at;
    const uint64_t want = get<uint64_t>();
    HS_CHECK(checksum64(b.data(), end) == want, "checksum mismatch (the file is corrupt)");
  }
};

// The whole file in one read (a byte iterator reads a 100K-token prefix's pages at ~0.3 GB/s).
std::optional<std::vector<uint8_t>> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return std::nullopt;
  const std::streamoff size = f.tellg();
  if (size < 0) return std::nullopt;
  std::vector<uint8_t> b(static_cast<size_t>(size));
  f.seekg(0);
  if (size > 0 && !f.read(reinterpret_cast<char*>(b.data()), size)) return std::nullopt;
  return b;
}

// Writes to a temporary name beside `path`, then renames: a crash leaves the old state.
void write_atomically(const std::string& path, const std::vector<uint8_t>& bytes) {
  static_assert(sizeof(char) == 1);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    HS_CHECK(f.good(), "cannot write ", tmp);
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    HS_CHECK(f.good(), "writing ", tmp, " failed (disk full?)");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("cannot rename ", tmp, " to ", path);
  }
}

void header(Out& o, const char (&magic)[4], uint64_t key) {
  o.raw(magic, 4);
  o.put<uint32_t>(kVersion);
  o.put<uint64_t>(key);
}

void check_header(In& in, const char (&magic)[4], uint64_t key) {
  char m[4];
  in.raw(m, 4);
  HS_CHECK(std::memcmp(m, magic, 4) == 0, "not a hyperstream prefix-cache file");
  const uint32_t v = in.get<uint32_t>();
  HS_CHECK(v == kVersion, "format version ", v, ", this build reads ", kVersion);
  const uint64_t k = in.get<uint64_t>();
  HS_CHECK(k == key, "made for another model or engine setup (key ", hex(k), ", this one ", hex(key), ")");
}

}  // namespace

uint64_t checksum64(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const uint8_t*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
    h ^= h >> 32;
  }
  for (; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

PrefixStore::PrefixStore(const std::string& dir, uint64_t key) : root_(dir + "/" + hex(key)), key_(key) {
  std::error_code ec;
  fs::create_directories(root_ + "/snaps", ec);
  fs::create_directories(root_ + "/pages", ec);
  HS_CHECK(fs::is_directory(root_ + "/snaps") && fs::is_directory(root_ + "/pages"), "--prefix-cache-dir: cannot make ",
           root_, (ec ? ": " + ec.message() : std::string()));
  for (const auto& e : fs::directory_iterator(root_ + "/pages", ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() == 20 && name.substr(16) == ".hsp") pages_.insert(std::stoull(name.substr(0, 16), nullptr, 16));
  }
  thread_ = std::thread([this] { writer(); });
}

PrefixStore::~PrefixStore() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string PrefixStore::snapshot_path(uint64_t id) const { return root_ + "/snaps/" + hex(id) + ".hss"; }
std::string PrefixStore::page_path(uint64_t page) const { return root_ + "/pages/" + hex(page) + ".hsp"; }

int64_t PrefixStore::bytes_written() const {
  std::lock_guard<std::mutex> lk(mu_);
  return written_;
}

void PrefixStore::writer() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
      if (jobs_.empty()) return;  // (stop_ with nothing left)
      job = std::move(jobs_.front());
      jobs_.pop_front();
      busy_ = true;
    }
    try {
      job();
    } catch (const std::exception& e) {
      log_warn("prefix cache: ", e.what());
    }
    {
      std::lock_guard<std::mutex> lk(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

void PrefixStore::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_all();
}

void PrefixStore::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return jobs_.empty() && !busy_; });
}

bool PrefixStore::has_page(uint64_t page) const {
  std::lock_guard<std::mutex> lk(mu_);
  return pages_.count(page) > 0;
}

void PrefixStore::put_page(uint64_t page, std::shared_ptr<const std::vector<uint8_t>> bytes) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!pages_.insert(page).second) return;
  }
  enqueue([this, page, bytes] {
    Out o;
    header(o, kPageMagic, key_);
    o.vec(*bytes);
    o.sum();
    write_atomically(page_path(page), o.b);
    std::lock_guard<std::mutex> lk(mu_);
    written_ += static_cast<int64_t>(o.b.size());
  });
}

void PrefixStore::put_snapshot(uint64_t id, std::shared_ptr<const StoredSnapshot> snap) {
  enqueue([this, id, snap] {
    Out o;
    header(o, kSnapMagic, key_);
    o.vec(snap->tokens);
    o.put<uint32_t>(static_cast<uint32_t>(snap->shards.size()));
    for (const StoredShard& s : snap->shards) o.vec(s.pages);
    o.sum();  // the head's own checksum: scan() reads no further
    for (const StoredShard& s : snap->shards) {
      o.vec(s.partial);
      o.vec(s.swa_rows);
      o.vec(s.ring);
    }
    o.sum();
    write_atomically(snapshot_path(id), o.b);
    std::lock_guard<std::mutex> lk(mu_);
    written_ += static_cast<int64_t>(o.b.size());
  });
}

std::vector<SnapshotFile> PrefixStore::scan(int64_t* bad) const {
  std::vector<SnapshotFile> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root_ + "/snaps", ec)) {
    const std::string path = e.path().string(), name = e.path().filename().string();
    if (name.size() != 20 || name.substr(16) != ".hss") continue;  // (temporaries of an interrupted write)
    const auto bytes = slurp(path);
    if (!bytes) continue;
    try {
      In in{*bytes};
      check_header(in, kSnapMagic, key_);
      SnapshotFile f;
      f.path = path;
      f.id = std::stoull(name.substr(0, 16), nullptr, 16);
      f.tokens = in.vec<int32_t>();
      const uint32_t shards = in.get<uint32_t>();
      HS_CHECK(shards <= 1024, "a snapshot of ", shards, " shards");
      for (uint32_t i = 0; i < shards; ++i) f.pages.push_back(in.vec<uint64_t>());
      in.check_sum();
      f.bytes = static_cast<int64_t>(bytes->size());
      out.push_back(std::move(f));
    } catch (const std::exception& err) {
      log_warn("prefix cache: ignoring ", path, ": ", err.what());
      if (bad) ++*bad;
    }
  }
  return out;
}

std::optional<StoredSnapshot> PrefixStore::read_snapshot(const std::string& path) const {
  const auto bytes = slurp(path);
  if (!bytes) {
    log_warn("prefix cache: ", path, " is gone");
    return std::nullopt;
  }
  try {
    In in{*bytes};
    check_header(in, kSnapMagic, key_);
    StoredSnapshot s;
    s.tokens = in.vec<int32_t>();
    const uint32_t shards = in.get<uint32_t>();
    HS_CHECK(shards <= 1024, "a snapshot of ", shards, " shards");
    s.shards.resize(shards);
    for (StoredShard& sh : s.shards) sh.pages = in.vec<uint64_t>();
    in.check_sum();
    for (StoredShard& sh : s.shards) {
      sh.partial = in.vec<uint8_t>();
      sh.swa_rows = in.vec<uint8_t>();
      sh.ring = in.vec<float>();
    }
    in.check_sum();
    HS_CHECK(in.at == bytes->size(), "trailing bytes after the checksum");
    return s;
  } catch (const std::exception& err) {
    log_warn("prefix cache: ignoring ", path, ": ", err.what());
    return std::nullopt;
  }
}

std::optional<std::vector<uint8_t>> PrefixStore::read_page(uint64_t page, size_t bytes) const {
  const std::string path = page_path(page);
  const auto file = slurp(path);
  if (!file) {
    log_warn("prefix cache: page file ", path, " is missing");
    return std::nullopt;
  }
  try {
    In in{*file};
    check_header(in, kPageMagic, key_);
    std::vector<uint8_t> v = in.vec<uint8_t>();
    in.check_sum();
    HS_CHECK(v.size() == bytes, "a page of ", v.size(), " bytes, this engine's pages have ", bytes);
    return v;
  } catch (const std::exception& err) {
    log_warn("prefix cache: ignoring ", path, ": ", err.what());
    return std::nullopt;
  }
}

void PrefixStore::remove_snapshot(uint64_t id) {
  enqueue([this, id] {
    std::error_code ec;
    fs::remove(snapshot_path(id), ec);
  });
}

void PrefixStore::remove_page(uint64_t page) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pages_.erase(page);
  }
  enqueue([this, page] {
    std::error_code ec;
    fs::remove(page_path(page), ec);
  });
}

}  // namespace hs
