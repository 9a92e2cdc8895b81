// format/npy: the .npy reader round-trips the writer, and refuses a bad header with hs::Error
// naming the file, the header key and the value; shape arithmetic is checked before use (a
// 20-digit dimension, products that overflow or exceed the file).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "format/npy.h"
#include "util/error.h"

using namespace hs;

namespace {

std::string temp_path(const std::string& name) { return testing::TempDir() + "hs_npy_" + name; }

// A version 1.0 file with this header dict (padded as numpy pads it) and `data_bytes` bytes.
std::string npy_file(const std::string& dict, size_t data_bytes) {
  std::string h = dict;
  const size_t total = 10 + h.size() + 1;
  h.append((total + 63) / 64 * 64 - total, ' ');
  h += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + std::string(data_bytes, '\0');
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = temp_path(name);
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// The message of the hs::Error read_f32 throws (any other exception type fails the test).
std::string read_error(const std::string& path) {
  try {
    npy::read_f32(path);
    return "<read>";
  } catch (const Error& e) {
    return e.what();
  }
}

std::string shape_dict(const std::string& shape) {
  return "{'descr': '<f4', 'fortran_order': False, 'shape': (" + shape + "), }";
}

}  // namespace

TEST(Npy, RoundTripsTheWriter) {
  const std::vector<float> v = {1.5f, -2.0f, 0.0f, 3.25f, 7.0f, -0.5f};
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{6}, {2, 3}, {1, 2, 3}, {0, 4}}) {
    const std::string path = temp_path("rt.npy");
    npy::write_f32(path, shape, v.data());
    const npy::ArrayF32 a = npy::read_f32(path);
    EXPECT_EQ(a.shape, shape);
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    ASSERT_EQ(a.data.size(), static_cast<size_t>(n));
    for (size_t i = 0; i < a.data.size(); ++i) EXPECT_EQ(a.data[i], v[i]);
  }
}

TEST(Npy, ShapeArithmeticIsChecked) {
  // A 20-digit dimension (stoll used to throw std::out_of_range, not the project's error).
  std::string path = write("20digits.npy", npy_file(shape_dict("18446744073709551616, 2"), 16));
  std::string msg = read_error(path);
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
  EXPECT_NE(msg.find("'shape' = (18446744073709551616, 2)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not fit in 63 bits"), std::string::npos) << msg;
  // Each dimension fits, the product overflows 64 bits: refused, not wrapped into a small size.
  path = write("overflow.npy", npy_file(shape_dict("4294967296, 4294967296, 2"), 16));
  msg = read_error(path);
  EXPECT_NE(msg.find("truncated data"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(4294967296, 4294967296, 2)"), std::string::npos) << msg;
  // 2^62 x 4 wraps to 0 bytes in 64-bit arithmetic: the old check let it through.
  path = write("wrap.npy", npy_file(shape_dict("4611686018427387904,"), 0));
  EXPECT_NE(read_error(path).find("truncated data"), std::string::npos) << read_error(path);
  // One float short of the shape.
  path = write("short.npy", npy_file(shape_dict("2, 3"), 20));
  EXPECT_NE(read_error(path).find("truncated data (the shape needs more than the 5 floats"), std::string::npos)
      << read_error(path);
  // A zero dimension holds nothing, whatever the others say.
  path = write("zero.npy", npy_file(shape_dict("0, 99999999999"), 0));
  EXPECT_EQ(read_error(path), "<read>");
}

TEST(Npy, MalformedHeadersAreTheProjectsError) {
  EXPECT_NE(read_error(write("neg.npy", npy_file(shape_dict("-3,"), 16))).find("not a tuple of non-negative integers"),
            std::string::npos);
  EXPECT_NE(read_error(write("open.npy", npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3", 24)))
                .find("no closing ')'"),
            std::string::npos);
  EXPECT_NE(read_error(write("dtype.npy", npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16)))
                .find("dtype is not '<f4'"),
            std::string::npos);
  EXPECT_NE(read_error(write("magic.npy", "NUMPY but not quite")).find("not a .npy file"), std::string::npos);
  std::string cut = npy_file(shape_dict("2,"), 8);
  cut.resize(40);
  EXPECT_NE(read_error(write("cut.npy", cut)).find("truncated header"), std::string::npos);
}
