#include "format/npy.h"

#include <cstdio>
#include <cstring>

#include "util/error.h"
#include "util/mmap.h"

namespace hs::npy {

void write_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (shape.size() == 1 || i + 1 < shape.size()) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
    n *= shape[i];
  }
  dict += "), }";
  // Header (magic 6 + version 2 + len 2 + dict + '\n') padded with spaces to a multiple of 64.
  size_t total = 10 + dict.size() + 1;
  size_t padded = (total + 63) / 64 * 64;
  dict.append(padded - total, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  uint16_t hl = static_cast<uint16_t>(dict.size());
  header += static_cast<char>(hl & 0xff);
  header += static_cast<char>(hl >> 8);
  header += dict;
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  HS_CHECK(f, "cannot write ", path, ": ", std::strerror(errno));
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            (n == 0 || std::fwrite(data, sizeof(float), static_cast<size_t>(n), f) == static_cast<size_t>(n));
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    fail("cannot write ", path, ": ", std::strerror(errno));
  }
}

ArrayF32 read_f32(const std::string& path) {
  MappedFile m(path);
  const uint8_t* p = m.data();
  HS_CHECK(m.size() >= 10 && std::memcmp(p, "\x93NUMPY", 6) == 0, path, ": not a .npy file");
  HS_CHECK(p[6] == 1, path, ": unsupported .npy version ", int(p[6]));
  size_t hl = p[8] | (p[9] << 8);
  HS_CHECK(10 + hl <= m.size(), path, ": truncated header");
  std::string h(reinterpret_cast<const char*>(p + 10), hl);
  HS_CHECK(h.find("'descr': '<f4'") != std::string::npos, path, ": dtype is not '<f4'");
  HS_CHECK(h.find("'fortran_order': False") != std::string::npos, path, ": Fortran order is not supported");
  auto b = h.find("'shape': (");
  HS_CHECK(b != std::string::npos, path, ": no shape in header");
  auto e = h.find(')', b);
  HS_CHECK(e != std::string::npos, path, ": header key 'shape': no closing ')'");
  ArrayF32 a;
  const std::string s = h.substr(b + 10, e - b - 10);
  // Each dimension and their product are checked before any conversion or multiplication:
  // the product must also fit the file as 4-byte floats.
  const uint64_t avail = (m.size() - 10 - hl) / 4;
  uint64_t n = 1;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == ',')) ++i;
    if (i >= s.size()) break;
    size_t j = i;
    uint64_t d = 0;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') {
      HS_CHECK(d <= (uint64_t{INT64_MAX} - 9) / 10, path, ": header key 'shape' = (", s, "): dimension ", a.shape.size(),
               " does not fit in 63 bits");
      d = d * 10 + static_cast<uint64_t>(s[j] - '0');
      ++j;
    }
    HS_CHECK(j > i, path, ": header key 'shape' = (", s, "): not a tuple of non-negative integers");
    HS_CHECK(!__builtin_mul_overflow(n, d, &n) && n <= avail, path, ": header key 'shape' = (", s, "): ",
             "truncated data (the shape needs more than the ", avail, " floats the file holds)");
    a.shape.push_back(static_cast<int64_t>(d));
    i = j;
  }
  a.data.resize(static_cast<size_t>(n));
  if (n) std::memcpy(a.data.data(), p + 10 + hl, static_cast<size_t>(n) * 4);
  return a;
}

}  // namespace hs::npy
