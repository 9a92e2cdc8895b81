// The metadata is serialised from a gguf::Writer by writing it alone and reading it back
// (Writer keeps its values private and already validates them); values are then re-encoded
// here in GGUF's little-endian layout (see the layout comment at the top of gguf.cpp).
#include "format/gguf_stream_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "format/gguf.h"
#include "util/error.h"

namespace hs::gguf {

namespace {

// Appends the low `n` bytes of v, little-endian.
void put_le(std::string& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
}

void put_str(std::string& out, const std::string& s) {
  put_le(out, s.size(), 8);
  out += s;
}

int value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    default: return 8;
  }
}

void encode(std::string& out, const Value& v) {
  const int n = value_bytes(v.type);
  if (const auto* u = std::get_if<uint64_t>(&v.v)) {
    put_le(out, *u, n);
  } else if (const auto* s = std::get_if<int64_t>(&v.v)) {
    put_le(out, static_cast<uint64_t>(*s), n);
  } else if (const auto* d = std::get_if<double>(&v.v)) {
    if (v.type == ValueType::FLOAT32) {
      const float f = static_cast<float>(*d);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      put_le(out, bits, 4);
    } else {
      uint64_t bits;
      std::memcpy(&bits, d, 8);
      put_le(out, bits, 8);
    }
  } else if (const auto* b = std::get_if<bool>(&v.v)) {
    put_le(out, *b ? 1 : 0, 1);
  } else if (const auto* str = std::get_if<std::string>(&v.v)) {
    put_str(out, *str);
  } else {
    const Array& a = std::get<Array>(v.v);
    put_le(out, static_cast<uint32_t>(a.elem_type), 4);
    put_le(out, a.items.size(), 8);
    for (const Value& item : a.items) encode(out, item);
  }
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace

StreamWriter::StreamWriter(const std::string& path, const Writer& meta, std::vector<TensorDecl> tensors)
    : path_(path), partial_(path + ".partial"), tensors_(std::move(tensors)) {
  std::string header;
  {
    const std::string meta_path = partial_ + ".meta";
    meta.write(meta_path);
    std::string kvs;
    uint64_t n_kv = 0;
    try {
      const File m(meta_path);
      HS_CHECK(m.tensors().empty(), path, ": gguf stream writer: the metadata writer holds tensors");
      alignment_ = m.alignment();
      for (const auto& key : m.keys()) {
        put_str(kvs, key);
        put_le(kvs, static_cast<uint32_t>(m.find(key)->type), 4);
        encode(kvs, *m.find(key));
        ++n_kv;
      }
    } catch (...) {
      std::remove(meta_path.c_str());
      throw;
    }
    std::remove(meta_path.c_str());
    put_le(header, 0x46554747, 4);  // "GGUF"
    put_le(header, 3, 4);
    put_le(header, tensors_.size(), 8);
    put_le(header, n_kv, 8);
    header += kvs;
  }
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    HS_CHECK(!t.name.empty() && t.name.size() <= 63, path, ": gguf stream writer: tensor name '", t.name,
             "' must be 1 to 63 bytes (llama.cpp's limit)");
    HS_CHECK(names.insert(t.name).second, path, ": gguf stream writer: tensor ", t.name, " declared twice");
    HS_CHECK(!t.ne.empty() && t.ne.size() <= 4, path, ": gguf stream writer: tensor ", t.name, " has ", t.ne.size(),
             " dims, expected 1 to 4");
    nbytes_.push_back(tensor_nbytes(t.type, t.ne));
    put_str(header, t.name);
    put_le(header, t.ne.size(), 4);
    for (int64_t d : t.ne) put_le(header, static_cast<uint64_t>(d), 8);
    put_le(header, static_cast<uint32_t>(t.type), 4);
    put_le(header, offset, 8);
    offset += align_up(nbytes_.back(), alignment_);
  }
  header.resize(align_up(header.size(), alignment_), '\0');
  fd_ = ::open(partial_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  HS_CHECK(fd_ >= 0, partial_, ": cannot create: ", std::strerror(errno));
  write_all(header.data(), header.size());
  while (next_ < tensors_.size() && nbytes_[next_] == 0) ++next_;
}

StreamWriter::~StreamWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(partial_.c_str());
}

uint64_t StreamWriter::remaining() const {
  return next_ < tensors_.size() ? nbytes_[next_] - done_in_current_ : 0;
}

void StreamWriter::write_all(const void* data, uint64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<uint64_t>(n, uint64_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    HS_CHECK(w > 0, partial_, ": cannot write: ", std::strerror(errno));
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}

void StreamWriter::write(const void* data, uint64_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    HS_CHECK(next_ < tensors_.size(), path_, ": gguf stream writer: ", n, " bytes past the last tensor");
    const uint64_t take = std::min(n, remaining());
    write_all(p, take);
    p += take, n -= take, done_in_current_ += take;
    if (remaining() > 0) continue;
    static constexpr std::array<char, 64> kZeros{};
    for (uint64_t pad = align_up(nbytes_[next_], alignment_) - nbytes_[next_]; pad > 0;) {
      const uint64_t k = std::min<uint64_t>(pad, kZeros.size());
      write_all(kZeros.data(), k);
      pad -= k;
    }
    done_in_current_ = 0;
    do ++next_;
    while (next_ < tensors_.size() && nbytes_[next_] == 0);
  }
}

void StreamWriter::finish() {
  HS_CHECK(next_ == tensors_.size(), path_, ": gguf stream writer: tensor ", tensors_[std::min(next_, tensors_.size() - 1)].name,
           " has ", done_in_current_, " of its ", remaining() + done_in_current_, " bytes; ",
           tensors_.size() - next_, " tensor(s) incomplete");
  const int fd = fd_;
  fd_ = -1;
  HS_CHECK(::close(fd) == 0, partial_, ": cannot close: ", std::strerror(errno));
  HS_CHECK(std::rename(partial_.c_str(), path_.c_str()) == 0, "cannot rename ", partial_, " to ", path_, ": ",
           std::strerror(errno));
  finished_ = true;
}

}  // namespace hs::gguf
