#include "model/source.h"

#include <algorithm>

#include "model/dspark_tensors.h"
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

std::vector<TensorSpec> ModelSource::mtp_specs() const {
  for (bool fused : {false, true}) {
    std::vector<TensorSpec> specs = mtp_tensor_specs(config_, fused);
    if (!storage_type(specs.front()).empty()) return specs;  // e_proj, or eh_proj
  }
  // A DSpark drafter also keeps V4 blocks under mtp.<s>.*: that is not a partial MTP block.
  if (has_dspark()) return {};
  std::vector<TensorSpec> specs = mtp_tensor_specs(config_, false);
  for (const TensorSpec& s : specs)
    if (!storage_type(s).empty()) return specs;
  return {};
}

std::vector<std::string> ModelSource::validate_mtp() const {
  const std::vector<TensorSpec> specs = mtp_specs();
  if (specs.empty())
    return {cat(path_, ": no MTP block (none of mtp.0.*, blk.", config_.n_layers, ".nextn.* or official mtp.0.* "
                "tensors): this model cannot draft with --draft mtp")};
  std::vector<std::string> problems;
  for (const auto& spec : specs) {
    try {
      check(spec);
    } catch (const Error& e) {
      problems.push_back(cat(e.what(), " (MTP block)"));
    }
  }
  return problems;
}

std::vector<TensorSpec> ModelSource::dspark_specs() const {
  if (!config_.dspark.any() || config_.dspark.stages < 1 || config_.dspark.markov_rank < 1 ||
      config_.dspark.target_layers.empty())
    return {};
  for (bool bias : {true, false}) {
    std::vector<TensorSpec> specs = dspark_tensor_specs(config_, config_.dspark.stages, bias);
    if (bias && storage_type(specs.back()).empty()) continue;  // no confidence bias stored
    if (storage_type(specs.front()).empty()) return {};        // no main_proj: no DSpark drafter
    return specs;
  }
  return {};
}

std::vector<std::string> ModelSource::validate_dspark() const {
  if (!config_.dspark.any())
    return {cat(path_, ": no DSpark drafter (no dspark_block_size in its config): this model cannot draft with "
                "--draft dspark")};
  if (config_.dspark.stages == 0)
    return {cat(path_, ": no DSpark stage tensors (mtp.0.attn.wq_a / mtp.0.attn_q_a): this model cannot draft with "
                "--draft dspark")};
  try {
    config_.validate_dspark(config_.dspark.stages, cat(path_, ": DSpark drafter: "));
  } catch (const Error& e) {
    return {e.what()};
  }
  const std::vector<TensorSpec> specs = dspark_specs();
  if (specs.empty())
    return {cat(path_, ": no DSpark tensors (mtp.0.main_proj, or dflash.fc in a Lucebox drafter file): this model "
                "cannot draft with --draft dspark")};
  std::vector<std::string> problems;
  for (const auto& spec : specs) {
    try {
      check(spec);
    } catch (const Error& e) {
      problems.push_back(cat(e.what(), " (DSpark drafter)"));
    }
  }
  return problems;
}

namespace {
uint64_t fnv(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
uint64_t fnv(uint64_t h, const std::string& s) { return fnv(fnv(h, s.data(), s.size()), "\0", 1); }
}  // namespace

uint64_t ModelSource::fingerprint() const {
  uint64_t h = fnv(1469598103934665603ull, format());
  h = fnv(h, config_.summary());
  for (const StoredTensor& t : stored_tensors()) {
    h = fnv(fnv(h, t.name), t.type);
    h = fnv(h, t.shape.data(), t.shape.size() * sizeof(int64_t));
    h = fnv(h, &t.nbytes, sizeof(t.nbytes));
  }
  for (const TensorSpec& spec : model_tensor_specs(config_, 0, config_.n_layers, true, true)) {
    if (spec.role != TensorRole::Matrix && spec.role != TensorRole::Experts) continue;
    const NativeTensor nt = native(spec);
    if (!nt.data || nt.nbytes == 0) continue;
    constexpr uint64_t kSample = 4096, kPlaces = 16;
    for (uint64_t k = 0; k < kPlaces; ++k) {
      const uint64_t at = nt.nbytes > kSample ? (nt.nbytes - kSample) / (kPlaces - 1) * k : 0;
      h = fnv(h, nt.data + at, static_cast<size_t>(std::min(kSample, nt.nbytes - at)));
    }
  }
  return h;
}

}  // namespace hs
