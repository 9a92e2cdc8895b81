// Test helper: GGUF copies with one tensor left out or cut (missing / mis-shaped tensor tests).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
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

// A copy of a GGUF with every tensor renamed by `rename` and general.architecture set to `arch`
// (another converter's layout of the same weights).
inline void copy_gguf_renamed(const std::string& from, const std::string& to,
                              const std::function<std::string(const std::string&)>& rename, const std::string& arch) {
  const gguf::File f(from);
  gguf::Writer w;
  for (const auto& k : f.keys())
    if (k != "general.architecture") w.set(k, *f.find(k));
  w.set_string("general.architecture", arch);
  for (const auto& t : f.tensors()) w.add_tensor(rename(t.name), t.type, t.ne, f.tensor_data(t), t.nbytes);
  w.write(to);
}

}  // namespace hs
