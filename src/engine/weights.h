// Weights of a contiguous layer range (a shard), loaded from any ModelSource through the
// canonical tensor inventory. The CPU backend computes on f32 copies (WeightForm::F32);
// a device backend takes the matrices in their stored form (WeightForm::Native: the GGUF
// blocks, the official FP8/FP4 bytes, or a synthetic fill made on the device), uploads each
// one as it is loaded and drops the host bytes, so a shard never holds its weights twice.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/source.h"

namespace hs {

struct Mat {  // row-major [rows, cols]; expert stacks are [E * rows_per_expert, cols]
  int64_t rows = 0, cols = 0;
  std::vector<float> w;   // f32 values (WeightForm::F32, or a Native source without native bytes)
  NativeTensor native;    // stored bytes (WeightForm::Native) until the backend adopts them
  // The backend's copy (e.g. the CUDA backend's device weight), made by Ops::adopt_weight.
  mutable std::shared_ptr<void> device;
  const float* row(int64_t r) const { return w.data() + r * cols; }
};

enum class WeightForm { F32, Native };

struct HcWeights {
  std::vector<float> fn, base, scale;
};

struct CompressorWeights {
  Mat wkv, wgate;              // [coff*d, D]
  std::vector<float> ape;      // [ratio, coff*d]
  std::vector<float> norm;     // [d]
  int ratio = 0, coff = 1;
  int64_t d = 0;
};

struct LayerWeights {
  int layer = 0;
  HcWeights hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;
  Mat wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, sinks;
  bool has_compressor = false, has_indexer = false;
  CompressorWeights comp, idx_comp;
  Mat idx_wq_b, idx_proj;
  Mat gate;                     // [E, D]
  std::vector<float> gate_bias; // [E] (score layers)
  std::vector<int32_t> tid2eid; // [V, k] (hash layers)
  Mat w1, w3, w2;               // routed experts, stacked: [E * I, D], [E * I, D], [E * D, I]
  Mat sh_w1, sh_w3, sh_w2;      // shared expert
};

struct ShardWeights {
  int begin = 0, end = 0;       // layer range [begin, end)
  bool has_embed = false, has_head = false;
  Mat embed, head;              // [V, D]
  std::vector<float> norm;      // final RMSNorm [D]
  HcWeights hc_head;            // fn [hc, hc*D], base [hc], scale [1]
  std::vector<LayerWeights> layers;
};

// The MTP block (ds4-model-spec.md §7): the block is layer n_layers of the config's
// with_mtp_layer(); the embedding and output head are the main model's.
struct MtpWeights {
  Mat e_proj, h_proj;               // [D, D] each (a fused eh_proj is split at load)
  std::vector<float> enorm, hnorm;  // [D]
  std::vector<float> norm;          // the MTP's own final RMSNorm [D]
  HcWeights hc_head;
  LayerWeights block;
};

// The DSpark drafter (docs/speculative.md): stage s is layer n_layers + s of
// config.with_dspark_layers(stages); the embedding and output head are the main model's.
struct DsparkWeights {
  Mat main_proj;                      // [D, T * D]
  std::vector<float> main_norm;       // [D]
  std::vector<LayerWeights> stages;
  std::vector<float> norm;            // the last stage's final RMSNorm [D]
  HcWeights hc_head;
  Mat markov_w1;                      // [V, R], a table (Ops::embed rows)
  Mat markov_w2;                      // [V, R]: R -> V
  Mat confidence;                     // [1, D + R]
  float confidence_bias = 0.0f;       // 0 where the checkpoint has none (V4)
};

// Loads and validates (every tensor present with the right shape and an allowed type)
// the weights of layers [begin, end) plus the embedding and/or output head. `adopt`, when
// given, is called on every matrix right after it is read (the backend uploads it).
using AdoptWeight = std::function<void(Mat&)>;
ShardWeights load_shard_weights(const ModelSource& src, int begin, int end, bool with_embed, bool with_head,
                                WeightForm form = WeightForm::F32, const AdoptWeight& adopt = {});

// The MTP block of src, validated like the main model's layers (a missing or mis-shaped
// tensor is an error naming it; none at all says the model has no MTP block).
MtpWeights load_mtp_weights(const ModelSource& src, WeightForm form = WeightForm::F32, const AdoptWeight& adopt = {});
// The DSpark drafter of src, validated (validate_dspark: its config against the model, then
// every tensor; an error names each problem).
DsparkWeights load_dspark_weights(const ModelSource& src, WeightForm form = WeightForm::F32,
                                  const AdoptWeight& adopt = {});

}  // namespace hs
