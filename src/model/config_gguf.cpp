// ModelConfig from GGUF `deepseek4.*` metadata (../shared/docs/gguf-ds4.md §1).
#include <algorithm>
#include <cstdint>
#include <utility>

#include "format/gguf.h"
#include "model/config.h"
#include "util/error.h"

namespace hs {

void read_dspark_keys(const gguf::File& f, const std::string& p, DsparkConfig& d) {
  auto u32 = [&](const char* k, int dflt) {
    const std::string key = p + k;
    if (!f.has(key)) return dflt;
    const uint64_t v = f.get_u32(key);
    HS_CHECK(v <= static_cast<uint64_t>(INT32_MAX), f.path(), ": key ", key, " = ", v, ": out of range");
    return static_cast<int>(v);
  };
  d.stages = u32("dspark.stage_count", d.stages);
  d.block = u32("dspark.block_size", d.block);
  d.noise_token = u32("dspark.noise_token_id", d.noise_token);
  d.markov_rank = u32("dspark.markov_rank", d.markov_rank);
  if (f.has(p + "dspark.target_layer_ids")) {
    d.target_layers.clear();
    for (int64_t v : f.get_int_array(p + "dspark.target_layer_ids")) {
      HS_CHECK(v >= 0 && v <= INT32_MAX, f.path(), ": key ", p, "dspark.target_layer_ids: entry ", v, " out of range");
      d.target_layers.push_back(static_cast<int>(v));
    }
  }
}

ModelConfig config_from_gguf(const gguf::File& f) {
  const std::string arch = f.has("general.architecture") ? f.get_string("general.architecture") : "";
  HS_CHECK(arch == "deepseek4", f.path(), ": general.architecture is '", arch, "', expected 'deepseek4'");
  const std::string p = "deepseek4.";
  // Every integer key is range-checked before the cast to the config's int fields.
  auto as_int = [&](const std::string& key, uint64_t v) {
    HS_CHECK(v <= static_cast<uint64_t>(INT32_MAX), f.path(), ": key ", key, " = ", v, ": out of range (at most ",
             INT32_MAX, ")");
    return static_cast<int>(v);
  };
  auto as_i64 = [&](const std::string& key, uint64_t v) {
    HS_CHECK(v <= static_cast<uint64_t>(INT64_MAX), f.path(), ": key ", key, " = ", v, ": out of range (at most 2^63-1)");
    return static_cast<int64_t>(v);
  };
  auto u32 = [&](const char* k) { return as_int(p + k, f.get_u32(p + k)); };
  auto u32_or = [&](const char* k, int d) { return f.has(p + k) ? u32(k) : d; };
  auto f32 = [&](const char* k) { return f.get_f32(p + k); };
  auto f32_or = [&](const char* k, float d) { return f.has(p + k) ? f.get_f32(p + k) : d; };

  ModelConfig c;
  c.source = f.path();
  c.n_layers = u32("block_count");
  c.n_mtp_layers = u32_or("nextn_predict_layers", 0);
  // block_count counts MTP blocks only when the file holds them as the last blocks (LC's
  // layout: blk.{n}.nextn.eh_proj); MTP tensors elsewhere (blk.43.* past block_count,
  // antirez's mtp.0.*) are simply not part of the main model.
  // Unsloth's files count the block without always saying nextn_predict_layers: then it is one.
  const int counted = std::max(c.n_mtp_layers, 1);
  if (counted < c.n_layers && f.find_tensor(cat("blk.", c.n_layers - counted, ".nextn.eh_proj.weight"))) {
    c.n_layers -= counted;
    c.n_mtp_layers = counted;
  }
  bool main_blocks = false, mtp = false;
  for (const auto& t : f.tensors()) {
    main_blocks |= t.name.rfind("blk.0.", 0) == 0;
    mtp |= t.name.find(".nextn.") != std::string::npos || t.name.rfind("mtp.", 0) == 0;
  }
  HS_CHECK(main_blocks || !mtp, f.path(), ": an MTP-only GGUF (nextn/mtp tensors, no blk.0.*): it holds the "
           "speculative-decoding block of DeepSeek-V4, not a main model");
  c.dim = u32("embedding_length");
  c.max_position = as_i64(p + "context_length", f.get_u64(p + "context_length"));
  c.n_heads = u32("attention.head_count");
  int kv_heads = u32_or("attention.head_count_kv", 1);
  HS_CHECK(kv_heads == 1, f.path(), ": key ", p, "attention.head_count_kv: expected 1 (MQA), found ", kv_heads);
  c.head_dim = u32("attention.key_length");
  int vlen = u32("attention.value_length");
  HS_CHECK(vlen == c.head_dim, f.path(), ": key ", p, "attention.value_length: expected ", c.head_dim,
           " (= key_length), found ", vlen);
  c.rope_dim = u32("rope.dimension_count");
  c.rope_theta = f32("rope.freq_base");
  c.compress_rope_theta = f32("attention.compress_rope_freq_base");
  c.norm_eps = f32("attention.layer_norm_rms_epsilon");
  c.q_lora_rank = u32("attention.q_lora_rank");
  c.o_lora_rank = u32("attention.output_lora_rank");
  c.o_groups = u32("attention.output_group_count");
  c.window = u32("attention.sliding_window");
  if (f.has(p + "rope.scaling.type")) {
    std::string t = f.get_string(p + "rope.scaling.type");
    HS_CHECK(t == "yarn", f.path(), ": key ", p, "rope.scaling.type: expected 'yarn', found '", t, "'");
  }
  c.yarn.factor = f32_or("rope.scaling.factor", 16.0f);
  c.yarn.original_ctx = f.has(p + "rope.scaling.original_context_length")
                            ? as_i64(p + "rope.scaling.original_context_length",
                                     f.get_u64(p + "rope.scaling.original_context_length"))
                            : 65536;
  c.yarn.beta_fast = f32_or("rope.scaling.yarn_beta_fast", 32.0f);
  c.yarn.beta_slow = f32_or("rope.scaling.yarn_beta_slow", 1.0f);
  auto ratios = f.get_int_array(p + "attention.compress_ratios");
  HS_CHECK(ratios.size() >= static_cast<size_t>(c.n_layers), f.path(), ": key ", p,
           "attention.compress_ratios: expected at least block_count = ", c.n_layers, " entries, found ",
           ratios.size());
  auto ratio_at = [&](size_t l) {
    const int64_t r = ratios[l];
    HS_CHECK(r >= 0 && r <= INT32_MAX, f.path(), ": key ", p, "attention.compress_ratios: entry ", l, " = ", r,
             ": out of range [0, ", INT32_MAX, "]");
    return static_cast<int>(r);
  };
  for (int l = 0; l < c.n_layers; ++l) c.compress_ratios.push_back(ratio_at(static_cast<size_t>(l)));
  if (ratios.size() > static_cast<size_t>(c.n_layers)) c.mtp_ratio = ratio_at(static_cast<size_t>(c.n_layers));
  c.csa_ratio = 4;
  c.index_n_heads = u32_or("attention.indexer.head_count", 0);
  c.index_head_dim = u32_or("attention.indexer.key_length", 0);
  c.index_topk = u32_or("attention.indexer.top_k", 0);
  c.n_experts = u32("expert_count");
  c.n_active_experts = u32("expert_used_count");
  c.n_shared_experts = u32_or("expert_shared_count", 1);
  c.moe_inter = u32("expert_feed_forward_length");
  c.route_scale = f32("expert_weights_scale");
  if (f.has(p + "expert_weights_norm"))
    HS_CHECK(f.get_bool(p + "expert_weights_norm"), f.path(), ": key ", p,
             "expert_weights_norm: expected true, found false");
  int gating = u32("expert_gating_func");
  HS_CHECK(gating == 4, f.path(), ": key ", p, "expert_gating_func: expected 4 (sqrt-softplus), found ", gating);
  c.n_hash_layers = u32("hash_layer_count");
  if (f.has(p + "swiglu_clamp_exp")) {
    auto clamps = f.get_f32_array(p + "swiglu_clamp_exp");
    HS_CHECK(!clamps.empty(), f.path(), ": key ", p, "swiglu_clamp_exp is empty");
    for (float v : clamps)
      HS_CHECK(v == clamps[0], f.path(), ": key ", p, "swiglu_clamp_exp: per-layer clamps differ (", v, " vs ",
               clamps[0], "); only one value is supported");
    c.swiglu_limit = clamps[0];
  }
  c.hc_mult = u32("hyper_connection.count");
  c.hc_sinkhorn_iters = u32("hyper_connection.sinkhorn_iterations");
  c.hc_eps = f32("hyper_connection.epsilon");
  for (const char* k : {"expert_group_count", "expert_group_used_count"})
    HS_CHECK(u32_or(k, 0) == 0, f.path(), ": key ", p, k, ": expected 0 or absent (DeepSeek-V4 has no expert groups), found ",
             u32(k));
  if (f.has(p + "vocab_size")) {
    c.vocab_size = u32("vocab_size");
  } else if (f.has("tokenizer.ggml.tokens")) {
    c.vocab_size = static_cast<int64_t>(f.get_string_array("tokenizer.ggml.tokens").size());
  } else if (const auto* t = f.find_tensor("token_embd.weight")) {
    c.vocab_size = t->ne.size() > 1 ? t->ne[1] : 0;
  }
  for (auto [key, field] : {std::pair{"tokenizer.ggml.bos_token_id", &c.bos_token_id},
                            std::pair{"tokenizer.ggml.eos_token_id", &c.eos_token_id}}) {
    if (!f.has(key)) continue;
    const uint64_t id = f.get_u32(key);
    HS_CHECK(c.vocab_size <= 0 || static_cast<int64_t>(id) < c.vocab_size, f.path(), ": key ", key, " = ", id,
             ": not a token id (the vocabulary has ", c.vocab_size, " tokens)");
    *field = as_int(key, id);
  }
  c.validate();
  read_dspark_keys(f, p, c.dspark);
  return c;
}

}  // namespace hs
