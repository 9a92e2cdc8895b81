// Test helper: an HF directory in the official checkpoint's naming (F32 safetensors): the tiny
// fixture's config.json with one key replaced, a drafter's tensors and the shared embedding and
// head of `mem` (the drafter load tests: MTP and DSpark).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "model/source.h"
#include "model/tensor_names.h"
#include "util/error.h"

namespace hs {

inline void write_official_dir(const ModelSource& mem, std::vector<TensorSpec> specs, const std::string& dir,
                               const std::string& config_key, const std::string& config_value) {
  std::filesystem::create_directories(dir);
  std::string cfg;
  {
    std::ifstream f(std::string(HS_TEST_DATA) + "/tiny/config.json");
    cfg.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t at = cfg.find(config_key);
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, config_key.size(), config_value);
  std::ofstream(dir + "/config.json") << cfg;
  // model.safetensors: 8-byte header size, JSON header, F32 data.
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  std::vector<std::vector<int64_t>> shapes;
  for (const TensorSpec& t : model_tensor_specs(mem.config(), 0, 1, true, true))
    if (t.name == "token_embd" || t.name == "output") specs.push_back(t);
  for (const TensorSpec& t : specs) {
    if (t.role == TensorRole::Experts) {
      for (int64_t e = 0; e < t.shape[0]; ++e) {
        std::string n = t.official;
        n.replace(n.find("{e}"), 3, std::to_string(e));
        tensors.emplace_back(n + ".weight", mem.read_expert_f32(t, e));
        shapes.push_back({t.shape[1], t.shape[2]});
      }
    } else {
      tensors.emplace_back(t.official, mem.read_f32(t));
      shapes.push_back(t.shape);
    }
  }
  std::string header = "{";
  size_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::string shape;
    for (int64_t d : shapes[i]) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const size_t n = tensors[i].second.size() * 4;
    header += (i ? "," : "") + cat("\"", tensors[i].first, "\":{\"dtype\":\"F32\",\"shape\":[", shape,
                                   "],\"data_offsets\":[", off, ",", off + n, "]}");
    off += n;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::ofstream f(dir + "/model.safetensors", std::ios::binary);
  const uint64_t hn = header.size();
  f.write(reinterpret_cast<const char*>(&hn), 8);
  f << header;
  for (const auto& t : tensors)
    f.write(reinterpret_cast<const char*>(t.second.data()), static_cast<std::streamsize>(t.second.size() * 4));
}

}  // namespace hs
