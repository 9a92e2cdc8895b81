// The DSpark drafter's tensor inventory (docs/speculative.md "Tensors"): one table for every
// form it ships in. Canonical names are "dspark.*": the fusion projection (main_proj,
// main_norm), the stages' V4 blocks "dspark.<s>.<layer-local GGUF name>" (stage s is layer
// n_layers + s of config.with_dspark_layers(S)), and the last stage's head (norm, hc_head,
// Markov head, confidence head). Official names are the 0731 checkpoint's "mtp.<s>.*"; the GGUF
// names are listed by dspark_gguf_names. The embedding and output head are the target's.
#pragma once
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensors.h"

namespace hs {

// The whole drafter for S stages (c.dspark gives the rank and the taps). with_bias: the
// confidence head has a bias (DeepSpec's drafts; the V4 checkpoint has none).
std::vector<TensorSpec> dspark_tensor_specs(const ModelConfig& c, int stages, bool with_bias = false);
// Where a GGUF file keeps a DSpark tensor (names without .weight/.bias): ds4's "mtp.<s>.<x>",
// or with lucebox (a file with dflash.fc: Lucebox's deepseek4-dflash-draft, a drafter-only
// file) its names ("dflash.*", "blk.<s>.<x>", "output_norm" ...). Never both: in a main
// model's file "blk.0.*" are the model's own layers.
std::vector<std::string> dspark_gguf_names(const std::string& canonical, int stages, bool lucebox);
// The canonical name of stage s's block tensor named `layer_local` ("attn_q_a").
std::string dspark_block_name(int stage, const std::string& layer_local);

}  // namespace hs
