#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string_view>

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
  need(vocab_size > 0 && vocab_size <= INT32_MAX, "vocab_size", vocab_size, "must be in [1, 2^31) (token ids are int32)");
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
  need(static_cast<int64_t>(compress_ratios.size()) == n_layers, "compress_ratios size", compress_ratios.size(),
       "must have one entry per layer");
  for (int r : compress_ratios) need(r >= 0, "compress ratio", r, "must be >= 0");
  need(csa_ratio > 0, "compressed_sparse_attention ratio", csa_ratio, "must be positive");
  need(hc_mult == 4, "hc_mult", hc_mult, "only 4 streams are supported");
  need(hc_sinkhorn_iters >= 1, "hc_sinkhorn_iters", hc_sinkhorn_iters, "must be >= 1");
  need(n_experts > 0, "n_routed_experts", n_experts, "must be positive");
  need(n_active_experts > 0 && n_active_experts <= n_experts, "num_experts_per_tok", n_active_experts,
       "must be in [1, n_routed_experts]");
  need(n_shared_experts == 1, "n_shared_experts", n_shared_experts, "exactly one shared expert is supported");
  need(moe_inter > 0, "moe_intermediate_size", moe_inter, "must be positive");
  need(n_hash_layers >= 0 && n_hash_layers <= n_layers, "num_hash_layers", n_hash_layers, "out of range");
  need(n_mtp_layers >= 0, "num_nextn_predict_layers", n_mtp_layers, "must be >= 0");
  need(max_position >= 0, "max_position_embeddings", max_position, "must be >= 0");
  need(yarn.original_ctx > 0, "original_max_position_embeddings", yarn.original_ctx, "must be positive");
  need(bos_token_id >= 0 && bos_token_id < vocab_size, "bos_token_id", bos_token_id, "must be a token id in [0, vocab_size)");
  need(eos_token_id >= 0 && eos_token_id < vocab_size, "eos_token_id", eos_token_id, "must be a token id in [0, vocab_size)");
  // Floats the kernels divide by, take logs or powers of: finite, and positive where a scale.
  auto positive = [&](float v, const char* field) { need(std::isfinite(v) && v > 0, field, v, "must be finite and positive"); };
  positive(norm_eps, "rms_norm_eps");
  positive(hc_eps, "hc_eps");
  positive(rope_theta, "rope_theta");
  positive(compress_rope_theta, "compress_rope_theta");
  positive(yarn.factor, "rope_scaling.factor");
  positive(swiglu_limit, "swiglu_limit");
  need(std::isfinite(route_scale), "routed_scaling_factor", route_scale, "must be finite");
  need(std::isfinite(yarn.beta_fast) && std::isfinite(yarn.beta_slow), "rope_scaling.beta_fast/beta_slow",
       yarn.beta_fast, "must be finite");
  bool has_csa = false;
  for (int r : compress_ratios) has_csa |= (r == csa_ratio);
  if (has_csa) {
    need(index_n_heads > 0, "index_n_heads", index_n_heads, "must be positive with CSA layers");
    need(index_head_dim >= rope_dim, "index_head_dim", index_head_dim, "must be at least the rope dim");
    need(index_topk > 0, "index_topk", index_topk, "must be positive with CSA layers");
  }
  check_shapes();
}

// Every tensor shape of tensors.cpp is a product of these fields: each product must fit in
// int64 (element counts) and each row width in int32 (the kernels index rows with int).
void ModelConfig::check_shapes() const {
  auto product = [&](const char* what, std::initializer_list<int64_t> dims, int64_t limit) {
    int64_t p = 1;
    for (int64_t d : dims) {
      const bool overflow = __builtin_mul_overflow(p, d, &p);
      HS_CHECK(!overflow && p <= limit, source, ": ", what, " (a product of the config's sizes) is too large: it exceeds ",
               limit == INT32_MAX ? "2^31-1 (a row width)" : "2^63-1 (an element count)");
    }
  };
  const int64_t HD = head_dim, H = n_heads, G = o_groups, R = o_lora_rank, IH = index_n_heads, ID = index_head_dim;
  int64_t max_ratio = 0;
  for (int r : compress_ratios) max_ratio = std::max<int64_t>(max_ratio, r);
  product("num_attention_heads * head_dim", {H, HD}, INT32_MAX);
  product("hc_mult * hidden_size", {hc_mult, dim}, INT32_MAX);
  product("o_groups * o_lora_rank", {G, R}, INT32_MAX);
  product("2 * head_dim", {2, HD}, INT32_MAX);
  product("index_n_heads * index_head_dim", {IH, ID}, INT32_MAX);
  product("2 * index_head_dim", {2, ID}, INT32_MAX);
  product("vocab_size * hidden_size", {vocab_size, dim}, INT64_MAX);
  product("hc_mix * hc_mult * hidden_size", {hc_mix(), hc_mult, dim}, INT64_MAX);
  product("q_lora_rank * hidden_size", {q_lora_rank, dim}, INT64_MAX);
  product("num_attention_heads * head_dim * q_lora_rank", {H, HD, q_lora_rank}, INT64_MAX);
  product("o_groups * o_lora_rank * hidden_size", {G, R, dim}, INT64_MAX);
  product("o_groups * o_lora_rank * num_attention_heads * head_dim", {G, R, H, HD}, INT64_MAX);
  product("2 * head_dim * hidden_size", {2, HD, dim}, INT64_MAX);
  product("compress ratio * 2 * head_dim", {max_ratio, 2, HD}, INT64_MAX);
  product("index_n_heads * index_head_dim * q_lora_rank", {IH, ID, q_lora_rank}, INT64_MAX);
  product("2 * index_head_dim * hidden_size", {2, ID, dim}, INT64_MAX);
  product("n_routed_experts * hidden_size", {n_experts, dim}, INT64_MAX);
  product("n_routed_experts * moe_intermediate_size * hidden_size", {n_experts, moe_inter, dim}, INT64_MAX);
  product("2 * moe_intermediate_size", {2, moe_inter}, INT32_MAX);
  product("vocab_size * num_experts_per_tok", {vocab_size, n_active_experts}, INT64_MAX);
  product("num_hidden_layers * n_routed_experts * moe_intermediate_size * hidden_size",
          {n_layers, n_experts, moe_inter, dim}, INT64_MAX);
}

ModelConfig ModelConfig::with_mtp_layer() const {
  ModelConfig c = *this;
  c.compress_ratios.push_back(mtp_ratio);
  c.n_layers += 1;
  return c;
}

ModelConfig ModelConfig::with_dspark_layers(int stages) const {
  ModelConfig c = *this;
  for (int s = 0; s < stages; ++s) c.compress_ratios.push_back(0);
  c.n_layers += stages;
  return c;
}

void ModelConfig::validate_dspark(int stages, const std::string& what) const {
  const DsparkConfig& d = dspark;
  HS_CHECK(stages >= 1 && stages <= 16, what, "DSpark stages = ", stages, " (expected 1..16)");
  HS_CHECK(d.block >= 1 && d.block <= 16, what, "dspark_block_size = ", d.block, " (expected 1..16)");
  HS_CHECK(d.noise_token >= 0 && d.noise_token < vocab_size, what, "dspark_noise_token_id = ", d.noise_token,
           " is not a token id of this model [0, ", vocab_size, ")");
  HS_CHECK(d.markov_rank >= 1 && d.markov_rank <= 65536, what, "dspark_markov_rank = ", d.markov_rank,
           " (expected 1..65536)");
  HS_CHECK(!d.target_layers.empty() && d.target_layers.size() <= 16, what, "dspark_target_layer_ids has ",
           d.target_layers.size(), " entries (expected 1..16)");
  for (size_t i = 0; i < d.target_layers.size(); ++i) {
    const int l = d.target_layers[i];
    HS_CHECK(l >= 0 && l < n_layers, what, "dspark_target_layer_ids[", i, "] = ", l, " is not a layer of this model [0, ",
             n_layers, ")");
    HS_CHECK(i == 0 || l > d.target_layers[i - 1], what, "dspark_target_layer_ids must be strictly ascending (",
             d.target_layers[i - 1], " then ", l, ")");
  }
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

// A JSON number as T (`name` is its key, for messages). The value is range-checked in its own
// type (exact integer or double) before any cast, so no out-of-range value is ever converted.
template <typename T>
T num_as(const json& v, const std::string& name, const std::string& path) {
  HS_CHECK(v.is_number(), path, ": key '", name, "': expected a number, found ", v.type_name(), " ", v.dump());
  if constexpr (std::is_integral_v<T>) {
    constexpr int64_t lo = std::numeric_limits<T>::min();
    constexpr int64_t hi = std::numeric_limits<T>::max();
    bool ok = false;
    if (v.is_number_unsigned()) {
      ok = v.get<uint64_t>() <= static_cast<uint64_t>(hi);
      if (ok) return static_cast<T>(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      ok = v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
      if (ok) return static_cast<T>(v.get<int64_t>());
    } else {
      const double d = v.get<double>();
      HS_CHECK(std::isfinite(d) && std::floor(d) == d, path, ": key '", name, "' = ", v.dump(), ": expected an integer");
      // double(hi) + 1 is exactly 2^31 (int) or 2^63 (int64): the first value that does not fit.
      ok = d >= static_cast<double>(lo) && d < static_cast<double>(hi) + 1.0;
      if (ok) return static_cast<T>(d);
    }
    fail(path, ": key '", name, "' = ", v.dump(), ": out of range (expected an integer in [", lo, ", ", hi, "])");
  } else {
    const double d = v.get<double>();
    HS_CHECK(std::isfinite(d) && std::fabs(d) <= static_cast<double>(std::numeric_limits<T>::max()), path, ": key '",
             name, "' = ", v.dump(), ": out of range for a ", sizeof(T) == 4 ? "32" : "64", "-bit float");
    return static_cast<T>(d);
  }
}

// key (under `parent`, for messages) as T.
template <typename T>
T get_num(const json& j, const char* key, const std::string& path, std::string_view parent = {}) {
  const std::string name = parent.empty() ? std::string(key) : cat(parent, ".", key);
  HS_CHECK(j.contains(key), path, ": missing key '", name, "'");
  return num_as<T>(j[key], name, path);
}

template <typename T>
T get_num_or(const json& j, const char* key, T dflt, const std::string& path, std::string_view parent = {}) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  return get_num<T>(j, key, path, parent);
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
  // DSpark (V4-Flash-0731): the stage count is not in config.json (its num_nextn_predict_layers
  // says 1); the source counts the mtp.N stages.
  c.dspark.block = get_num_or<int>(j, "dspark_block_size", 0, path);
  c.dspark.noise_token = get_num_or<int>(j, "dspark_noise_token_id", -1, path);
  c.dspark.markov_rank = get_num_or<int>(j, "dspark_markov_rank", 0, path);
  if (j.contains("dspark_target_layer_ids") && j["dspark_target_layer_ids"].is_array()) {
    const auto& ids = j["dspark_target_layer_ids"];
    for (size_t i = 0; i < ids.size(); ++i)
      c.dspark.target_layers.push_back(num_as<int>(ids[i], cat("dspark_target_layer_ids[", i, "]"), path));
  }
  if (j.contains("scoring_func") && j["scoring_func"].is_string()) {
    std::string sf = j["scoring_func"].get<std::string>();
    HS_CHECK(sf == "sqrtsoftplus", path, ": scoring_func '", sf, "' is not supported (expected sqrtsoftplus)");
  }

  // Attention schedule: current HF keys (layer_types + compress_rates) or legacy compress_ratios.
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    int csa = 4, hca = 128;
    if (j.contains("compress_rates") && j["compress_rates"].is_object()) {
      csa = get_num_or<int>(j["compress_rates"], "compressed_sparse_attention", 4, path, "compress_rates");
      hca = get_num_or<int>(j["compress_rates"], "heavily_compressed_attention", 128, path, "compress_rates");
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
    const json& rs = j["compress_ratios"];
    for (size_t i = 0; i < rs.size(); ++i) {
      c.compress_ratios.push_back(num_as<int>(rs[i], cat("compress_ratios[", i, "]"), path));
    }
    c.csa_ratio = 4;
  } else {
    fail(path, ": missing key 'layer_types' (or legacy 'compress_ratios')");
  }
  // The legacy list has an extra entry per MTP layer; the main stack uses the first n_layers.
  HS_CHECK(c.n_layers >= 1, path, ": num_hidden_layers must be at least 1, got ", c.n_layers);
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
  const char* yarn_key = "rope_scaling";
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& rp = j["rope_parameters"];
    if (rp.contains("main") && rp["main"].is_object()) {
      c.rope_theta = get_num_or<float>(rp["main"], "rope_theta", c.rope_theta, path, "rope_parameters.main");
      prf = get_num_or<double>(rp["main"], "partial_rotary_factor", prf, path, "rope_parameters.main");
    }
    if (rp.contains("compress") && rp["compress"].is_object()) {
      c.compress_rope_theta =
          get_num_or<float>(rp["compress"], "rope_theta", c.compress_rope_theta, path, "rope_parameters.compress");
      yarn = &rp["compress"];
      yarn_key = "rope_parameters.compress";
    } else if (rp.contains("rope_type")) {
      yarn = &rp;  // flat form
      yarn_key = "rope_parameters";
    }
  }
  if (!yarn && j.contains("rope_scaling") && j["rope_scaling"].is_object()) yarn = &j["rope_scaling"];
  if (yarn) {
    std::string type;
    if (yarn->contains("rope_type") && (*yarn)["rope_type"].is_string()) type = (*yarn)["rope_type"];
    if (yarn->contains("type") && (*yarn)["type"].is_string()) type = (*yarn)["type"];
    HS_CHECK(type.empty() || type == "yarn", path, ": compressed-layer rope type '", type, "' (expected yarn)");
    c.yarn.factor = get_num_or<float>(*yarn, "factor", 16.0f, path, yarn_key);
    c.yarn.original_ctx = get_num_or<int64_t>(*yarn, "original_max_position_embeddings", 65536, path, yarn_key);
    c.yarn.beta_fast = get_num_or<float>(*yarn, "beta_fast", 32.0f, path, yarn_key);
    c.yarn.beta_slow = get_num_or<float>(*yarn, "beta_slow", 1.0f, path, yarn_key);
    float af = get_num_or<float>(*yarn, "attention_factor", 1.0f, path, yarn_key);
    HS_CHECK(af == 1.0f, path, ": YaRN attention_factor ", af, " is not supported (DeepSeek-V4 uses none)");
  }
  if (rope_dim == 0 && prf != 0) {
    // Guards the float -> int cast below: the product is then in [0, head_dim].
    HS_CHECK(prf > 0 && prf <= 1, path, ": key 'partial_rotary_factor' = ", prf, ": must be in (0, 1]");
    HS_CHECK(c.head_dim > 0, path, ": key 'head_dim' = ", c.head_dim, ": must be positive");
    rope_dim = static_cast<int>(c.head_dim * prf);
  }
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
