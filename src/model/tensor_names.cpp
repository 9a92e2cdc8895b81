#include "model/tensor_names.h"

#include <cctype>

#include "util/error.h"

namespace hs {

namespace {

// A config whose two layers together hold every kind of tensor: both are CSA (compressor +
// indexer), layer 0 hash-routed (tid2eid), layer 1 score-routed (router bias). Only names
// are used, so the widths are placeholders.
ModelConfig probe_config() {
  ModelConfig c;
  c.vocab_size = c.dim = 1;
  c.n_layers = 2;
  c.n_heads = c.head_dim = c.q_lora_rank = c.o_groups = c.o_lora_rank = 1;
  c.compress_ratios = {4, 4};
  c.index_n_heads = c.index_head_dim = 1;
  c.n_experts = c.n_active_experts = c.moe_inter = 1;
  c.n_hash_layers = 1;
  return c;
}

// "layers.12.attn.wq_a.weight" with prefix "layers." -> (12, "attn.wq_a.weight").
bool split_layer(const std::string& name, const std::string& prefix, int64_t& layer, std::string& rest) {
  if (name.rfind(prefix, 0) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
  if (j == i || j - i > 6 || j >= name.size() || name[j] != '.') return false;
  layer = std::stoll(name.substr(i, j - i));
  rest = name.substr(j + 1);
  return true;
}

std::string strip_layer(const std::string& name, const std::string& prefix) {
  int64_t layer = 0;
  std::string rest;
  return split_layer(name, prefix, layer, rest) ? rest : name;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::string gguf_tensor_name(const TensorSpec& spec) {
  return spec.name + (ends_with(spec.name, "exp_probs_b") ? ".bias" : ".weight");
}

TensorNameMap::TensorNameMap() {
  const ModelConfig c = probe_config();
  for (const auto& s : global_tensor_specs(c)) global_.push_back({s.official, gguf_tensor_name(s), s.role});
  for (int l = 0; l < c.n_layers; ++l)
    for (const auto& s : layer_tensor_specs(c, l)) {
      Entry e{strip_layer(s.official, "layers."), strip_layer(gguf_tensor_name(s), "blk."), s.role};
      if (!by_gguf(e.gguf, true)) layer_.push_back(std::move(e));
    }
}

const TensorNameMap::Entry* TensorNameMap::by_official(const std::string& local, bool layer) const {
  for (const auto& e : layer ? layer_ : global_)
    if (e.official == local) return &e;
  return nullptr;
}

const TensorNameMap::Entry* TensorNameMap::by_gguf(const std::string& local, bool layer) const {
  for (const auto& e : layer ? layer_ : global_)
    if (e.gguf == local) return &e;
  return nullptr;
}

std::optional<GgufRef> TensorNameMap::official_to_gguf(const std::string& official) const {
  int64_t layer = -1;
  std::string local = official;
  const bool in_layer = split_layer(official, "layers.", layer, local);
  const std::string blk = in_layer ? cat("blk.", layer, ".") : "";
  // ffn.experts.E.wK.{weight,scale}: one expert's slice of the stacked tensor.
  int64_t expert = -1;
  std::string after;
  if (in_layer && split_layer(local, "ffn.experts.", expert, after)) {
    for (const char* part : {".weight", ".scale"}) {
      if (!ends_with(after, part)) continue;
      const std::string w = after.substr(0, after.size() - std::string(part).size());
      const Entry* e = by_official("ffn.experts.{e}." + w, true);
      if (e && e->role == TensorRole::Experts) return GgufRef{blk + e->gguf, expert, part[1] == 's'};
    }
    return std::nullopt;
  }
  if (const Entry* e = by_official(local, in_layer); e && e->role != TensorRole::Experts)
    return GgufRef{blk + e->gguf, -1, false};
  // X.scale: the FP8 block scales of the matrix X.weight.
  if (ends_with(local, ".scale")) {
    const Entry* e = by_official(local.substr(0, local.size() - 5) + "weight", in_layer);
    if (e && e->role == TensorRole::Matrix) return GgufRef{blk + e->gguf, -1, true};
  }
  return std::nullopt;  // mtp.*, or not a DeepSeek-V4 tensor
}

std::string TensorNameMap::gguf_to_official(const GgufRef& ref) const {
  int64_t layer = -1;
  std::string local = ref.gguf;
  const bool in_layer = split_layer(ref.gguf, "blk.", layer, local);
  const Entry* e = by_gguf(local, in_layer);
  HS_CHECK(e, "tensor ", ref.gguf, ": not a DeepSeek-V4 GGUF tensor name");
  const std::string prefix = in_layer ? cat("layers.", layer, ".") : "";
  if (e->role == TensorRole::Experts) {
    HS_CHECK(ref.expert >= 0, "tensor ", ref.gguf, ": stacked experts map to one official tensor per expert; "
             "no expert index given");
    std::string n = e->official;
    n.replace(n.find("{e}"), 3, std::to_string(ref.expert));
    return prefix + n + (ref.scale ? ".scale" : ".weight");
  }
  HS_CHECK(ref.expert < 0, "tensor ", ref.gguf, ": not a stack of experts (expert ", ref.expert, " given)");
  if (!ref.scale) return prefix + e->official;
  HS_CHECK(e->role == TensorRole::Matrix && ends_with(e->official, ".weight"), "tensor ", ref.gguf,
           ": has no .scale sibling in the official checkpoint");
  return prefix + e->official.substr(0, e->official.size() - 6) + "scale";
}

std::optional<GgufRef> official_to_gguf(const std::string& official) {
  return TensorNameMap().official_to_gguf(official);
}

std::string gguf_to_official(const GgufRef& ref) { return TensorNameMap().gguf_to_official(ref); }

}  // namespace hs
