#include "model/gguf_export.h"

#include <cstring>

#include "format/quants.h"
#include "util/error.h"

namespace hs {

void write_config_metadata(const ModelConfig& c, gguf::Writer& w) {
  const std::string p = "deepseek4.";
  auto u32 = [&](const std::string& k, int64_t v) { w.set_u32(p + k, static_cast<uint32_t>(v)); };
  auto f32 = [&](const std::string& k, float v) { w.set_f32(p + k, v); };
  w.set_string("general.architecture", "deepseek4");
  u32("block_count", c.n_layers);
  u32("context_length", c.max_position > 0 ? c.max_position : 1048576);
  u32("embedding_length", c.dim);
  u32("embedding_length_out", c.dim * c.hc_mult);
  u32("vocab_size", c.vocab_size);
  u32("attention.head_count", c.n_heads);
  u32("attention.head_count_kv", 1);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  u32("rope.dimension_count", c.rope_dim);
  f32("rope.freq_base", c.rope_theta);
  w.set_string(p + "rope.scaling.type", "yarn");
  f32("rope.scaling.factor", c.yarn.factor);
  u32("rope.scaling.original_context_length", c.yarn.original_ctx);
  f32("rope.scaling.yarn_beta_fast", c.yarn.beta_fast);
  f32("rope.scaling.yarn_beta_slow", c.yarn.beta_slow);
  f32("attention.compress_rope_freq_base", c.compress_rope_theta);
  f32("attention.layer_norm_rms_epsilon", c.norm_eps);
  u32("attention.q_lora_rank", c.q_lora_rank);
  u32("attention.output_lora_rank", c.o_lora_rank);
  u32("attention.output_group_count", c.o_groups);
  u32("attention.sliding_window", c.window);
  w.set_i32_array(p + "attention.compress_ratios", std::vector<int32_t>(c.compress_ratios.begin(), c.compress_ratios.end()));
  u32("attention.indexer.head_count", c.index_n_heads);
  u32("attention.indexer.key_length", c.index_head_dim);
  u32("attention.indexer.top_k", c.index_topk);
  u32("expert_count", c.n_experts);
  u32("expert_used_count", c.n_active_experts);
  u32("expert_shared_count", c.n_shared_experts);
  u32("expert_feed_forward_length", c.moe_inter);
  f32("expert_weights_scale", c.route_scale);
  w.set_bool(p + "expert_weights_norm", true);
  u32("expert_gating_func", 4);
  u32("hash_layer_count", c.n_hash_layers);
  w.set_f32_array(p + "swiglu_clamp_exp", std::vector<float>(static_cast<size_t>(c.n_layers), c.swiglu_limit));
  w.set_f32_array(p + "swiglu_clamp_shexp", std::vector<float>(static_cast<size_t>(c.n_layers), c.swiglu_limit));
  u32("hyper_connection.count", c.hc_mult);
  u32("hyper_connection.sinkhorn_iterations", c.hc_sinkhorn_iters);
  f32("hyper_connection.epsilon", c.hc_eps);
  u32("nextn_predict_layers", c.n_mtp_layers);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(c.bos_token_id));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(c.eos_token_id));
}

void export_gguf(const ModelSource& src, const std::string& out_path, const GgufExportOptions& opts) {
  const ModelConfig& c = src.config();
  gguf::Writer w;
  write_config_metadata(c, w);
  w.set_string("general.name", opts.name);
  const auto specs = model_tensor_specs(c, 0, c.n_layers, true, true);
  std::vector<std::vector<uint8_t>> buffers;  // the writer reads them at write()
  buffers.reserve(specs.size());
  size_t done = 0;
  for (const auto& s : specs) {
    std::vector<int64_t> ne(s.shape.rbegin(), s.shape.rend());
    const std::string name = s.name + (s.name.find("exp_probs_b") != std::string::npos ? ".bias" : ".weight");
    if (s.role == TensorRole::TokenTable) {
      std::vector<int32_t> v = src.read_i32(s);
      buffers.emplace_back(v.size() * 4);
      std::memcpy(buffers.back().data(), v.data(), v.size() * 4);
      w.add_tensor(name, GgmlType::I32, ne, buffers.back().data(), buffers.back().size());
    } else {
      GgmlType type = GgmlType::F32;
      if (s.role == TensorRole::Matrix) type = opts.dense;
      if (s.role == TensorRole::Experts) type = opts.experts;
      std::vector<float> v = src.read_f32(s);
      const int64_t row = ne[0], rows = s.n_elements() / row;
      HS_CHECK(row % ggml_type_info(type).block_elems == 0, "tensor ", s.name, ": rows of ", row, " elements cannot be stored as ",
               ggml_type_name(type), " (blocks of ", ggml_type_info(type).block_elems, ")");
      const int64_t rb = ggml_row_bytes(type, row);
      buffers.emplace_back(static_cast<size_t>(rb * rows));
      for (int64_t r = 0; r < rows; ++r) quantize_row(type, v.data() + r * row, buffers.back().data() + r * rb, row);
      w.add_tensor(name, type, ne, buffers.back().data(), buffers.back().size());
    }
    if (opts.progress) opts.progress(++done, specs.size());
  }
  w.write(out_path);
}

}  // namespace hs
