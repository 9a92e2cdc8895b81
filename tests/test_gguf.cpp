// format/gguf: round trips through our writer, a file assembled byte by byte here (so the
// reader is checked against the format, not only against our writer), a corruption table,
// every truncation of a small file, random byte flips, and the strict getters' messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

#include "format/gguf.h"
#include "model/config.h"
#include "model/synthetic.h"
#include "util/error.h"
#include "util/mmap.h"

using namespace hs;
using namespace hs::gguf;

namespace {

std::string temp_path(const std::string& name) { return testing::TempDir() + "hs_gguf_" + name; }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

// The hs::Error message File gives for path, or "<opened>" when it opens; any other
// exception type escapes and fails the test.
std::string open_error(const std::string& path) {
  try {
    File f(path);
    return "<opened>";
  } catch (const Error& e) {
    return e.what();
  }
}

void expect_contains(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
}

// Little-endian GGUF bytes written by hand, independent of gguf.cpp.
struct Bytes {
  std::string s;
  template <typename T>
  Bytes& raw(T v) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    s.append(b, sizeof(T));
    return *this;
  }
  Bytes& u32(uint32_t v) { return raw(v); }
  Bytes& u64(uint64_t v) { return raw(v); }
  Bytes& str(const std::string& v) {
    u64(v.size());
    s += v;
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    s += "GGUF";
    return u32(version).u64(n_tensors).u64(n_kv);
  }
  Bytes& key(const std::string& k, ValueType t) { return str(k).u32(static_cast<uint32_t>(t)); }
  Bytes& kv_u32(const std::string& k, uint32_t v) { return key(k, ValueType::UINT32).u32(v); }
  Bytes& kv_str(const std::string& k, const std::string& v) { return key(k, ValueType::STRING).str(v); }
  Bytes& tensor(const std::string& name, std::vector<int64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) raw(d);
    return u32(type).u64(offset);
  }
  Bytes& pad(size_t align) {
    s.resize((s.size() + align - 1) / align * align, '\0');
    return *this;
  }
  Bytes& fill(size_t n, uint8_t first) {
    for (size_t i = 0; i < n; ++i) s += static_cast<char>(static_cast<uint8_t>(first + i));
    return *this;
  }
};

Value u(ValueType t, uint64_t v) { return {t, v}; }
Value i(ValueType t, int64_t v) { return {t, v}; }
Value f32(float v) { return {ValueType::FLOAT32, double{v}}; }
Value f64(double v) { return {ValueType::FLOAT64, v}; }
Value str(const std::string& v) { return {ValueType::STRING, v}; }
Value arr(ValueType elem, std::vector<Value> items) { return {ValueType::ARRAY, Array{elem, std::move(items)}}; }

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 7);
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Round trips through the writer

TEST(GgufRoundTrip, EveryValueType) {
  const std::vector<std::pair<std::string, Value>> kvs = {
      {"u8", u(ValueType::UINT8, 255)},
      {"i8", i(ValueType::INT8, -128)},
      {"u16", u(ValueType::UINT16, 65535)},
      {"i16", i(ValueType::INT16, -32768)},
      {"u32", u(ValueType::UINT32, 4294967295u)},
      {"i32", i(ValueType::INT32, std::numeric_limits<int32_t>::min())},
      {"f32", f32(-1.5e-7f)},
      {"bool.t", {ValueType::BOOL, true}},
      {"bool.f", {ValueType::BOOL, false}},
      {"str.unicode", str("héllo 世界 🚀 <｜begin▁of▁sentence｜>")},
      {"str.empty", str("")},
      {"str.nul", str(std::string("a\0b", 3))},
      {"u64.max", u(ValueType::UINT64, std::numeric_limits<uint64_t>::max())},
      {"i64.min", i(ValueType::INT64, std::numeric_limits<int64_t>::min())},
      {"i64.max", i(ValueType::INT64, std::numeric_limits<int64_t>::max())},
      {"f64", f64(3.141592653589793)},
      {"f64.denorm", f64(std::numeric_limits<double>::denorm_min())},
      {"arr.str", arr(ValueType::STRING, {str("a"), str(""), str("Ġthe"), str("日本")})},
      {"arr.u8", arr(ValueType::UINT8, {u(ValueType::UINT8, 0), u(ValueType::UINT8, 255)})},
      {"arr.i64", arr(ValueType::INT64, {i(ValueType::INT64, -1), i(ValueType::INT64, 1LL << 62)})},
      {"arr.f64", arr(ValueType::FLOAT64, {f64(-0.0), f64(1e300)})},
      {"arr.bool", arr(ValueType::BOOL, {{ValueType::BOOL, true}, {ValueType::BOOL, false}})},
      {"arr.nested", arr(ValueType::ARRAY, {arr(ValueType::INT32, {i(ValueType::INT32, 1), i(ValueType::INT32, 2)}),
                                            arr(ValueType::STRING, {str("x")}), arr(ValueType::UINT8, {})})},
      {"arr.empty.f32", arr(ValueType::FLOAT32, {})},
      {"arr.empty.str", arr(ValueType::STRING, {})},
  };
  Writer w;
  for (const auto& [k, v] : kvs) w.set(k, v);
  const std::string path = temp_path("values.gguf");
  w.write(path);
  EXPECT_FALSE(file_exists(path + ".tmp"));

  File f(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_FALSE(f.has("general.alignment"));  // default alignment: key not written
  ASSERT_EQ(f.keys().size(), kvs.size());
  for (size_t k = 0; k < kvs.size(); ++k) {
    EXPECT_EQ(f.keys()[k], kvs[k].first);  // insertion order
    const Value* v = f.find(kvs[k].first);
    ASSERT_NE(v, nullptr) << kvs[k].first;
    EXPECT_TRUE(*v == kvs[k].second) << kvs[k].first;
  }
  EXPECT_TRUE(std::signbit(std::get<double>(std::get<Array>(f.find("arr.f64")->v).items[0].v)));
  EXPECT_EQ(f.get_u64("u64.max"), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(f.get_string("str.unicode"), "héllo 世界 🚀 <｜begin▁of▁sentence｜>");
  EXPECT_EQ(f.get_string("str.nul").size(), 3u);
  EXPECT_EQ(f.get_f32("f32"), -1.5e-7f);
  EXPECT_EQ(f.get_string_array("arr.str"), (std::vector<std::string>{"a", "", "Ġthe", "日本"}));
  EXPECT_TRUE(f.get_f32_array("arr.empty.f32").empty());
  EXPECT_TRUE(f.get_string_array("arr.empty.str").empty());
}

TEST(GgufRoundTrip, TypedSettersAndReplaceInPlace) {
  Writer w;
  w.set_u32("a", 1);
  w.set_string("b", "x");
  w.set_i32("c", -5);
  w.set_u64("d", 1ull << 40);
  w.set_f32("e", 0.25f);
  w.set_bool("f", true);
  w.set_string_array("g", {"p", "q"});
  w.set_i32_array("h", {0, 0, 4, 128});
  w.set_f32_array("i", {10.0f, 10.0f});
  w.set_u32("a", 2);  // replaces, keeps first position
  const std::string path = temp_path("setters.gguf");
  w.write(path);
  File f(path);
  EXPECT_EQ(f.keys(), (std::vector<std::string>{"a", "b", "c", "d", "e", "f", "g", "h", "i"}));
  EXPECT_EQ(f.get_u32("a"), 2u);
  EXPECT_EQ(f.get_string("b"), "x");
  EXPECT_EQ(f.get_i32("c"), -5);
  EXPECT_EQ(f.get_u64("d"), 1ull << 40);
  EXPECT_EQ(f.get_f32("e"), 0.25f);
  EXPECT_TRUE(f.get_bool("f"));
  EXPECT_EQ(f.get_string_array("g"), (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(f.get_int_array("h"), (std::vector<int64_t>{0, 0, 4, 128}));
  EXPECT_EQ(f.get_f32_array("i"), (std::vector<float>{10.0f, 10.0f}));
}

TEST(GgufRoundTrip, TensorsWithNonDefaultAlignment) {
  struct T {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    uint64_t nbytes;
  };
  const std::vector<T> specs = {
      {"token_embd.weight", GgmlType::F16, {64, 3}, 64 * 3 * 2},
      {"output_norm.weight", GgmlType::F32, {5}, 20},
      {"blk.0.attn_q_a.weight", GgmlType::Q8_0, {64, 3}, 2 * 34 * 3},
      {"blk.3.ffn_gate_exps.weight", GgmlType::MXFP4, {32, 2, 2}, 17 * 4},
      {"blk.0.ffn_gate_tid2eid", GgmlType::I32, {6, 7}, 6 * 7 * 4},
  };
  std::vector<std::vector<uint8_t>> data;
  Writer w;
  w.alignment = 64;
  w.set_string("general.architecture", "deepseek4");
  for (size_t k = 0; k < specs.size(); ++k) {
    data.push_back(pattern(specs[k].nbytes, static_cast<uint8_t>(k * 31 + 1)));
    EXPECT_EQ(tensor_nbytes(specs[k].type, specs[k].ne), specs[k].nbytes);
    w.add_tensor(specs[k].name, specs[k].type, specs[k].ne, data[k].data(), data[k].size());
  }
  const std::string path = temp_path("tensors.gguf");
  w.write(path);

  File f(path);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_u32("general.alignment"), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t k = 0; k < specs.size(); ++k) {
    const TensorInfo& t = f.tensors()[k];
    EXPECT_EQ(t.name, specs[k].name);
    EXPECT_EQ(t.type, specs[k].type);
    EXPECT_EQ(t.ne, specs[k].ne);
    EXPECT_EQ(t.nbytes, specs[k].nbytes);
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(f.find_tensor(specs[k].name), &t);
    EXPECT_EQ(std::memcmp(f.tensor_data(t), data[k].data(), data[k].size()), 0) << t.name;
  }
  EXPECT_EQ(f.tensors()[3].n_elements(), 128);
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufWriter, RejectsMalformedInput) {
  auto writer_error = [](auto&& fn) -> std::string {
    try {
      Writer w;
      fn(w);
      return "<no error>";
    } catch (const Error& e) {
      return e.what();
    }
  };
  std::vector<uint8_t> buf(1024);
  expect_contains(writer_error([&](Writer& w) { w.add_tensor("t.w", GgmlType::F32, {4}, buf.data(), 15); }),
                  {"t.w", "15", "16"});
  expect_contains(writer_error([&](Writer& w) { w.add_tensor("t.q", GgmlType::Q8_0, {33}, buf.data(), 34); }),
                  {"t.q", "33", "Q8_0", "32"});
  expect_contains(writer_error([&](Writer& w) {
                    w.add_tensor("t.w", GgmlType::F32, {1}, buf.data(), 4);
                    w.add_tensor("t.w", GgmlType::F32, {1}, buf.data(), 4);
                  }),
                  {"t.w", "twice"});
  expect_contains(writer_error([&](Writer& w) { w.add_tensor("t.5d", GgmlType::F32, {1, 1, 1, 1, 1}, buf.data(), 4); }),
                  {"t.5d", "5 dims"});
  expect_contains(writer_error([&](Writer& w) { w.add_tensor(std::string(64, 'n'), GgmlType::F32, {1}, buf.data(), 4); }),
                  {"llama.cpp"});
  expect_contains(writer_error([&](Writer& w) { w.add_tensor("t.x", static_cast<GgmlType>(77), {1}, buf.data(), 4); }),
                  {"t.x", "77"});
  expect_contains(writer_error([](Writer& w) { w.set("k.bad", {ValueType::UINT32, std::string("x")}); }),
                  {"k.bad", "u32"});
  expect_contains(writer_error([](Writer& w) { w.set("k.range", u(ValueType::UINT8, 256)); }), {"k.range", "256", "u8"});
  expect_contains(writer_error([](Writer& w) { w.set("k.range", i(ValueType::INT16, -32769)); }), {"k.range", "i16"});
  expect_contains(writer_error([](Writer& w) { w.set("k.arr", arr(ValueType::INT32, {u(ValueType::UINT32, 1)})); }),
                  {"k.arr", "element 0", "u32", "i32"});
  expect_contains(writer_error([](Writer& w) {
                    w.alignment = 48;
                    w.write(temp_path("never.gguf"));
                  }),
                  {"never.gguf", "alignment 48"});
  expect_contains(writer_error([](Writer& w) {
                    w.set_u32("general.alignment", 64);  // disagrees with w.alignment (32)
                    w.write(temp_path("never.gguf"));
                  }),
                  {"general.alignment", "32"});
  EXPECT_FALSE(file_exists(temp_path("never.gguf")));
  const std::string no_dir = temp_path("no_such_dir/out.gguf");
  expect_contains(writer_error([&](Writer& w) { w.write(no_dir); }), {no_dir});
}

TEST(GgufWriter, AlignmentKeyMatchingWriterIsAccepted) {
  Writer w;
  w.alignment = 128;
  w.set_u32("general.alignment", 128);
  w.set_u32("x", 1);
  const std::string path = temp_path("align128.gguf");
  w.write(path);
  File f(path);
  EXPECT_EQ(f.alignment(), 128u);
  EXPECT_EQ(f.keys().size(), 2u);
}

// ---------------------------------------------------------------------------------------
// A file assembled by hand

namespace {

// Two tensors (F32 {8} at 0, Q8_0 {32, 2} at 32) laid out exactly as llama.cpp's writer
// would: header padded to 32, each tensor's data padded to 32.
std::string hand_file(uint32_t version) {
  Bytes b;
  b.header(2, 5, version)
      .kv_str("general.architecture", "deepseek4")
      .kv_u32("deepseek4.block_count", 43)
      .key("deepseek4.rope.freq_base", ValueType::FLOAT32)
      .raw(10000.0f)
      .key("deepseek4.attention.compress_ratios", ValueType::ARRAY)
      .u32(static_cast<uint32_t>(ValueType::INT32))
      .u64(4)
      .raw(int32_t{0}).raw(int32_t{0}).raw(int32_t{4}).raw(int32_t{128})
      .key("tokenizer.ggml.tokens", ValueType::ARRAY)
      .u32(static_cast<uint32_t>(ValueType::STRING))
      .u64(2)
      .str("a")
      .str("<｜begin▁of▁sentence｜>")
      .tensor("output_norm.weight", {8}, 0, 0)
      .tensor("blk.0.attn_q_a.weight", {32, 2}, 8, 32)
      .pad(32);
  for (int k = 1; k <= 8; ++k) b.raw(static_cast<float>(k));
  b.fill(68, 100).pad(32);
  return b.s;
}

}  // namespace

TEST(GgufHandAssembled, ReaderParsesIt) {
  for (uint32_t version : {3u, 2u}) {
    const std::string bytes = hand_file(version);
    const std::string path = temp_path("hand.gguf");
    write_bytes(path, bytes);
    File f(path);
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.keys(), (std::vector<std::string>{"general.architecture", "deepseek4.block_count",
                                                  "deepseek4.rope.freq_base", "deepseek4.attention.compress_ratios",
                                                  "tokenizer.ggml.tokens"}));
    EXPECT_EQ(f.get_string("general.architecture"), "deepseek4");
    EXPECT_EQ(f.get_u32("deepseek4.block_count"), 43u);
    EXPECT_EQ(f.get_f32("deepseek4.rope.freq_base"), 10000.0f);
    EXPECT_EQ(f.get_int_array("deepseek4.attention.compress_ratios"), (std::vector<int64_t>{0, 0, 4, 128}));
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"),
              (std::vector<std::string>{"a", "<｜begin▁of▁sentence｜>"}));
    ASSERT_EQ(f.tensors().size(), 2u);
    const TensorInfo* norm = f.find_tensor("output_norm.weight");
    const TensorInfo* q = f.find_tensor("blk.0.attn_q_a.weight");
    ASSERT_TRUE(norm && q);
    EXPECT_EQ(norm->type, GgmlType::F32);
    EXPECT_EQ(q->type, GgmlType::Q8_0);
    EXPECT_EQ(q->ne, (std::vector<int64_t>{32, 2}));
    EXPECT_EQ(q->nbytes, 68u);
    EXPECT_EQ(f.data_offset(), bytes.size() - 32 - 96);
    const float* nd = reinterpret_cast<const float*>(f.tensor_data(*norm));
    for (int k = 0; k < 8; ++k) EXPECT_EQ(nd[k], static_cast<float>(k + 1));
    for (int k = 0; k < 68; ++k) EXPECT_EQ(f.tensor_data(*q)[k], static_cast<uint8_t>(100 + k));
  }
}

TEST(GgufHandAssembled, WriterProducesTheSameBytes) {
  std::vector<float> norm = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<uint8_t> q(68);
  for (int k = 0; k < 68; ++k) q[k] = static_cast<uint8_t>(100 + k);
  Writer w;
  w.set_string("general.architecture", "deepseek4");
  w.set_u32("deepseek4.block_count", 43);
  w.set_f32("deepseek4.rope.freq_base", 10000.0f);
  w.set_i32_array("deepseek4.attention.compress_ratios", {0, 0, 4, 128});
  w.set_string_array("tokenizer.ggml.tokens", {"a", "<｜begin▁of▁sentence｜>"});
  w.add_tensor("output_norm.weight", GgmlType::F32, {8}, norm.data(), 32);
  w.add_tensor("blk.0.attn_q_a.weight", GgmlType::Q8_0, {32, 2}, q.data(), 68);
  const std::string path = temp_path("hand_by_writer.gguf");
  w.write(path);
  EXPECT_TRUE(read_file(path) == hand_file(3));
}

TEST(GgufHandAssembled, ZeroDimTensorIsAScalar) {
  Bytes b;
  b.header(1, 0).tensor("scale", {}, 0, 0).pad(32).raw(2.5f);
  const std::string path = temp_path("scalar.gguf");
  write_bytes(path, b.s);
  File f(path);
  EXPECT_EQ(f.tensors()[0].ne, (std::vector<int64_t>{1}));
  EXPECT_EQ(f.tensors()[0].nbytes, 4u);
}

// ---------------------------------------------------------------------------------------
// Corruption

namespace {

struct Corrupt {
  const char* what;
  std::string bytes;
  std::vector<std::string> message_parts;
};

Bytes one_tensor(std::vector<int64_t> ne, uint32_t type, uint64_t offset, size_t data_bytes) {
  Bytes b;
  b.header(1, 0).tensor("blk.0.w", std::move(ne), type, offset).pad(32).fill(data_bytes, 0);
  return b;
}

std::vector<Corrupt> corruption_table() {
  const uint64_t huge = uint64_t{1} << 60;
  std::vector<Corrupt> t;
  t.push_back({"empty file", "", {"magic"}});
  t.push_back({"bad magic", Bytes().raw(uint32_t{0x4c4d4747}).u32(3).u64(0).u64(0).s, {"magic", "GGML", "GGUF"}});
  t.push_back({"version 4", Bytes().header(0, 0, 4).s, {"version 4"}});
  t.push_back({"version 1", Bytes().header(0, 0, 1).s, {"version 1"}});
  t.push_back({"big-endian", Bytes().header(0, 0, 0x03000000).s, {"big-endian"}});
  t.push_back({"huge tensor count", Bytes().header(huge, 0).s, {"tensor infos cannot fit"}});
  t.push_back({"huge kv count", Bytes().header(0, huge).s, {"metadata entries cannot fit"}});
  t.push_back({"key length past EOF", Bytes().header(0, 1).u64(huge).fill(16, 0).s, {"metadata entry #0", "truncated"}});
  t.push_back({"string value past EOF", Bytes().header(0, 1).key("general.name", ValueType::STRING).u64(huge).s,
               {"key general.name", "truncated", "1152921504606846976"}});
  t.push_back({"huge array count",
               Bytes().header(0, 1).key("tokenizer.ggml.tokens", ValueType::ARRAY).u32(8).u64(huge).s,
               {"key tokenizer.ggml.tokens", "cannot fit"}});
  t.push_back({"unknown value type", Bytes().header(0, 1).key("k.t", static_cast<ValueType>(13)).u32(0).s,
               {"key k.t", "value type id 13"}});
  t.push_back({"unknown array element type",
               Bytes().header(0, 1).key("k.a", ValueType::ARRAY).u32(99).u64(0).s, {"key k.a", "99"}});
  t.push_back({"bool not 0/1", Bytes().header(0, 1).key("k.b", ValueType::BOOL).raw(uint8_t{2}).s,
               {"key k.b", "bool value is 2"}});
  {
    Bytes b;
    b.header(0, 1).key("k.deep", ValueType::ARRAY);
    for (int d = 0; d < 9; ++d) b.u32(static_cast<uint32_t>(ValueType::ARRAY)).u64(1);
    b.u32(0).u64(0);
    t.push_back({"arrays nested too deep", b.s, {"key k.deep", "nested deeper"}});
  }
  t.push_back({"duplicate key", Bytes().header(0, 2).kv_u32("k.dup", 1).kv_u32("k.dup", 2).s, {"key k.dup", "duplicate"}});
  t.push_back({"alignment not a power of two",
               Bytes().header(0, 1).kv_u32("general.alignment", 48).s, {"general.alignment", "48", "power of two"}});
  t.push_back({"alignment of the wrong type",
               Bytes().header(0, 1).key("general.alignment", ValueType::UINT64).u64(64).s,
               {"general.alignment", "expected u32, found u64"}});
  t.push_back({"tensor name past EOF", Bytes().header(1, 0).u64(huge).fill(32, 0).s, {"tensor info #0", "truncated"}});
  t.push_back({"tensor data past EOF", one_tensor({1000}, 0, 0, 32).s, {"tensor blk.0.w", "past the end"}});
  t.push_back({"tensor offset past EOF", one_tensor({8}, 0, huge, 32).s, {"tensor blk.0.w", "past the end"}});
  t.push_back({"unaligned offset", one_tensor({4}, 0, 4, 64).s, {"tensor blk.0.w", "offset 4", "alignment 32"}});
  t.push_back({"unknown type id", one_tensor({4}, 77, 0, 32).s, {"tensor blk.0.w", "type id 77"}});
  t.push_back({"n_dims 5", one_tensor({1, 1, 1, 1, 1}, 0, 0, 32).s, {"tensor blk.0.w", "n_dims is 5"}});
  t.push_back({"ne[0] not a block multiple", one_tensor({33, 2}, 8, 0, 128).s, {"tensor blk.0.w", "33", "Q8_0", "32"}});
  t.push_back({"negative ne", one_tensor({4, -1}, 0, 0, 32).s, {"tensor blk.0.w", "ne[1] = -1"}});
  t.push_back({"element count overflow", one_tensor({1 << 30, 1 << 30, 1 << 30}, 0, 0, 32).s,
               {"tensor blk.0.w", "too large"}});
  t.push_back({"duplicate tensor name",
               Bytes().header(2, 0).tensor("blk.0.w", {8}, 0, 0).tensor("blk.0.w", {8}, 0, 32).pad(32).fill(64, 0).s,
               {"tensor blk.0.w", "duplicate"}});
  return t;
}

}  // namespace

TEST(GgufCorrupt, Table) {
  const std::string path = temp_path("corrupt.gguf");
  for (const Corrupt& c : corruption_table()) {
    SCOPED_TRACE(c.what);
    write_bytes(path, c.bytes);
    std::string msg = open_error(path);
    expect_contains(msg, c.message_parts);
    expect_contains(msg, {path});
  }
}

TEST(GgufCorrupt, EveryTruncationFails) {
  // The last tensor is a whole number of alignment units, so the file has no trailing
  // padding and every proper prefix cuts into something the header promises.
  std::vector<uint8_t> a = pattern(34 * 2, 1), b = pattern(32, 9);
  Writer w;
  w.set_string("general.architecture", "deepseek4");
  w.set_u32("deepseek4.block_count", 1);
  w.set_string_array("tokenizer.ggml.tokens", {"x", "yy", ""});
  w.set("nested", arr(ValueType::ARRAY, {arr(ValueType::INT16, {i(ValueType::INT16, -3)})}));
  w.add_tensor("blk.0.attn_kv.weight", GgmlType::Q8_0, {64}, a.data(), a.size());
  w.add_tensor("output_norm.weight", GgmlType::F32, {8}, b.data(), b.size());
  const std::string full_path = temp_path("full.gguf");
  w.write(full_path);
  const std::string full = read_file(full_path);
  ASSERT_EQ(open_error(full_path), "<opened>");

  const std::string path = temp_path("truncated.gguf");
  for (size_t n = 0; n < full.size(); ++n) {
    write_bytes(path, full.substr(0, n));
    std::string msg = open_error(path);
    ASSERT_NE(msg, "<opened>") << "prefix of " << n << " of " << full.size() << " bytes opened";
    ASSERT_NE(msg.find(path), std::string::npos) << msg;
  }
}

TEST(GgufCorrupt, RandomByteFlipsNeverCrash) {
  const std::string base = hand_file(3);
  const std::string path = temp_path("flipped.gguf");
  std::mt19937 rng(1234);
  int opened = 0;
  for (int iter = 0; iter < 1000; ++iter) {
    std::string s = base;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < flips; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    write_bytes(path, s);
    try {
      File f(path);  // when it opens, everything it hands out must lie inside the file
      ++opened;
      for (const TensorInfo& t : f.tensors())
        ASSERT_LE(f.data_offset() + t.offset + t.nbytes, s.size()) << t.name;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(opened, 0);  // flips inside tensor data leave a valid file
}

// ---------------------------------------------------------------------------------------
// Strict getters

TEST(GgufGetters, MismatchesNameKeyAndBothTypes) {
  Writer w;
  w.set_string("deepseek4.block_count", "43");
  w.set_u32("u32", 7);
  w.set("i16", i(ValueType::INT16, -2));
  w.set("f64", f64(1.0));
  w.set_i32_array("arr.i32", {1, -2});
  w.set("arr.u8", arr(ValueType::UINT8, {u(ValueType::UINT8, 200)}));
  w.set("arr.u64", arr(ValueType::UINT64, {u(ValueType::UINT64, 5)}));
  w.set("arr.u64.big", arr(ValueType::UINT64, {u(ValueType::UINT64, std::numeric_limits<uint64_t>::max())}));
  w.set_f32_array("arr.f32", {1.0f});
  const std::string path = temp_path("getters.gguf");
  w.write(path);
  File f(path);

  auto err = [](auto&& fn) -> std::string {
    try {
      fn();
      return "<no error>";
    } catch (const Error& e) {
      return e.what();
    }
  };
  EXPECT_EQ(err([&] { f.get_u32("deepseek4.block_count"); }),
            path + ": key deepseek4.block_count: expected u32, found string");
  expect_contains(err([&] { f.get_i32("u32"); }), {path, "key u32", "expected i32", "found u32"});
  expect_contains(err([&] { f.get_u64("i16"); }), {"key i16", "expected u64", "found i16"});
  expect_contains(err([&] { f.get_f32("f64"); }), {"key f64", "expected f32", "found f64"});
  expect_contains(err([&] { f.get_bool("u32"); }), {"key u32", "expected bool", "found u32"});
  expect_contains(err([&] { f.get_string("arr.i32"); }), {"key arr.i32", "expected string", "found array of i32"});
  expect_contains(err([&] { f.get_string_array("arr.i32"); }),
                  {"key arr.i32", "expected array of string", "found array of i32"});
  expect_contains(err([&] { f.get_f32_array("arr.i32"); }), {"key arr.i32", "expected array of f32", "found array of i32"});
  expect_contains(err([&] { f.get_int_array("arr.f32"); }), {"key arr.f32", "expected array of integers", "found array of f32"});
  expect_contains(err([&] { f.get_int_array("u32"); }), {"key u32", "found u32"});
  expect_contains(err([&] { f.get_int_array("arr.u64.big"); }), {"key arr.u64.big", "does not fit"});
  EXPECT_EQ(err([&] { f.get_u32("nope"); }), path + ": missing key nope");
  expect_contains(err([&] { f.get_string_array("nope"); }), {"missing key nope"});

  EXPECT_EQ(f.get_u64("u32"), 7u);  // get_u64 also accepts u32
  EXPECT_EQ(f.get_int_array("arr.i32"), (std::vector<int64_t>{1, -2}));
  EXPECT_EQ(f.get_int_array("arr.u8"), (std::vector<int64_t>{200}));
  EXPECT_EQ(f.get_int_array("arr.u64"), (std::vector<int64_t>{5}));
  EXPECT_FALSE(f.has("nope"));
  EXPECT_EQ(f.find("nope"), nullptr);
}

TEST(GgufGetters, ValueTypeNames) {
  EXPECT_STREQ(value_type_name(ValueType::UINT8), "u8");
  EXPECT_STREQ(value_type_name(ValueType::FLOAT64), "f64");
  EXPECT_STREQ(value_type_name(ValueType::ARRAY), "array");
  EXPECT_STREQ(value_type_name(static_cast<ValueType>(99)), "unknown");
}

// The DeepSeek-V4 config from GGUF metadata: every integer key is range-checked before the cast
// to the config's int fields, token ids against the vocabulary, and the message names the
// file, the key and the value. The built-in model's metadata is the base, one key replaced.
TEST(GgufConfig, NumbersAreRangeCheckedBeforeAnyCast) {
  const std::string path = temp_path("config_numbers.gguf");
  auto write_with = [&](const std::function<void(Writer&)>& change) {
    Writer w;
    write_synthetic_metadata(builtin_spec(), w);
    change(w);
    w.write(path);
  };
  write_with([](Writer&) {});
  const ModelConfig base = config_from_gguf(File(path));
  auto refused = [&](const std::function<void(Writer&)>& change, const std::vector<std::string>& parts) {
    write_with(change);
    try {
      config_from_gguf(File(path));
      ADD_FAILURE() << "accepted; expected " << parts.front();
    } catch (const Error& e) {
      expect_contains(e.what(), parts);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  refused([](Writer& w) { w.set_u32("tokenizer.ggml.eos_token_id", 4294967295u); },
          {"tokenizer.ggml.eos_token_id = 4294967295", "not a token id"});
  refused([&](Writer& w) { w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(base.vocab_size)); },
          {"tokenizer.ggml.bos_token_id = " + std::to_string(base.vocab_size), "not a token id"});
  refused([](Writer& w) { w.set_u32("deepseek4.embedding_length", 3000000000u); },
          {"deepseek4.embedding_length = 3000000000", "out of range"});
  refused([](Writer& w) { w.set_u32("deepseek4.attention.head_count", 2147483648u); },
          {"deepseek4.attention.head_count = 2147483648", "out of range"});
  refused([](Writer& w) { w.set_u64("deepseek4.context_length", ~uint64_t{0}); },
          {"deepseek4.context_length = 18446744073709551615", "out of range"});
  refused([&](Writer& w) {
    std::vector<int32_t> r(base.compress_ratios.begin(), base.compress_ratios.end());
    r.back() = -4;
    w.set_i32_array("deepseek4.attention.compress_ratios", r);
  }, {"deepseek4.attention.compress_ratios: entry " + std::to_string(base.n_layers - 1) + " = -4", "out of range"});
  refused([](Writer& w) { w.set_f32("deepseek4.rope.freq_base", std::numeric_limits<float>::quiet_NaN()); },
          {"rope_theta = nan", "finite"});
  // Each size in range, their product not: experts x width x hidden overflows 2^63.
  refused([](Writer& w) {
    w.set_u32("deepseek4.expert_count", 2000000000u);
    w.set_u32("deepseek4.expert_feed_forward_length", 1000000000u);
  }, {"n_routed_experts * moe_intermediate_size * hidden_size", "too large"});
}
