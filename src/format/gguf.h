// GGUF v3 reader (mmap) and writer. Every metadata value type, arrays (also nested),
// alignment (general.alignment), and tensor bounds checked against the file size.
// Errors name the file, the key or tensor, what was expected and what was found.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "format/ggml_types.h"
#include "util/mmap.h"

namespace hs::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

struct Value;
struct Array {
  ValueType elem_type = ValueType::UINT8;
  std::vector<Value> items;
  bool operator==(const Array&) const = default;
};

// A metadata value. Integers keep their exact type (strict getters compare it). The variant
// holds u8..u64 as uint64_t, i8..i64 as int64_t, f32/f64 as double, then bool, string, Array;
// the Writer rejects a Value whose alternative or range does not match its type.
struct Value {
  ValueType type = ValueType::UINT8;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> v;
  bool operator==(const Value&) const = default;  // exact: type, alternative and contents
};

// Bytes of a tensor of `type` and shape `ne`; throws hs::Error when a dim is negative,
// ne[0] is not a whole number of blocks, or the size overflows.
uint64_t tensor_nbytes(GgmlType type, const std::vector<int64_t>& ne);

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // ne[0] innermost (the input dimension of a matrix)
  GgmlType type = GgmlType::F32;
  uint64_t offset = 0;      // relative to the data section
  uint64_t nbytes = 0;
  int64_t n_elements() const;
};

class File {
 public:
  // Opens and validates the whole header; throws hs::Error on anything malformed.
  explicit File(const std::string& path);

  const std::string& path() const { return map_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  const std::vector<std::string>& keys() const { return key_order_; }
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Strict typed getters: throw naming the key, the expected type and the found type.
  uint32_t get_u32(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;  // also accepts u32
  int32_t get_i32(const std::string& key) const;
  float get_f32(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;   // any integer element type
  std::vector<float> get_f32_array(const std::string& key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  const uint8_t* tensor_data(const TensorInfo& t) const { return map_.data() + data_offset_ + t.offset; }
  uint64_t data_offset() const { return data_offset_; }

 private:
  MappedFile map_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::string> key_order_;
  std::map<std::string, Value> kv_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// Builds a GGUF v3 file in memory order: metadata in insertion order, then tensor infos,
// then aligned tensor data. Tensor data is written from caller-owned buffers.
class Writer {
 public:
  void set(const std::string& key, Value v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  // The data pointer must stay valid until write(); nbytes is checked against ne and type.
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, const void* data,
                  uint64_t nbytes);
  void write(const std::string& path) const;  // throws hs::Error on I/O failure
  uint64_t alignment = 32;

 private:
  struct PendingTensor {
    TensorInfo info;
    const void* data;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace hs::gguf
