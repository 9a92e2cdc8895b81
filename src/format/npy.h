// NumPy .npy (format 1.0) writer and reader for little-endian f32 / i32 arrays.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hs::npy {

void write_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data);

struct ArrayF32 {
  std::vector<int64_t> shape;
  std::vector<float> data;
};
ArrayF32 read_f32(const std::string& path);  // '<f4', C order only

}  // namespace hs::npy
