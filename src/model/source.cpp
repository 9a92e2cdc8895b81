#include "model/source.h"

#include <algorithm>

#include "util/error.h"
#include "util/mmap.h"

namespace hs {

std::unique_ptr<ModelSource> ModelSource::open(const std::string& path) {
  HS_CHECK(file_exists(path), "model path ", path, " does not exist");
  if (is_directory(path)) return open_hf_source(path);
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") return open_gguf_source(path);
  MappedFile m(path);  // mapping is cheap; reading a 100 GB file to sniff 4 bytes is not
  std::string head(reinterpret_cast<const char*>(m.data()), std::min<size_t>(4, m.size()));
  HS_CHECK(head == "GGUF", path, ": not a GGUF file (magic '", head,
           "') and not a directory; MODEL is a .gguf file or an HF model directory");
  return open_gguf_source(path);
}

std::vector<float> ModelSource::read_expert_f32(const TensorSpec& spec, int64_t expert) const {
  HS_CHECK(spec.role == TensorRole::Experts && expert >= 0 && expert < spec.shape[0], "tensor ", spec.name,
           ": no expert ", expert, " (", shape_str(spec.shape), ")");
  const std::vector<float> all = read_f32(spec);
  const int64_t per = spec.shape[1] * spec.shape[2];
  return std::vector<float>(all.begin() + expert * per, all.begin() + (expert + 1) * per);
}

std::vector<std::string> ModelSource::validate(int begin, int end, bool with_embed, bool with_head) const {
  std::vector<std::string> problems;
  for (const auto& spec : model_tensor_specs(config_, begin, end, with_embed, with_head)) {
    try {
      check(spec);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

}  // namespace hs
