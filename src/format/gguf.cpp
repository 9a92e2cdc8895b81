// GGUF v3 reader and writer. The layout (ggml docs/gguf.md, little-endian):
//   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv × (string key | u32 value type | value)          string = u64 length + bytes
//   n_tensors × (string name | u32 n_dims | n_dims × i64 ne | u32 ggml type | u64 offset)
//   padding to general.alignment | tensor data (offsets relative to here, each aligned)
// The reader trusts nothing: every read checks the bytes left first, so a corrupt or
// truncated file gives an hs::Error, never an over-read or a huge allocation.
#include "format/gguf.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include "util/error.h"

namespace hs::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is read by memcpy: little-endian hosts only");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint64_t kDefaultAlignment = 32;
constexpr const char* kAlignmentKey = "general.alignment";
constexpr uint32_t kMaxDims = 4;
// GGUF allows arrays of arrays; nothing real nests deeper than 2. The cap keeps a hostile
// file from recursing the parser off the stack.
constexpr int kMaxArrayDepth = 8;
// llama.cpp keeps tensor names in a char[64] and rejects longer ones.
constexpr size_t kMaxTensorName = 63;

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 || t == ValueType::UINT64;
}
bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}

// Bytes of one scalar in the file; 0 for string and array (variable length).
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

// Fewest bytes one array element of type t can take (a string is at least its length,
// an array at least its element type and count): bounds an element count by the file size.
uint64_t min_elem_size(ValueType t) {
  if (t == ValueType::STRING) return 8;
  if (t == ValueType::ARRAY) return 12;
  return scalar_size(t);
}

std::string describe(const Value& v) {
  if (v.type != ValueType::ARRAY) return value_type_name(v.type);
  const Array* a = std::get_if<Array>(&v.v);
  return a ? cat("array of ", value_type_name(a->elem_type)) : "array";
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

// The reason a shape cannot be stored with this type, or "" when it can (nbytes set).
std::string shape_problem(const GgmlTypeInfo& info, const std::vector<int64_t>& ne, uint64_t& nbytes) {
  for (size_t d = 0; d < ne.size(); ++d)
    if (ne[d] < 0) return cat("ne[", d, "] = ", ne[d], " is negative");
  if (ne.empty()) return "has no dimensions";
  if (ne[0] % info.block_elems != 0)
    return cat("ne[0] = ", ne[0], " is not a multiple of the ", info.name, " block size ", info.block_elems);
  int64_t elems = 1;
  uint64_t bytes = static_cast<uint64_t>(ne[0] / info.block_elems) * static_cast<uint64_t>(info.block_bytes);
  for (size_t d = 0; d < ne.size(); ++d) {
    bool overflow = __builtin_mul_overflow(elems, ne[d], &elems);
    if (d > 0) overflow |= __builtin_mul_overflow(bytes, static_cast<uint64_t>(ne[d]), &bytes);
    if (overflow) return "shape is too large (element or byte count overflows)";
  }
  nbytes = bytes;
  return {};
}

std::string printable(const uint8_t* p, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f) s += static_cast<char>(p[i]);
    else s += cat("\\x", "0123456789abcdef"[p[i] >> 4], "0123456789abcdef"[p[i] & 15]);
  }
  return s;
}

// Cursor over the mapped bytes. `where` names what is being read (a key, a tensor) for
// error messages; it is only formatted when something fails.
class Cursor {
 public:
  Cursor(const std::string& path, const uint8_t* data, uint64_t size) : path_(path), data_(data), size_(size) {}

  std::string where = "header";
  uint64_t pos() const { return pos_; }
  uint64_t left() const { return size_ - pos_; }

  template <typename... Args>
  [[noreturn]] void error(Args&&... args) const {
    fail(path_, ": ", where, ": ", std::forward<Args>(args)...);
  }

  void need(uint64_t n, const char* what) const {
    if (n > left())
      error("truncated: ", what, " needs ", n, " bytes at offset ", pos_, ", the file has ", left(), " left");
  }

  template <typename T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const char* what) {
    uint64_t len = read<uint64_t>(what);
    need(len, what);  // a length of 2^60 fails here, before any allocation
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

  ValueType read_type(const char* what) {
    uint32_t t = read<uint32_t>(what);
    if (!valid_value_type(t)) error("unknown metadata value type id ", t);
    return static_cast<ValueType>(t);
  }

  Value read_value(ValueType t, int depth);

 private:
  const std::string& path_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

Value Cursor::read_value(ValueType t, int depth) {
  switch (t) {
    case ValueType::UINT8: return {t, uint64_t{read<uint8_t>("u8 value")}};
    case ValueType::UINT16: return {t, uint64_t{read<uint16_t>("u16 value")}};
    case ValueType::UINT32: return {t, uint64_t{read<uint32_t>("u32 value")}};
    case ValueType::UINT64: return {t, read<uint64_t>("u64 value")};
    case ValueType::INT8: return {t, int64_t{read<int8_t>("i8 value")}};
    case ValueType::INT16: return {t, int64_t{read<int16_t>("i16 value")}};
    case ValueType::INT32: return {t, int64_t{read<int32_t>("i32 value")}};
    case ValueType::INT64: return {t, read<int64_t>("i64 value")};
    case ValueType::FLOAT32: return {t, double{read<float>("f32 value")}};
    case ValueType::FLOAT64: return {t, read<double>("f64 value")};
    case ValueType::BOOL: {
      uint8_t b = read<uint8_t>("bool value");
      if (b > 1) error("bool value is ", int{b}, ", expected 0 or 1");
      return {t, b == 1};
    }
    case ValueType::STRING: return {t, read_string("string")};
    case ValueType::ARRAY: break;
  }
  if (depth >= kMaxArrayDepth) error("arrays nested deeper than ", kMaxArrayDepth, " levels");
  Array a;
  a.elem_type = read_type("array element type");
  uint64_t n = read<uint64_t>("array length");
  if (n > left() / min_elem_size(a.elem_type))
    error("array of ", n, " ", value_type_name(a.elem_type), " elements cannot fit in the ", left(),
          " bytes left in the file");
  a.items.reserve(n);
  for (uint64_t i = 0; i < n; ++i) a.items.push_back(read_value(a.elem_type, depth + 1));
  return {t, std::move(a)};
}

}  // namespace

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "u8";
    case ValueType::INT8: return "i8";
    case ValueType::UINT16: return "u16";
    case ValueType::INT16: return "i16";
    case ValueType::UINT32: return "u32";
    case ValueType::INT32: return "i32";
    case ValueType::FLOAT32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "u64";
    case ValueType::INT64: return "i64";
    case ValueType::FLOAT64: return "f64";
  }
  return "unknown";
}

int64_t TensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // cannot overflow: checked when the shape was accepted
  return n;
}

uint64_t tensor_nbytes(GgmlType type, const std::vector<int64_t>& ne) {
  uint64_t nbytes = 0;
  std::string problem = shape_problem(ggml_type_info(type), ne, nbytes);
  HS_CHECK(problem.empty(), "tensor of type ", ggml_type_name(type), ": ", problem);
  return nbytes;
}

// ---------------------------------------------------------------------------------------
// Reader

File::File(const std::string& path) : map_(path) {
  Cursor c(map_.path(), map_.data(), map_.size());
  c.need(4, "magic");
  if (std::memcmp(map_.data(), "GGUF", 4) != 0)
    c.error("not a GGUF file: magic is '", printable(map_.data(), 4), "', expected 'GGUF'");
  c.read<uint32_t>("magic");
  version_ = c.read<uint32_t>("version");
  // v2 and v3 share this layout (v3 only allowed big-endian files); v1 had u32 counts.
  if (version_ != 2 && version_ != 3) {
    bool swapped = version_ == 0x02000000 || version_ == 0x03000000;
    c.error("unsupported GGUF version ", version_, swapped ? " (a big-endian file?)" : "", ", expected 3 (or 2)");
  }
  uint64_t n_tensors = c.read<uint64_t>("tensor count");
  uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Smallest records: key length + type + 1 byte; name length + n_dims + type + offset.
  if (n_kv > c.left() / 13) c.error(n_kv, " metadata entries cannot fit in the ", c.left(), " bytes left");
  if (n_tensors > c.left() / 24) c.error(n_tensors, " tensor infos cannot fit in the ", c.left(), " bytes left");

  for (uint64_t i = 0; i < n_kv; ++i) {
    c.where = cat("metadata entry #", i);
    std::string key = c.read_string("key");
    c.where = cat("key ", key);
    if (kv_.count(key)) c.error("duplicate key");
    ValueType t = c.read_type("value type");
    kv_.emplace(key, c.read_value(t, 0));
    key_order_.push_back(std::move(key));
  }

  if (const Value* a = find(kAlignmentKey)) {
    c.where = cat("key ", kAlignmentKey);
    if (a->type != ValueType::UINT32) c.error("expected u32, found ", describe(*a));
    alignment_ = std::get<uint64_t>(a->v);
    if (!std::has_single_bit(alignment_)) c.error("alignment ", alignment_, " is not a power of two");
  }

  tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    c.where = cat("tensor info #", i);
    TensorInfo t;
    t.name = c.read_string("tensor name");
    c.where = cat("tensor ", t.name);
    if (tensor_index_.count(t.name)) c.error("duplicate tensor name");
    uint32_t n_dims = c.read<uint32_t>("n_dims");
    if (n_dims > kMaxDims) c.error("n_dims is ", n_dims, ", expected at most ", kMaxDims);
    for (uint32_t d = 0; d < n_dims; ++d) t.ne.push_back(c.read<int64_t>("ne"));
    if (t.ne.empty()) t.ne.push_back(1);  // ggml reads a 0-dim tensor as a scalar: ne = {1}
    uint32_t type_id = c.read<uint32_t>("type");
    auto info = ggml_type_info(type_id);
    if (!info) c.error("unknown GGML type id ", type_id);
    t.type = info->type;
    t.offset = c.read<uint64_t>("data offset");
    std::string problem = shape_problem(*info, t.ne, t.nbytes);
    if (!problem.empty()) c.error(problem);
    if (t.offset % alignment_ != 0) c.error("data offset ", t.offset, " is not a multiple of the alignment ", alignment_);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  data_offset_ = align_up(c.pos(), alignment_);
  uint64_t data_bytes = map_.size() > data_offset_ ? map_.size() - data_offset_ : 0;
  for (const TensorInfo& t : tensors_) {
    if (t.offset > data_bytes || t.nbytes > data_bytes - t.offset)
      fail(path, ": tensor ", t.name, ": data at offset ", t.offset, " (", t.nbytes,
           " bytes) lies past the end of the file: the data section has ", data_bytes, " bytes");
  }
}

const Value* File::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------
// Strict getters

namespace {

const Value& require(const File& f, const std::string& key) {
  const Value* v = f.find(key);
  if (!v) fail(f.path(), ": missing key ", key);
  return *v;
}

[[noreturn]] void mismatch(const File& f, const std::string& key, const char* expected, const Value& v) {
  fail(f.path(), ": key ", key, ": expected ", expected, ", found ", describe(v));
}

// The items of an array whose element type passes `ok`, or a mismatch error.
template <typename Pred>
const std::vector<Value>& array_items(const File& f, const std::string& key, const char* expected, Pred ok) {
  const Value& v = require(f, key);
  const Array* a = v.type == ValueType::ARRAY ? std::get_if<Array>(&v.v) : nullptr;
  if (!a || !ok(a->elem_type)) mismatch(f, key, expected, v);
  return a->items;
}

// A scalar of exactly type `want`, as its variant alternative `Stored`.
template <typename Stored>
const Stored& scalar(const File& f, const std::string& key, ValueType want) {
  const Value& v = require(f, key);
  if (v.type != want) mismatch(f, key, value_type_name(want), v);
  return std::get<Stored>(v.v);
}

// An array of exactly element type `want`, converted item by item from `Stored` to `Out`.
template <typename Out, typename Stored>
std::vector<Out> array_of(const File& f, const std::string& key, ValueType want, const char* expected) {
  const auto& items = array_items(f, key, expected, [want](ValueType t) { return t == want; });
  std::vector<Out> out;
  out.reserve(items.size());
  for (const Value& v : items) out.push_back(static_cast<Out>(std::get<Stored>(v.v)));
  return out;
}

}  // namespace

uint32_t File::get_u32(const std::string& key) const {
  return static_cast<uint32_t>(scalar<uint64_t>(*this, key, ValueType::UINT32));
}

uint64_t File::get_u64(const std::string& key) const {
  const Value& v = require(*this, key);
  if (v.type != ValueType::UINT64 && v.type != ValueType::UINT32) mismatch(*this, key, "u64 (or u32)", v);
  return std::get<uint64_t>(v.v);
}

int32_t File::get_i32(const std::string& key) const {
  return static_cast<int32_t>(scalar<int64_t>(*this, key, ValueType::INT32));
}

float File::get_f32(const std::string& key) const {
  return static_cast<float>(scalar<double>(*this, key, ValueType::FLOAT32));
}

bool File::get_bool(const std::string& key) const { return scalar<bool>(*this, key, ValueType::BOOL); }

std::string File::get_string(const std::string& key) const {
  return scalar<std::string>(*this, key, ValueType::STRING);
}

std::vector<std::string> File::get_string_array(const std::string& key) const {
  return array_of<std::string, std::string>(*this, key, ValueType::STRING, "array of string");
}

std::vector<float> File::get_f32_array(const std::string& key) const {
  return array_of<float, double>(*this, key, ValueType::FLOAT32, "array of f32");
}

std::vector<int64_t> File::get_int_array(const std::string& key) const {
  const auto& items = array_items(*this, key, "array of integers",
                                  [](ValueType t) { return is_signed(t) || is_unsigned(t); });
  std::vector<int64_t> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    if (const int64_t* s = std::get_if<int64_t>(&items[i].v)) {
      out.push_back(*s);
      continue;
    }
    uint64_t u = std::get<uint64_t>(items[i].v);
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(path(), ": key ", key, ": element ", i, " = ", u, " does not fit in i64");
    out.push_back(static_cast<int64_t>(u));
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// Writer

namespace {

// Throws unless v is a well-formed value of its declared type (alternative, range, array
// element types, nesting depth), so write() can serialise it without further checks.
void check_value(const std::string& key, const Value& v, int depth) {
  auto bad = [&](auto&&... why) { fail("gguf writer: key ", key, ": ", why...); };
  if (!valid_value_type(static_cast<uint32_t>(v.type))) bad("unknown value type id ", static_cast<uint32_t>(v.type));
  const char* name = value_type_name(v.type);
  if (is_unsigned(v.type)) {
    const uint64_t* u = std::get_if<uint64_t>(&v.v);
    if (!u) bad(name, " value must hold uint64_t");
    uint64_t max = scalar_size(v.type) == 8 ? std::numeric_limits<uint64_t>::max()
                                            : (uint64_t{1} << (8 * scalar_size(v.type))) - 1;
    if (*u > max) bad(*u, " does not fit in ", name);
  } else if (is_signed(v.type)) {
    const int64_t* s = std::get_if<int64_t>(&v.v);
    if (!s) bad(name, " value must hold int64_t");
    if (scalar_size(v.type) < 8) {
      int64_t lim = int64_t{1} << (8 * scalar_size(v.type) - 1);
      if (*s < -lim || *s >= lim) bad(*s, " does not fit in ", name);
    }
  } else if (v.type == ValueType::FLOAT32 || v.type == ValueType::FLOAT64) {
    if (!std::holds_alternative<double>(v.v)) bad(name, " value must hold double");
  } else if (v.type == ValueType::BOOL) {
    if (!std::holds_alternative<bool>(v.v)) bad("bool value must hold bool");
  } else if (v.type == ValueType::STRING) {
    if (!std::holds_alternative<std::string>(v.v)) bad("string value must hold std::string");
  } else {
    const Array* a = std::get_if<Array>(&v.v);
    if (!a) bad("array value must hold Array");
    if (depth >= kMaxArrayDepth) bad("arrays nested deeper than ", kMaxArrayDepth, " levels");
    for (size_t i = 0; i < a->items.size(); ++i) {
      if (a->items[i].type != a->elem_type)
        bad("element ", i, " is ", value_type_name(a->items[i].type), " in an array of ",
            value_type_name(a->elem_type));
      check_value(key, a->items[i], depth + 1);
    }
  }
}

template <typename T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// Serialises a value already accepted by check_value.
void put_value(std::string& out, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: put(out, static_cast<uint8_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::UINT16: put(out, static_cast<uint16_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::UINT32: put(out, static_cast<uint32_t>(std::get<uint64_t>(v.v))); break;
    case ValueType::UINT64: put(out, std::get<uint64_t>(v.v)); break;
    case ValueType::INT8: put(out, static_cast<int8_t>(std::get<int64_t>(v.v))); break;
    case ValueType::INT16: put(out, static_cast<int16_t>(std::get<int64_t>(v.v))); break;
    case ValueType::INT32: put(out, static_cast<int32_t>(std::get<int64_t>(v.v))); break;
    case ValueType::INT64: put(out, std::get<int64_t>(v.v)); break;
    case ValueType::FLOAT32: put(out, static_cast<float>(std::get<double>(v.v))); break;
    case ValueType::FLOAT64: put(out, std::get<double>(v.v)); break;
    case ValueType::BOOL: put<uint8_t>(out, std::get<bool>(v.v) ? 1 : 0); break;
    case ValueType::STRING: put_string(out, std::get<std::string>(v.v)); break;
    case ValueType::ARRAY: {
      const Array& a = std::get<Array>(v.v);
      put(out, static_cast<uint32_t>(a.elem_type));
      put<uint64_t>(out, a.items.size());
      for (const Value& item : a.items) put_value(out, item);
      break;
    }
  }
}

void put_kv(std::string& out, const std::string& key, const Value& v) {
  put_string(out, key);
  put(out, static_cast<uint32_t>(v.type));
  put_value(out, v);
}

// An array value of `type` whose items hold xs converted to the variant alternative `Stored`.
// Items are assigned in place (not pushed as temporaries): fewer copies of large vocab
// arrays, and it sidesteps a GCC 12 -Wmaybe-uninitialized false positive on variant moves.
template <typename Stored, typename T>
Value make_array(ValueType type, const std::vector<T>& xs) {
  Array a{type, std::vector<Value>(xs.size())};
  for (size_t i = 0; i < xs.size(); ++i) {
    a.items[i].type = type;
    a.items[i].v = Stored(xs[i]);
  }
  return {ValueType::ARRAY, std::move(a)};
}

// A temp file next to the destination, renamed over it on commit(), removed otherwise, so
// a failed or interrupted write never leaves a half-written file under the real name.
class TempFile {
 public:
  explicit TempFile(const std::string& path) : path_(path), tmp_(path + ".tmp") {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) io_fail("cannot create ", tmp_);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, uint64_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n < (uint64_t{1} << 30) ? n : (uint64_t{1} << 30));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) io_fail("cannot write ", tmp_);
      p += w;
      n -= static_cast<uint64_t>(w);
    }
  }
  void write_zeros(uint64_t n) {
    std::array<char, 4096> zeros{};
    for (; n > 0; n -= std::min<uint64_t>(n, zeros.size())) write(zeros.data(), std::min<uint64_t>(n, zeros.size()));
  }
  void commit() {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) io_fail("cannot close ", tmp_);
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) io_fail("cannot rename ", tmp_, " to ", path_);
    committed_ = true;
  }

 private:
  template <typename... Args>
  [[noreturn]] void io_fail(Args&&... what) const {
    int e = errno;
    fail(path_, ": ", std::forward<Args>(what)..., ": ", std::strerror(e));
  }
  std::string path_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace

void Writer::set(const std::string& key, Value v) {
  check_value(key, v, 0);
  for (auto& kv : kv_) {
    if (kv.first == key) {  // replace in place: the key keeps its first position
      kv.second = std::move(v);
      return;
    }
  }
  kv_.emplace_back(key, std::move(v));
}

void Writer::set_u32(const std::string& key, uint32_t v) { set(key, {ValueType::UINT32, uint64_t{v}}); }
void Writer::set_i32(const std::string& key, int32_t v) { set(key, {ValueType::INT32, int64_t{v}}); }
void Writer::set_u64(const std::string& key, uint64_t v) { set(key, {ValueType::UINT64, v}); }
void Writer::set_f32(const std::string& key, float v) { set(key, {ValueType::FLOAT32, double{v}}); }
void Writer::set_bool(const std::string& key, bool v) { set(key, {ValueType::BOOL, v}); }
void Writer::set_string(const std::string& key, const std::string& v) { set(key, {ValueType::STRING, v}); }

void Writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  set(key, make_array<std::string>(ValueType::STRING, v));
}
void Writer::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  set(key, make_array<int64_t>(ValueType::INT32, v));
}
void Writer::set_f32_array(const std::string& key, const std::vector<float>& v) {
  set(key, make_array<double>(ValueType::FLOAT32, v));
}

void Writer::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& ne, const void* data,
                        uint64_t nbytes) {
  auto bad = [&](auto&&... why) { fail("gguf writer: tensor ", name, ": ", why...); };
  if (name.empty() || name.size() > kMaxTensorName)
    bad("name must be 1 to ", kMaxTensorName, " bytes (llama.cpp's limit), it has ", name.size());
  for (const auto& t : tensors_)
    if (t.info.name == name) bad("added twice");
  if (ne.empty() || ne.size() > kMaxDims) bad("has ", ne.size(), " dims, expected 1 to ", kMaxDims);
  auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) bad("unknown GGML type id ", static_cast<uint32_t>(type));
  TensorInfo t{name, ne, type, 0, 0};
  std::string problem = shape_problem(*info, ne, t.nbytes);
  if (!problem.empty()) bad(problem);
  if (nbytes != t.nbytes) bad(nbytes, " bytes given, ", info->name, " of this shape takes ", t.nbytes);
  if (nbytes > 0 && !data) bad("data is null");
  tensors_.push_back({std::move(t), data});
}

void Writer::write(const std::string& path) const {
  HS_CHECK(std::has_single_bit(alignment) && alignment <= std::numeric_limits<uint32_t>::max(), path,
           ": gguf writer: alignment ", alignment, " is not a power of two that fits in u32");
  // general.alignment follows the `alignment` member: a caller-set value must agree with it,
  // and the key is present in the file exactly when the alignment is not the default.
  const Value align_value{ValueType::UINT32, alignment};
  uint64_t n_kv = 0;
  std::string header;
  std::string kvs;
  for (const auto& [key, v] : kv_) {
    if (key == kAlignmentKey) {
      HS_CHECK(v == align_value, path, ": gguf writer: key ", kAlignmentKey, " is ", describe(v),
               " that disagrees with the writer's alignment ", alignment);
      continue;
    }
    put_kv(kvs, key, v);
    ++n_kv;
  }
  if (alignment != kDefaultAlignment) {
    put_kv(kvs, kAlignmentKey, align_value);
    ++n_kv;
  }

  put(header, kMagic);
  put<uint32_t>(header, 3);
  put<uint64_t>(header, tensors_.size());
  put<uint64_t>(header, n_kv);
  header += kvs;
  uint64_t offset = 0;  // tensors are laid out in insertion order, each padded to alignment
  for (const auto& t : tensors_) {
    put_string(header, t.info.name);
    put(header, static_cast<uint32_t>(t.info.ne.size()));
    for (int64_t d : t.info.ne) put(header, d);
    put(header, static_cast<uint32_t>(t.info.type));
    put(header, offset);
    offset += align_up(t.info.nbytes, alignment);
  }
  header.resize(align_up(header.size(), alignment), '\0');

  TempFile f(path);
  f.write(header.data(), header.size());
  for (const auto& t : tensors_) {
    f.write(t.data, t.info.nbytes);
    f.write_zeros(align_up(t.info.nbytes, alignment) - t.info.nbytes);
  }
  f.commit();
}

}  // namespace hs::gguf
