#include "model/config.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.h"
#include "util/mmap.h"

namespace hs {

const char* attn_kind_name(AttnKind k) {
  switch (k) {
    case AttnKind::SWA: return "SWA";
    case AttnKind::CSA: return "CSA";
    case AttnKind::HCA: return "HCA";
  }
  return "?";
}

AttnKind ModelConfig::kind(int layer) const {
  int r = ratio(layer);
  if (r == 0) return AttnKind::SWA;
  return r == csa_ratio ? AttnKind::CSA : AttnKind::HCA;
}

void ModelConfig::validate() const {
  auto need = [&](bool ok, const char* field, auto value, const char* why) {
    HS_CHECK(ok, source, ": ", field, " = ", value, ": ", why);
  };
  need(vocab_size > 0, "vocab_size", vocab_size, "must be positive");
  need(dim > 0, "hidden_size", dim, "must be positive");
  need(n_layers > 0, "num_hidden_layers", n_layers, "must be positive");
  need(n_heads > 0, "num_attention_heads", n_heads, "must be positive");
  need(head_dim > 0, "head_dim", head_dim, "must be positive");
  need(rope_dim > 0 && rope_dim <= head_dim && rope_dim % 2 == 0, "rope_dim", rope_dim,
       "must be even and at most head_dim");
  need(q_lora_rank > 0, "q_lora_rank", q_lora_rank, "must be positive");
  need(o_groups > 0 && n_heads % o_groups == 0, "o_groups", o_groups, "must divide num_attention_heads");
  need(o_lora_rank > 0, "o_lora_rank", o_lora_rank, "must be positive");
  need(window > 0, "sliding_window", window, "must be positive");
  need(static_cast<int>(compress_ratios.size()) == n_layers, "compress_ratios size", compress_ratios.size(),
       "must have one entry per layer");
  for (int r : compress_ratios) need(r >= 0, "compress ratio", r, "must be >= 0");
  need(hc_mult == 4, "hc_mult", hc_mult, "only 4 streams are supported");
  need(hc_sinkhorn_iters >= 1, "hc_sinkhorn_iters", hc_sinkhorn_iters, "must be >= 1");
  need(n_experts > 0, "n_routed_experts", n_experts, "must be positive");
  need(n_active_experts > 0 && n_active_experts <= n_experts, "num_experts_per_tok", n_active_experts,
       "must be in [1, n_routed_experts]");
  need(n_shared_experts == 1, "n_shared_experts", n_shared_experts, "exactly one shared expert is supported");
  need(moe_inter > 0, "moe_intermediate_size", moe_inter, "must be positive");
  need(n_hash_layers >= 0 && n_hash_layers <= n_layers, "num_hash_layers", n_hash_layers, "out of range");
  bool has_csa = false;
  for (int r : compress_ratios) has_csa |= (r == csa_ratio);
  if (has_csa) {
    need(index_n_heads > 0, "index_n_heads", index_n_heads, "must be positive with CSA layers");
    need(index_head_dim >= rope_dim, "index_head_dim", index_head_dim, "must be at least the rope dim");
    need(index_topk > 0, "index_topk", index_topk, "must be positive with CSA layers");
  }
}

ModelConfig ModelConfig::with_mtp_layer() const {
  ModelConfig c = *this;
  c.compress_ratios.push_back(mtp_ratio);
  c.n_layers += 1;
  return c;
}

std::string ModelConfig::layer_schedule() const {
  std::ostringstream os;
  for (int l = 0; l < n_layers; ++l) {
    os << "  layer " << l << ": " << attn_kind_name(kind(l));
    if (ratio(l)) os << " (ratio " << ratio(l) << ")";
    os << ", " << (is_hash_layer(l) ? "hash-routed MoE" : "score-routed MoE") << "\n";
  }
  return os.str();
}

std::string ModelConfig::summary() const {
  std::ostringstream os;
  os << "  vocab " << vocab_size << ", hidden " << dim << ", layers " << n_layers << ", hc streams " << hc_mult
     << "\n  attention: " << n_heads << " heads x " << head_dim << " (rope " << rope_dim << "), q_lora "
     << q_lora_rank << ", output " << o_groups << " groups x " << o_lora_rank << ", window " << window
     << "\n  indexer: " << index_n_heads << " heads x " << index_head_dim << ", top-k " << index_topk
     << "\n  MoE: " << n_experts << " experts, top-" << n_active_experts << ", " << n_shared_experts
     << " shared, width " << moe_inter << ", " << n_hash_layers << " hash layers, route scale " << route_scale
     << ", swiglu limit " << swiglu_limit << "\n  rope theta " << rope_theta << " (SWA), " << compress_rope_theta
     << " + YaRN x" << yarn.factor << " from " << yarn.original_ctx << " (compressed layers)\n";
  return os.str();
}

namespace {

using nlohmann::json;

template <typename T>
T get_num(const json& j, const char* key, const std::string& path) {
  HS_CHECK(j.contains(key), path, ": missing key '", key, "'");
  const json& v = j[key];
  HS_CHECK(v.is_number(), path, ": key '", key, "': expected a number, found ", v.type_name());
  if constexpr (std::is_integral_v<T>) {
    HS_CHECK(v.is_number_integer() || std::floor(v.get<double>()) == v.get<double>(), path, ": key '", key,
             "': expected an integer, found ", v.dump());
    return static_cast<T>(v.get<double>());
  } else {
    return static_cast<T>(v.get<double>());
  }
}

template <typename T>
T get_num_or(const json& j, const char* key, T dflt, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return get_num<T>(j, key, path);
}

}  // namespace

ModelConfig config_from_hf_json(const std::string& text, const std::string& path) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  HS_CHECK(j.is_object(), path, ": expected a JSON object");
  if (j.contains("model_type") && j["model_type"].is_string()) {
    std::string mt = j["model_type"].get<std::string>();
    HS_CHECK(mt == "deepseek_v4", path, ": model_type is '", mt, "', expected 'deepseek_v4'");
  }
  ModelConfig c;
  c.source = path;
  c.vocab_size = get_num<int64_t>(j, "vocab_size", path);
  c.dim = get_num<int64_t>(j, "hidden_size", path);
  c.n_layers = get_num<int>(j, "num_hidden_layers", path);
  c.n_heads = get_num<int>(j, "num_attention_heads", path);
  c.head_dim = get_num<int>(j, "head_dim", path);
  c.q_lora_rank = get_num<int>(j, "q_lora_rank", path);
  c.o_groups = get_num<int>(j, "o_groups", path);
  c.o_lora_rank = get_num<int>(j, "o_lora_rank", path);
  c.window = get_num<int>(j, "sliding_window", path);
  c.index_n_heads = get_num_or<int>(j, "index_n_heads", 0, path);
  c.index_head_dim = get_num_or<int>(j, "index_head_dim", 0, path);
  c.index_topk = get_num_or<int>(j, "index_topk", 0, path);
  c.n_experts = get_num<int>(j, "n_routed_experts", path);
  c.n_active_experts = get_num<int>(j, "num_experts_per_tok", path);
  c.n_shared_experts = get_num_or<int>(j, "n_shared_experts", 1, path);
  c.moe_inter = get_num<int>(j, "moe_intermediate_size", path);
  c.route_scale = get_num_or<float>(j, "routed_scaling_factor", 1.0f, path);
  c.swiglu_limit = get_num_or<float>(j, "swiglu_limit", 10.0f, path);
  c.hc_mult = get_num_or<int>(j, "hc_mult", 4, path);
  c.hc_sinkhorn_iters = get_num_or<int>(j, "hc_sinkhorn_iters", 20, path);
  c.hc_eps = get_num_or<float>(j, "hc_eps", 1e-6f, path);
  c.norm_eps = get_num_or<float>(j, "rms_norm_eps", 1e-6f, path);
  c.max_position = get_num_or<int64_t>(j, "max_position_embeddings", 0, path);
  c.bos_token_id = get_num_or<int>(j, "bos_token_id", 0, path);
  c.eos_token_id = get_num_or<int>(j, "eos_token_id", 1, path);
  c.n_mtp_layers = get_num_or<int>(j, "num_nextn_predict_layers", 0, path);
  if (j.contains("scoring_func") && j["scoring_func"].is_string()) {
    std::string sf = j["scoring_func"].get<std::string>();
    HS_CHECK(sf == "sqrtsoftplus", path, ": scoring_func '", sf, "' is not supported (expected sqrtsoftplus)");
  }

  // Attention schedule: current HF keys (layer_types + compress_rates) or legacy compress_ratios.
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    int csa = 4, hca = 128;
    if (j.contains("compress_rates") && j["compress_rates"].is_object()) {
      csa = get_num_or<int>(j["compress_rates"], "compressed_sparse_attention", 4, path);
      hca = get_num_or<int>(j["compress_rates"], "heavily_compressed_attention", 128, path);
    }
    c.csa_ratio = csa;
    for (const auto& t : j["layer_types"]) {
      HS_CHECK(t.is_string(), path, ": layer_types entries must be strings");
      std::string s = t.get<std::string>();
      if (s == "sliding_attention") c.compress_ratios.push_back(0);
      else if (s == "compressed_sparse_attention") c.compress_ratios.push_back(csa);
      else if (s == "heavily_compressed_attention") c.compress_ratios.push_back(hca);
      else fail(path, ": layer_types: unknown layer type '", s, "'");
    }
  } else if (j.contains("compress_ratios") && j["compress_ratios"].is_array()) {
    for (const auto& r : j["compress_ratios"]) {
      HS_CHECK(r.is_number_integer(), path, ": compress_ratios entries must be integers");
      c.compress_ratios.push_back(r.get<int>());
    }
    c.csa_ratio = 4;
  } else {
    fail(path, ": missing key 'layer_types' (or legacy 'compress_ratios')");
  }
  // The legacy list has an extra entry per MTP layer; the main stack uses the first n_layers.
  HS_CHECK(static_cast<int>(c.compress_ratios.size()) >= c.n_layers, path, ": attention schedule has ",
           c.compress_ratios.size(), " entries, expected at least num_hidden_layers = ", c.n_layers);
  if (static_cast<int>(c.compress_ratios.size()) > c.n_layers) c.mtp_ratio = c.compress_ratios[static_cast<size_t>(c.n_layers)];
  c.compress_ratios.resize(static_cast<size_t>(c.n_layers));

  // MoE routing schedule: mlp_layer_types (hash_moe prefix) or legacy num_hash_layers.
  if (j.contains("mlp_layer_types") && j["mlp_layer_types"].is_array()) {
    int n = 0;
    bool prefix = true;
    for (const auto& t : j["mlp_layer_types"]) {
      HS_CHECK(t.is_string(), path, ": mlp_layer_types entries must be strings");
      std::string s = t.get<std::string>();
      HS_CHECK(s == "hash_moe" || s == "moe", path, ": mlp_layer_types: unknown type '", s, "'");
      if (s == "hash_moe") {
        HS_CHECK(prefix, path, ": mlp_layer_types: hash_moe layers must come first");
        ++n;
      } else {
        prefix = false;
      }
    }
    c.n_hash_layers = n;
  } else {
    c.n_hash_layers = get_num_or<int>(j, "num_hash_layers", 0, path);
  }

  // RoPE: rope_parameters {main, compress} or legacy top-level rope_theta + rope_scaling.
  int rope_dim = get_num_or<int>(j, "qk_rope_head_dim", 0, path);
  double prf = get_num_or<double>(j, "partial_rotary_factor", 0.0, path);
  c.rope_theta = get_num_or<float>(j, "rope_theta", 10000.0f, path);
  c.compress_rope_theta = get_num_or<float>(j, "compress_rope_theta", 160000.0f, path);
  const json* yarn = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    if (rp.contains("main") && rp["main"].is_object()) {
      c.rope_theta = get_num_or<float>(rp["main"], "rope_theta", c.rope_theta, path);
      prf = get_num_or<double>(rp["main"], "partial_rotary_factor", prf, path);
    }
    if (rp.contains("compress") && rp["compress"].is_object()) {
      c.compress_rope_theta = get_num_or<float>(rp["compress"], "rope_theta", c.compress_rope_theta, path);
      yarn = &rp["compress"];
    } else if (rp.contains("rope_type")) {
      yarn = &rp;  // flat form
    }
  }
  if (!yarn && j.contains("rope_scaling") && j["rope_scaling"].is_object()) yarn = &j["rope_scaling"];
  if (yarn) {
    std::string type;
    if (yarn->contains("rope_type") && (*yarn)["rope_type"].is_string()) type = (*yarn)["rope_type"];
    if (yarn->contains("type") && (*yarn)["type"].is_string()) type = (*yarn)["type"];
    HS_CHECK(type.empty() || type == "yarn", path, ": compressed-layer rope type '", type, "' (expected yarn)");
    c.yarn.factor = get_num_or<float>(*yarn, "factor", 16.0f, path);
    c.yarn.original_ctx = get_num_or<int64_t>(*yarn, "original_max_position_embeddings", 65536, path);
    c.yarn.beta_fast = get_num_or<float>(*yarn, "beta_fast", 32.0f, path);
    c.yarn.beta_slow = get_num_or<float>(*yarn, "beta_slow", 1.0f, path);
    float af = get_num_or<float>(*yarn, "attention_factor", 1.0f, path);
    HS_CHECK(af == 1.0f, path, ": YaRN attention_factor ", af, " is not supported (DeepSeek-V4 uses none)");
  }
  if (rope_dim == 0 && prf > 0) rope_dim = static_cast<int>(c.head_dim * prf);
  c.rope_dim = rope_dim;
  c.validate();
  return c;
}

ModelConfig config_from_hf_dir(const std::string& dir) {
  const std::string path = dir + "/config.json";
  HS_CHECK(file_exists(path), dir, ": no config.json (expected an HF model directory or a .gguf file)");
  return config_from_hf_json(read_file(path), path);
}

}  // namespace hs
