// ModelConfig: every hyper-parameter of a DeepSeek-V4 model, filled from an HF config.json
// (current keys and the legacy official ones) or from GGUF deepseek4.* metadata.
// Field names follow ../shared/docs/ds4-model-spec.md §1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hs {
namespace gguf {
class File;
}

enum class AttnKind { SWA, CSA, HCA };  // ratio 0, the CSA ratio (4, with indexer), other ratios
const char* attn_kind_name(AttnKind k);

struct YarnParams {
  float factor = 16.0f;
  int64_t original_ctx = 65536;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

// The DSpark drafter's hyper-parameters (docs/speculative.md "Config"); block == 0: none.
struct DsparkConfig {
  int stages = 0;                  // V4 blocks (0: not said; the source counts its stages)
  int block = 0;                   // dspark_block_size: drafts per block
  int noise_token = -1;            // dspark_noise_token_id: the block's filler token
  int markov_rank = 0;             // dspark_markov_rank
  std::vector<int> target_layers;  // dspark_target_layer_ids: the taps, ascending
  bool any() const { return block > 0; }
};

struct ModelConfig {
  std::string source;            // "hf-config", "gguf" — for messages
  int64_t vocab_size = 0;
  int64_t dim = 0;               // hidden_size
  int n_layers = 0;
  int n_heads = 0;
  int head_dim = 0;              // q, k and v
  int rope_dim = 0;              // the trailing channels of each head that get RoPE
  int q_lora_rank = 0;
  int o_groups = 0;
  int o_lora_rank = 0;
  int window = 0;                // sliding_window
  std::vector<int> compress_ratios;  // one per main layer (n_layers entries; MTP entry dropped)
  int csa_ratio = 4;             // the ratio that has a lightning indexer
  int index_n_heads = 0;
  int index_head_dim = 0;
  int index_topk = 0;
  int n_experts = 0;
  int n_active_experts = 0;      // num_experts_per_tok
  int n_shared_experts = 1;
  int moe_inter = 0;
  int n_hash_layers = 0;         // layers [0, n_hash_layers) route by tid2eid
  float route_scale = 1.0f;
  float swiglu_limit = 10.0f;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  float hc_eps = 1e-6f;
  float norm_eps = 1e-6f;
  float rope_theta = 10000.0f;            // ratio-0 layers, no YaRN
  float compress_rope_theta = 160000.0f;  // ratio>0 layers, with YaRN
  YarnParams yarn;
  int64_t max_position = 0;
  int bos_token_id = 0;
  int eos_token_id = 1;
  int n_mtp_layers = 0;
  int mtp_ratio = 0;             // the MTP block's compress ratio (the schedule's extra entry; 0 = SWA)
  DsparkConfig dspark;

  int ratio(int layer) const { return compress_ratios.at(static_cast<size_t>(layer)); }
  AttnKind kind(int layer) const;
  bool is_hash_layer(int layer) const { return layer < n_hash_layers; }
  int64_t hc_dim() const { return dim * hc_mult; }
  int hc_mix() const { return (2 + hc_mult) * hc_mult; }
  // Compressor width multiplier: 2 for the overlapping CSA windows, 1 otherwise.
  int compress_coff(int layer) const { return ratio(layer) == csa_ratio ? 2 : 1; }

  // The config of the MTP block as one more layer (index n_layers) after the main stack: the
  // drafter runs it through the same Shard code (engine/mtp.h).
  ModelConfig with_mtp_layer() const;
  // The config with the DSpark stages as layers n_layers .. n_layers + stages - 1 (ratio 0,
  // score-routed), so their tensors are named and shaped like any layer's (engine/dspark.h).
  ModelConfig with_dspark_layers(int stages) const;
  // Throws naming the field when dspark does not fit this model (target layers outside
  // [0, n_layers) or not ascending, noise token outside the vocabulary, block outside 1..16,
  // rank < 1, stages outside 1..16). `what` prefixes the message.
  void validate_dspark(int stages, const std::string& what) const;

  // Throws hs::Error naming the field and value when the config is inconsistent: sizes out of
  // range, token ids outside the vocabulary, non-finite scales, or tensor shapes whose
  // products overflow (check_shapes).
  void validate() const;
  void check_shapes() const;
  std::string summary() const;  // multi-line, for `inspect`
  std::string layer_schedule() const;
};

// Parses config.json text (path is used in messages).
ModelConfig config_from_hf_json(const std::string& json_text, const std::string& path);
ModelConfig config_from_hf_dir(const std::string& dir);
ModelConfig config_from_gguf(const gguf::File& f);
// The DSpark keys under prefix p ("deepseek4.") into d (keys absent: d unchanged).
void read_dspark_keys(const gguf::File& f, const std::string& p, DsparkConfig& d);

}  // namespace hs
