// Test helper: GGUF copies with one tensor left out or cut (missing / mis-shaped tensor tests).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "format/gguf.h"

namespace hs {

// A copy of a GGUF with tensor `drop` left out, or (with keep_cols > 0) its rows cut to that many
// elements (a mis-shaped tensor).
inline void copy_gguf(const std::string& from, const std::string& to, const std::string& drop, int64_t keep_cols = 0) {
  const gguf::File f(from);
  gguf::Writer w;
  for (const auto& k : f.keys()) w.set(k, *f.find(k));
  std::vector<std::vector<uint8_t>> cut;
  cut.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    if (t.name != drop) {
      w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.nbytes);
      continue;
    }
    if (keep_cols <= 0) continue;
    ASSERT_EQ(t.type, GgmlType::F32);
    std::vector<int64_t> ne = t.ne;
    ne[0] = keep_cols;
    const int64_t rows = t.n_elements() / t.ne[0];
    cut.emplace_back(static_cast<size_t>(rows * keep_cols * 4));
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(cut.back().data() + r * keep_cols * 4, f.tensor_data(t) + r * t.ne[0] * 4, static_cast<size_t>(keep_cols * 4));
    w.add_tensor(t.name, t.type, ne, cut.back().data(), cut.back().size());
  }
  w.write(to);
}

}  // namespace hs
