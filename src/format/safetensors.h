// safetensors reader: one file, or a sharded set through model.safetensors.index.json.
// Files are mmapped; every header field is checked against the file before use.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "util/mmap.h"

namespace hs::st {

enum class DType { F32, F16, BF16, F8_E4M3, F8_E8M0, I8, U8, I16, I32, I64, F64, BOOL };
const char* dtype_name(DType t);
int dtype_size(DType t);

struct Tensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major, outermost first (numpy order)
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
  std::string file;            // the shard it came from (for error messages)
  int64_t n_elements() const;
};

class File {
 public:
  explicit File(const std::string& path);
  const std::string& path() const { return map_.path(); }
  const std::map<std::string, Tensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  MappedFile map_;
  std::map<std::string, Tensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a model directory: model.safetensors, or the shards named by
// model.safetensors.index.json (each tensor must be in the shard the index names), or
// every *.safetensors file when there is neither.
class Collection {
 public:
  explicit Collection(const std::string& dir_or_file);
  const Tensor* find(const std::string& name) const;
  const Tensor& get(const std::string& name) const;  // throws naming the tensor
  std::vector<std::string> names() const;
  size_t size() const { return index_.size(); }

 private:
  std::vector<std::unique_ptr<File>> files_;
  std::map<std::string, const Tensor*> index_;
};

}  // namespace hs::st
