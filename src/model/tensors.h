// The tensor inventory of a DeepSeek-V4 model: for every tensor its canonical (GGUF) name,
// its shape, and its names in the HF-transformers and official DeepSeek checkpoints.
// One table serves loading, validation, `inspect` and the format converters.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace hs {

enum class TensorRole {
  Matrix,      // a linear weight [out, in]
  Vector,      // norms, biases, sinks, HC base/scale, compressor ape (small f32 data)
  HcFn,        // the hyper-connection mixing projection [mix, hc*D] (kept f32)
  TokenTable,  // tid2eid [vocab, top-k] integer table
  Experts,     // a stack of routed-expert matrices [E, out, in]
};

struct TensorSpec {
  std::string name;            // canonical = GGUF name without the .weight/.bias suffix
  std::vector<int64_t> shape;  // outermost first ([out, in] for matrices); GGUF ne is reversed
  TensorRole role = TensorRole::Matrix;
  std::string hf;              // HF transformers name; for Experts the fused 3-D parameter
  int hf_rows_begin = 0;       // Experts from gate_up_proj: row offset of this half
  std::string official;        // official name; for Experts a pattern with {e} for the expert id
  int64_t n_elements() const;
};

// Global tensors (embedding, output head, final norm, hc_head).
std::vector<TensorSpec> global_tensor_specs(const ModelConfig& c);
// Every tensor of one layer, in a fixed order.
std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& c, int layer);
// Everything for layers [begin, end) plus the globals that belong to the shard.
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c, int begin, int end, bool with_embed,
                                           bool with_head);

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace hs
