#include "model/tensors.h"

#include <sstream>

namespace hs {

int64_t TensorSpec::n_elements() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::vector<TensorSpec> global_tensor_specs(const ModelConfig& c) {
  const int64_t V = c.vocab_size, D = c.dim, H = c.hc_mult;
  return {
      {"token_embd", {V, D}, TensorRole::Matrix, "model.embed_tokens.weight", 0, "embed.weight"},
      {"output_hc_fn", {H, H * D}, TensorRole::HcFn, "model.hc_head.hc_fn", 0, "hc_head_fn"},
      {"output_hc_base", {H}, TensorRole::Vector, "model.hc_head.hc_base", 0, "hc_head_base"},
      {"output_hc_scale", {1}, TensorRole::Vector, "model.hc_head.hc_scale", 0, "hc_head_scale"},
      {"output_norm", {D}, TensorRole::Vector, "model.norm.weight", 0, "norm.weight"},
      {"output", {V, D}, TensorRole::Matrix, "lm_head.weight", 0, "head.weight"},
  };
}

std::vector<TensorSpec> layer_tensor_specs(const ModelConfig& c, int l) {
  const int64_t D = c.dim, HD = c.head_dim, H = c.n_heads, QL = c.q_lora_rank;
  const int64_t G = c.o_groups, R = c.o_lora_rank, E = c.n_experts, I = c.moe_inter, HC = c.hc_mult;
  const int64_t MIX = c.hc_mix();
  const std::string g = "blk." + std::to_string(l) + ".";
  const std::string h = "model.layers." + std::to_string(l) + ".";
  const std::string o = "layers." + std::to_string(l) + ".";
  using R_ = TensorRole;
  std::vector<TensorSpec> s = {
      {g + "hc_attn_fn", {MIX, HC * D}, R_::HcFn, h + "attn_hc.fn", 0, o + "hc_attn_fn"},
      {g + "hc_attn_base", {MIX}, R_::Vector, h + "attn_hc.base", 0, o + "hc_attn_base"},
      {g + "hc_attn_scale", {3}, R_::Vector, h + "attn_hc.scale", 0, o + "hc_attn_scale"},
      {g + "attn_norm", {D}, R_::Vector, h + "input_layernorm.weight", 0, o + "attn_norm.weight"},
      {g + "attn_q_a", {QL, D}, R_::Matrix, h + "self_attn.q_a_proj.weight", 0, o + "attn.wq_a.weight"},
      {g + "attn_q_a_norm", {QL}, R_::Vector, h + "self_attn.q_a_norm.weight", 0, o + "attn.q_norm.weight"},
      {g + "attn_q_b", {H * HD, QL}, R_::Matrix, h + "self_attn.q_b_proj.weight", 0, o + "attn.wq_b.weight"},
      {g + "attn_kv", {HD, D}, R_::Matrix, h + "self_attn.kv_proj.weight", 0, o + "attn.wkv.weight"},
      {g + "attn_kv_a_norm", {HD}, R_::Vector, h + "self_attn.kv_norm.weight", 0, o + "attn.kv_norm.weight"},
      {g + "attn_output_a", {G * R, H * HD / G}, R_::Matrix, h + "self_attn.o_a_proj.weight", 0,
       o + "attn.wo_a.weight"},
      {g + "attn_output_b", {D, G * R}, R_::Matrix, h + "self_attn.o_b_proj.weight", 0, o + "attn.wo_b.weight"},
      {g + "attn_sinks", {H}, R_::Vector, h + "self_attn.sinks", 0, o + "attn.attn_sink"},
  };
  const int ratio = c.ratio(l);
  if (ratio > 0) {
    const int64_t CO = c.compress_coff(l);
    const std::string hc = h + "self_attn.compressor.", oc = o + "attn.compressor.";
    s.push_back({g + "attn_compressor_kv", {CO * HD, D}, R_::Matrix, hc + "kv_proj.weight", 0, oc + "wkv.weight"});
    s.push_back({g + "attn_compressor_gate", {CO * HD, D}, R_::Matrix, hc + "gate_proj.weight", 0,
                 oc + "wgate.weight"});
    s.push_back({g + "attn_compressor_ape", {ratio, CO * HD}, R_::Vector, hc + "position_bias", 0, oc + "ape"});
    s.push_back({g + "attn_compressor_norm", {HD}, R_::Vector, hc + "kv_norm.weight", 0, oc + "norm.weight"});
    if (ratio == c.csa_ratio) {
      const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
      const std::string hi = hc + "indexer.", oi = o + "attn.indexer.";
      s.push_back({g + "indexer.attn_q_b", {IH * ID, QL}, R_::Matrix, hi + "q_b_proj.weight", 0, oi + "wq_b.weight"});
      s.push_back({g + "indexer.proj", {IH, D}, R_::Matrix, hi + "scorer.weights_proj.weight", 0,
                   oi + "weights_proj.weight"});
      s.push_back({g + "indexer_compressor_kv", {2 * ID, D}, R_::Matrix, hi + "kv_proj.weight", 0,
                   oi + "compressor.wkv.weight"});
      s.push_back({g + "indexer_compressor_gate", {2 * ID, D}, R_::Matrix, hi + "gate_proj.weight", 0,
                   oi + "compressor.wgate.weight"});
      s.push_back({g + "indexer_compressor_ape", {ratio, 2 * ID}, R_::Vector, hi + "position_bias", 0,
                   oi + "compressor.ape"});
      s.push_back({g + "indexer_compressor_norm", {ID}, R_::Vector, hi + "kv_norm.weight", 0,
                   oi + "compressor.norm.weight"});
    }
  }
  std::vector<TensorSpec> ffn = {
      {g + "hc_ffn_fn", {MIX, HC * D}, R_::HcFn, h + "ffn_hc.fn", 0, o + "hc_ffn_fn"},
      {g + "hc_ffn_base", {MIX}, R_::Vector, h + "ffn_hc.base", 0, o + "hc_ffn_base"},
      {g + "hc_ffn_scale", {3}, R_::Vector, h + "ffn_hc.scale", 0, o + "hc_ffn_scale"},
      {g + "ffn_norm", {D}, R_::Vector, h + "post_attention_layernorm.weight", 0, o + "ffn_norm.weight"},
      {g + "ffn_gate_inp", {E, D}, R_::Matrix, h + "mlp.gate.weight", 0, o + "ffn.gate.weight"},
  };
  s.insert(s.end(), ffn.begin(), ffn.end());
  if (c.is_hash_layer(l))
    s.push_back({g + "ffn_gate_tid2eid", {c.vocab_size, c.n_active_experts}, R_::TokenTable, h + "mlp.gate.tid2eid",
                 0, o + "ffn.gate.tid2eid"});
  else
    s.push_back({g + "exp_probs_b", {E}, R_::Vector, h + "mlp.gate.e_score_correction_bias", 0, o + "ffn.gate.bias"});
  const std::string ex = o + "ffn.experts.{e}.";
  s.push_back({g + "ffn_gate_exps", {E, I, D}, R_::Experts, h + "mlp.experts.gate_up_proj", 0, ex + "w1"});
  s.push_back({g + "ffn_up_exps", {E, I, D}, R_::Experts, h + "mlp.experts.gate_up_proj", static_cast<int>(I),
               ex + "w3"});
  s.push_back({g + "ffn_down_exps", {E, D, I}, R_::Experts, h + "mlp.experts.down_proj", 0, ex + "w2"});
  const std::string hs_ = h + "mlp.shared_experts.", os_ = o + "ffn.shared_experts.";
  s.push_back({g + "ffn_gate_shexp", {I, D}, R_::Matrix, hs_ + "gate_proj.weight", 0, os_ + "w1.weight"});
  s.push_back({g + "ffn_up_shexp", {I, D}, R_::Matrix, hs_ + "up_proj.weight", 0, os_ + "w3.weight"});
  s.push_back({g + "ffn_down_shexp", {D, I}, R_::Matrix, hs_ + "down_proj.weight", 0, os_ + "w2.weight"});
  return s;
}

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c, int begin, int end, bool with_embed,
                                           bool with_head) {
  std::vector<TensorSpec> out;
  for (auto& t : global_tensor_specs(c)) {
    bool embed = t.name == "token_embd";
    if ((embed && with_embed) || (!embed && with_head)) out.push_back(t);
  }
  for (int l = begin; l < end; ++l)
    for (auto& t : layer_tensor_specs(c, l)) out.push_back(t);
  return out;
}

std::string mtp_block_name(const std::string& block_name, int n_layers) {
  const std::string blk = "blk." + std::to_string(n_layers) + ".";
  return block_name.rfind(blk, 0) == 0 ? "mtp." + block_name.substr(blk.size()) : block_name;
}

std::vector<TensorSpec> mtp_tensor_specs(const ModelConfig& c, bool fused_eh) {
  const int64_t D = c.dim, H = c.hc_mult;
  using R_ = TensorRole;
  std::vector<TensorSpec> s;
  if (fused_eh) {
    s.push_back({"mtp.eh_proj", {D, 2 * D}, R_::Matrix, "", 0, ""});
  } else {
    s.push_back({"mtp.e_proj", {D, D}, R_::Matrix, "", 0, "mtp.0.e_proj.weight"});
    s.push_back({"mtp.h_proj", {D, D}, R_::Matrix, "", 0, "mtp.0.h_proj.weight"});
  }
  s.push_back({"mtp.enorm", {D}, R_::Vector, "", 0, "mtp.0.enorm.weight"});
  s.push_back({"mtp.hnorm", {D}, R_::Vector, "", 0, "mtp.0.hnorm.weight"});
  s.push_back({"mtp.norm", {D}, R_::Vector, "", 0, "mtp.0.norm.weight"});
  s.push_back({"mtp.hc_head_fn", {H, H * D}, R_::HcFn, "", 0, "mtp.0.hc_head_fn"});
  s.push_back({"mtp.hc_head_base", {H}, R_::Vector, "", 0, "mtp.0.hc_head_base"});
  s.push_back({"mtp.hc_head_scale", {1}, R_::Vector, "", 0, "mtp.0.hc_head_scale"});
  const ModelConfig m = c.with_mtp_layer();
  const std::string o = "layers." + std::to_string(c.n_layers) + ".";
  for (TensorSpec t : layer_tensor_specs(m, c.n_layers)) {
    t.name = mtp_block_name(t.name, c.n_layers);
    t.hf.clear();
    if (t.official.rfind(o, 0) == 0) t.official = "mtp.0." + t.official.substr(o.size());
    s.push_back(std::move(t));
  }
  return s;
}

std::vector<std::string> mtp_gguf_names(const std::string& canonical, int n_layers) {
  if (canonical.rfind("mtp.", 0) != 0) return {canonical};
  const std::string x = canonical.substr(4), blk = "blk." + std::to_string(n_layers) + ".";
  std::vector<std::string> out = {"mtp.0." + x, blk + x};
  if (x == "norm") out.push_back(blk + "nextn.shared_head_norm");
  else out.push_back(blk + "nextn." + x);
  return out;
}

}  // namespace hs
