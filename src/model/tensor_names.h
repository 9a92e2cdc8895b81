// Name maps between DeepSeek's official checkpoint tensors (ds4-model-spec.md §1.3) and
// GGUF tensors (gguf-ds4.md §2). Derived from the inventory of model/tensors.h, so the maps
// cannot drift from what the loaders use. Official names that have no tensor of their own
// in a GGUF are still mapped: per-expert `ffn.experts.E.wK.{weight,scale}` to a slice of the
// stacked `blk.N.ffn_*_exps.weight`, and FP8/FP4 `.scale` siblings to the tensor whose values
// they scale (converters fold them in). The MTP block (`mtp.*`) is not part of the main model.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tensors.h"

namespace hs {

// "blk.3.attn_norm.weight", "blk.3.exp_probs_b.bias": the GGUF name of an inventory entry.
std::string gguf_tensor_name(const TensorSpec& spec);

struct GgufRef {
  std::string gguf;     // GGUF tensor name, with its .weight/.bias suffix
  int64_t expert = -1;  // per-expert official tensor: its index in the stacked GGUF tensor
  bool scale = false;   // a .scale sibling, folded into the GGUF tensor's values
  bool operator==(const GgufRef&) const = default;
};

// Layer-independent name table, built once; the free functions below build one per call.
class TensorNameMap {
 public:
  TensorNameMap();
  // nullopt for MTP tensors (mtp.*) and names that are not official DS4 tensors.
  std::optional<GgufRef> official_to_gguf(const std::string& official) const;
  // The official name; throws hs::Error naming a GGUF name (or expert/scale use) it cannot map.
  std::string gguf_to_official(const GgufRef& ref) const;

 private:
  struct Entry {
    std::string official;  // layer-local ("attn.wq_a.weight") or global; experts: "ffn.experts.{e}.w1"
    std::string gguf;      // layer-local ("attn_q_a.weight") or global
    TensorRole role;
  };
  const Entry* by_official(const std::string& local, bool layer) const;
  const Entry* by_gguf(const std::string& local, bool layer) const;
  std::vector<Entry> global_, layer_;
};

std::optional<GgufRef> official_to_gguf(const std::string& official);
std::string gguf_to_official(const GgufRef& ref);

}  // namespace hs
