#include "model/gguf_check.h"

#include <algorithm>

#include "format/gguf.h"
#include "util/error.h"

namespace hs {

namespace {

using gguf::ValueType;

struct KeyType {
  const char* key;  // under "deepseek4."
  ValueType type;
  ValueType elem = ValueType::UINT8;  // element type of an ARRAY
};

// gguf-ds4.md §7: every §1 key but the optional ones. LC's getters throw on another type.
// Checked against llama.cpp 00395eb (docs/formats.md §5): deepseek4 load_arch_hparams and the
// generic loader throw without most of these; head_count, head_count_kv, key/value_length,
// expert_count/used_count and the rope keys LC reads with generic defaults that are wrong for
// V4, so they are required here too (stricter than LC, never looser).
constexpr KeyType kRequired[] = {
    {"block_count", ValueType::UINT32},
    {"context_length", ValueType::UINT32},
    {"embedding_length", ValueType::UINT32},
    {"attention.head_count", ValueType::UINT32},
    {"attention.head_count_kv", ValueType::UINT32},
    {"attention.key_length", ValueType::UINT32},
    {"attention.value_length", ValueType::UINT32},
    {"rope.dimension_count", ValueType::UINT32},
    {"rope.freq_base", ValueType::FLOAT32},
    {"rope.scaling.type", ValueType::STRING},  // without the yarn keys compressed layers get plain RoPE
    {"rope.scaling.factor", ValueType::FLOAT32},
    {"rope.scaling.original_context_length", ValueType::UINT32},
    {"rope.scaling.yarn_beta_fast", ValueType::FLOAT32},
    {"rope.scaling.yarn_beta_slow", ValueType::FLOAT32},
    {"attention.compress_rope_freq_base", ValueType::FLOAT32},
    {"attention.layer_norm_rms_epsilon", ValueType::FLOAT32},
    {"attention.q_lora_rank", ValueType::UINT32},
    {"attention.output_lora_rank", ValueType::UINT32},
    {"attention.output_group_count", ValueType::UINT32},
    {"attention.sliding_window", ValueType::UINT32},
    {"attention.compress_ratios", ValueType::ARRAY, ValueType::INT32},
    {"attention.indexer.head_count", ValueType::UINT32},
    {"attention.indexer.key_length", ValueType::UINT32},
    {"attention.indexer.top_k", ValueType::UINT32},
    {"expert_count", ValueType::UINT32},
    {"expert_used_count", ValueType::UINT32},
    {"expert_shared_count", ValueType::UINT32},
    {"expert_feed_forward_length", ValueType::UINT32},
    {"expert_weights_scale", ValueType::FLOAT32},
    {"expert_weights_norm", ValueType::BOOL},
    {"expert_gating_func", ValueType::UINT32},
    {"hash_layer_count", ValueType::UINT32},
    {"swiglu_clamp_exp", ValueType::ARRAY, ValueType::FLOAT32},
    {"hyper_connection.count", ValueType::UINT32},
    {"hyper_connection.sinkhorn_iterations", ValueType::UINT32},
    {"hyper_connection.epsilon", ValueType::FLOAT32},
};
// Optional, but LC still reads them with these types when present.
constexpr KeyType kOptional[] = {
    {"embedding_length_out", ValueType::UINT32},
    {"vocab_size", ValueType::UINT32},
    {"swiglu_clamp_shexp", ValueType::ARRAY, ValueType::FLOAT32},
    {"nextn_predict_layers", ValueType::UINT32},
    {"expert_group_count", ValueType::UINT32},
    {"expert_group_used_count", ValueType::UINT32},
};

std::string type_str(ValueType t, ValueType elem) {
  return t == ValueType::ARRAY ? cat("ARRAY of ", gguf::value_type_name(elem)) : gguf::value_type_name(t);
}

class Checker {
 public:
  explicit Checker(const gguf::File& f) : f_(f) {}
  std::vector<std::string> problems;

  // The value when present with the right type; else a problem (when required) and null.
  const gguf::Value* typed(const std::string& key, ValueType t, ValueType elem, bool required) {
    const gguf::Value* v = f_.find(key);
    if (!v) {
      if (required) problems.push_back(cat(key, ": missing (llama.cpp requires it)"));
      return nullptr;
    }
    const ValueType found_elem = v->type == ValueType::ARRAY ? std::get<gguf::Array>(v->v).elem_type : ValueType::UINT8;
    if (v->type != t || (t == ValueType::ARRAY && found_elem != elem)) {
      problems.push_back(cat(key, ": type ", type_str(v->type, found_elem), ", llama.cpp reads ", type_str(t, elem)));
      return nullptr;
    }
    return v;
  }
  int64_t u32(const std::string& key, int64_t dflt) {  // an already type-checked u32, or dflt
    const gguf::Value* v = f_.find(key);
    return v && v->type == ValueType::UINT32 ? static_cast<int64_t>(std::get<uint64_t>(v->v)) : dflt;
  }
  size_t array_size(const gguf::Value* v) { return v ? std::get<gguf::Array>(v->v).items.size() : 0; }

 private:
  const gguf::File& f_;
};

}  // namespace

std::vector<std::string> check_llama_cpp_gguf(const gguf::File& f, const LlamaCppCheckOptions& opts) {
  Checker ck(f);
  const std::string p = "deepseek4.";
  if (const auto* a = ck.typed("general.architecture", ValueType::STRING, ValueType::UINT8, true);
      a && std::get<std::string>(a->v) != "deepseek4")
    ck.problems.push_back(cat("general.architecture: '", std::get<std::string>(a->v), "', expected 'deepseek4'"));
  const gguf::Value* ratios = nullptr;
  const gguf::Value* clamps = nullptr;
  for (const auto& k : kRequired) {
    const gguf::Value* v = ck.typed(p + k.key, k.type, k.elem, true);
    if (std::string(k.key) == "attention.compress_ratios") ratios = v;
    if (std::string(k.key) == "swiglu_clamp_exp") clamps = v;
  }
  for (const auto& k : kOptional) ck.typed(p + k.key, k.type, k.elem, false);

  const int64_t n_layers = ck.u32(p + "block_count", 0);
  const auto need_value = [&](const char* key, int64_t want, const char* why) {
    const int64_t v = ck.u32(p + key, want);
    if (v != want) ck.problems.push_back(cat(p, key, ": ", v, ", llama.cpp requires ", want, " (", why, ")"));
  };
  need_value("expert_gating_func", 4, "sqrt-softplus; any other value throws in load_arch_hparams");
  need_value("hyper_connection.count", 4, "a GGML_ASSERT, and the CUDA kernels hard-code 4 streams");
  for (const char* k : {"expert_group_count", "expert_group_used_count"})
    need_value(k, 0, "expert groups are not used");
  if (ratios && ck.array_size(ratios) < static_cast<size_t>(n_layers))
    ck.problems.push_back(
        cat(p, "attention.compress_ratios: ", ck.array_size(ratios), " entries, block_count is ", n_layers));
  if (clamps && ck.array_size(clamps) < static_cast<size_t>(n_layers))
    ck.problems.push_back(cat(p, "swiglu_clamp_exp: ", ck.array_size(clamps), " entries, block_count is ", n_layers));

  bool has_csa = false;
  if (ratios) {
    const std::vector<int64_t> r = f.get_int_array(p + "attention.compress_ratios");
    for (size_t l = 0; l < r.size() && l < static_cast<size_t>(n_layers); ++l) {
      has_csa |= r[l] == 4;
      if (opts.real_widths && r[l] != 0 && r[l] != 4 && r[l] != 128)
        ck.problems.push_back(
            cat(p, "attention.compress_ratios[", l, "] = ", r[l], ": llama.cpp accepts only 0, 4, 128"));
    }
  }
  const int64_t ih = ck.u32(p + "attention.indexer.head_count", -1),
                id = ck.u32(p + "attention.indexer.key_length", -1);
  if (has_csa && (ih == 0 || id == 0 || ck.u32(p + "attention.indexer.top_k", -1) == 0))
    ck.problems.push_back(cat(p, "attention.indexer.*: zero heads, dims or top-k with ratio-4 (CSA) layers"));
  if (opts.real_widths && has_csa && ih >= 0 && id >= 0 && (ih != 64 || id != 128))
    ck.problems.push_back(cat(p, "attention.indexer: ", ih, " heads x ", id,
                              " dims; llama.cpp's fused lightning indexer needs 64 x 128"));

  if (const auto* m = ck.typed("tokenizer.ggml.model", ValueType::STRING, ValueType::UINT8, true);
      m && std::get<std::string>(m->v) != "gpt2")
    ck.problems.push_back(
        cat("tokenizer.ggml.model: '", std::get<std::string>(m->v), "', expected 'gpt2' (byte-level BPE)"));
  const auto* tokens = ck.typed("tokenizer.ggml.tokens", ValueType::ARRAY, ValueType::STRING, true);
  const auto* merges = ck.typed("tokenizer.ggml.merges", ValueType::ARRAY, ValueType::STRING, true);
  if (tokens && ck.array_size(tokens) == 0) ck.problems.push_back("tokenizer.ggml.tokens: empty");
  if (merges && ck.array_size(merges) == 0)
    ck.problems.push_back(
        "tokenizer.ggml.merges: empty (llama.cpp needs a non-empty merges array for a BPE vocabulary)");
  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (tokens && embd && embd->ne.size() == 2 && static_cast<int64_t>(ck.array_size(tokens)) != embd->ne[1])
    ck.problems.push_back(cat("tokenizer.ggml.tokens: ", ck.array_size(tokens), " tokens, token_embd.weight has ",
                              embd->ne[1], " rows (llama.cpp sizes the vocabulary from the token list)"));

  const int64_t n_hash = std::min(ck.u32(p + "hash_layer_count", 0), n_layers);
  for (int64_t l = 0; l < n_hash; ++l)
    for (const char* suffix : {".bias", ".weight", ""})
      if (f.find_tensor(cat("blk.", l, ".exp_probs_b", suffix)))
        ck.problems.push_back(cat("blk.", l, ".exp_probs_b", suffix, ": a router bias on hash layer ", l,
                                  " (llama.cpp creates none there and rejects the extra tensor)"));
  return ck.problems;
}

}  // namespace hs
