// A GGUF v3 writer for data that does not fit in memory (converting a 160 GB checkpoint):
// the tensor list (names, types, shapes) is fixed up front, so the header and every offset
// are known, and then each tensor's bytes are appended as they are produced, in order.
// gguf::Writer (gguf.h) holds every tensor until write(); this holds none.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/ggml_types.h"

namespace hs::gguf {

class Writer;

struct TensorDecl {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<int64_t> ne;  // ne[0] innermost
};

class StreamWriter {
 public:
  // Writes the header: the metadata of `meta` (its keys in order, general.alignment included;
  // it must hold no tensors) and the tensor infos. The file is built as path + ".partial"
  // and appears under `path` only at finish(). Throws hs::Error naming the problem.
  StreamWriter(const std::string& path, const Writer& meta, std::vector<TensorDecl> tensors);
  ~StreamWriter();  // removes the partial file unless finish() succeeded
  StreamWriter(const StreamWriter&) = delete;
  StreamWriter& operator=(const StreamWriter&) = delete;

  // Appends bytes of the current tensor (in declaration order; a tensor may come in pieces).
  // Throws when more bytes arrive than the tensor has.
  void write(const void* data, uint64_t n);
  // The tensor that the next write() belongs to, and the bytes it still needs.
  size_t current() const { return next_; }
  uint64_t remaining() const;
  // Checks that every tensor was written in full, closes and renames the file.
  void finish();

 private:
  void write_all(const void* data, uint64_t n);

  std::string path_, partial_;
  int fd_ = -1;
  uint64_t alignment_ = 32;
  std::vector<TensorDecl> tensors_;
  std::vector<uint64_t> nbytes_;
  size_t next_ = 0;
  uint64_t done_in_current_ = 0;
  bool finished_ = false;
};

}  // namespace hs::gguf
