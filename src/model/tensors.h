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

// The MTP block (ds4-model-spec.md §7) under canonical names "mtp.*": e_proj and h_proj (or,
// fused_eh, llama.cpp's eh_proj [D, 2D] whose first D columns act on the embedding), enorm,
// hnorm, norm, its own hc_head, and one ordinary block ("mtp.attn_q_a", ...) that is layer
// n_layers of c.with_mtp_layer(). Official names are "mtp.0.*" (the main model's names with
// "layers.N." replaced); the embedding and the output head are the main model's.
std::vector<TensorSpec> mtp_tensor_specs(const ModelConfig& c, bool fused_eh = false);
// "mtp.attn_q_a" for "blk.<n_layers>.attn_q_a": the MTP name of a block tensor of the MTP layer.
std::string mtp_block_name(const std::string& block_name, int n_layers);
// Where GGUF files keep an MTP tensor (names without .weight/.bias), most common first:
// antirez's "mtp.0.<x>", llama.cpp's converter "blk.<n_layers>.<x>" and "blk.<n_layers>.nextn.<x>"
// (enorm, hnorm, eh_proj; norm as nextn.shared_head_norm).
std::vector<std::string> mtp_gguf_names(const std::string& canonical, int n_layers);

std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace hs
