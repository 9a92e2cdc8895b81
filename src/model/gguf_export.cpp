#include "model/gguf_export.h"

#include <algorithm>
#include <cstring>

#include "format/gguf_stream_writer.h"
#include "format/quants.h"
#include "model/data/chat_template_v4.h"
#include "model/tensor_names.h"
#include "tokenizer/bpe.h"
#include "util/error.h"
#include "util/mmap.h"
#include "util/thread_pool.h"

namespace hs {

void write_config_metadata(const ModelConfig& c, gguf::Writer& w, bool mtp_counted) {
  const std::string p = "deepseek4.";
  auto u32 = [&](const std::string& k, int64_t v) { w.set_u32(p + k, static_cast<uint32_t>(v)); };
  auto f32 = [&](const std::string& k, float v) { w.set_f32(p + k, v); };
  w.set_string("general.architecture", "deepseek4");
  u32("block_count", c.n_layers + (mtp_counted ? c.n_mtp_layers : 0));
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
  std::vector<int32_t> ratios(c.compress_ratios.begin(), c.compress_ratios.end());
  if (c.n_mtp_layers > 0) ratios.push_back(c.mtp_ratio);  // the official schedule's MTP entry
  w.set_i32_array(p + "attention.compress_ratios", ratios);
  if (c.dspark.any()) {  // the DSpark drafter's keys (ours: docs/speculative.md "Config")
    u32("dspark.stage_count", c.dspark.stages);
    u32("dspark.block_size", c.dspark.block);
    u32("dspark.noise_token_id", c.dspark.noise_token);
    u32("dspark.markov_rank", c.dspark.markov_rank);
    w.set_i32_array(p + "dspark.target_layer_ids",
                    std::vector<int32_t>(c.dspark.target_layers.begin(), c.dspark.target_layers.end()));
  }
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

namespace {

enum class Path { Copy, RepackFp4, Quantize, Table };

struct Plan {
  TensorSpec spec;
  GgmlType type = GgmlType::F32;
  Path path = Path::Quantize;
};

// The type that holds a source storage type exactly (auto mode).
GgmlType exact_type(const std::string& storage) {
  if (storage == "F8_E4M3" || storage == "BF16") return GgmlType::BF16;  // e4m3 x 2^k fits BF16's 8 bits
  if (storage == "F16") return GgmlType::F16;
  if (storage == "F4_E2M1") return GgmlType::MXFP4;
  return GgmlType::F32;
}

Plan plan_tensor(const ModelSource& src, const TensorSpec& s, const GgufExportOptions& o) {
  const std::optional<RawGgufTensor> raw = src.raw_gguf(s);
  if (s.role == TensorRole::TokenTable)
    return {s, GgmlType::I32, raw && raw->type == GgmlType::I32 ? Path::Copy : Path::Table};
  if (s.role == TensorRole::Vector || s.role == TensorRole::HcFn)  // a GGUF's F16/BF16 stays; else F32
    return {s, raw ? raw->type : GgmlType::F32, raw ? Path::Copy : Path::Quantize};
  const bool experts = s.role == TensorRole::Experts;
  const std::optional<GgmlType> chosen = experts ? o.experts : o.dense;
  const bool fp4 = experts && src.fp4_expert(s, 0).has_value();
  const GgmlType type = chosen ? *chosen
                        : raw  ? raw->type
                        : fp4  ? GgmlType::MXFP4
                               : exact_type(src.storage_type(s));
  if (raw && raw->type == type) return {s, type, Path::Copy};
  if (fp4 && type == GgmlType::MXFP4) return {s, type, Path::RepackFp4};
  HS_CHECK(type_has_quantizer(type), "tensor ", s.name, ": cannot write ", ggml_type_name(type),
           " (no quantizer; types with one: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, mxfp4, q2_k, q4_k, "
           "q5_k, q6_k)");
  const int64_t block = ggml_type_info(type).block_elems;
  HS_CHECK(s.shape.back() % block == 0, "tensor ", s.name, ": rows of ", s.shape.back(),
           " elements cannot be stored as ", ggml_type_name(type), " (blocks of ", block, ")");
  return {s, type, Path::Quantize};
}

// Quantizes `rows` rows of x into the writer, a band of rows at a time across the pool.
void write_quantized(gguf::StreamWriter& w, ThreadPool& pool, GgmlType type, const float* x, int64_t rows,
                     int64_t cols) {
  const int64_t rb = ggml_row_bytes(type, cols);
  const int64_t band = std::max<int64_t>(1, (int64_t{32} << 20) / std::max<int64_t>(rb, 1));
  std::vector<uint8_t> buf;
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    const int64_t n = std::min(band, rows - r0);
    buf.resize(static_cast<size_t>(n * rb));
    pool.parallel_for(n, 16, [&](int64_t a, int64_t b) {
      for (int64_t r = a; r < b; ++r) quantize_row(type, x + (r0 + r) * cols, buf.data() + r * rb, cols);
    });
    w.write(buf.data(), buf.size());
  }
}

void write_tensor(const ModelSource& src, const Plan& p, gguf::StreamWriter& w, ThreadPool& pool) {
  const TensorSpec& s = p.spec;
  const int64_t cols = s.shape.back(), rows = s.n_elements() / cols;
  switch (p.path) {
    case Path::Copy: {
      const RawGgufTensor raw = *src.raw_gguf(s);
      w.write(raw.data, raw.nbytes);
      return;
    }
    case Path::Table: {
      const std::vector<int32_t> v = src.read_i32(s);
      w.write(v.data(), v.size() * 4);
      return;
    }
    case Path::RepackFp4: {
      std::vector<uint8_t> buf;
      for (int64_t e = 0; e < s.shape[0]; ++e) {
        const std::optional<Fp4Matrix> m = src.fp4_expert(s, e);
        HS_CHECK(m && m->rows == s.shape[1] && m->cols == cols, "tensor ", s.name, ": expert ", e,
                 " is not stored as FP4 like expert 0");
        const int64_t n = m->rows * m->cols;
        buf.resize(static_cast<size_t>(n / 32 * 17));
        try {
          repack_fp4_to_mxfp4(m->codes, m->scales, buf.data(), n);
        } catch (const Error& err) {
          fail("tensor ", gguf_to_official({gguf_tensor_name(s), e, false}), ": ", err.what());
        }
        w.write(buf.data(), buf.size());
      }
      return;
    }
    case Path::Quantize:
      if (s.role == TensorRole::Experts) {
        for (int64_t e = 0; e < s.shape[0]; ++e) {
          const std::vector<float> v = src.read_expert_f32(s, e);
          write_quantized(w, pool, p.type, v.data(), s.shape[1], cols);
        }
      } else {
        const std::vector<float> v = src.read_f32(s);
        write_quantized(w, pool, p.type, v.data(), rows, cols);
      }
      return;
  }
}

}  // namespace

std::string default_tokenizer_path(const ModelSource& src) {
  if (is_directory(src.path())) {
    const std::string json = src.path() + "/tokenizer.json";
    return file_exists(json) ? json : "";
  }
  if (src.format() == "gguf" && gguf::File(src.path()).has("tokenizer.ggml.tokens")) return src.path();
  return "";
}

GgufExportStats export_gguf(const ModelSource& src, const std::string& out_path, const GgufExportOptions& opts) {
  const ModelConfig& c = src.config();
  gguf::Writer meta;
  write_config_metadata(c, meta);
  meta.set_string("general.name", opts.name);
  GgufExportStats stats;
  if (!opts.tokenizer.empty()) {
    const Tokenizer tok = Tokenizer::load(opts.tokenizer);
    tok.write_gguf_metadata(meta);
    stats.tokenizer_tokens = tok.vocab_size();
  }
  if (opts.chat_template) {
    std::string tmpl(synth_data::kDeepSeekV4ChatTemplate);
    if (src.format() == "gguf")
      if (const gguf::File f(src.path()); f.has("tokenizer.chat_template")) tmpl = f.get_string("tokenizer.chat_template");
    meta.set_string("tokenizer.chat_template", tmpl);
  }
  std::vector<Plan> plans;
  std::vector<gguf::TensorDecl> decls;
  for (const auto& s : model_tensor_specs(c, 0, c.n_layers, true, true)) {
    plans.push_back(plan_tensor(src, s, opts));
    decls.push_back({gguf_tensor_name(s), plans.back().type, std::vector<int64_t>(s.shape.rbegin(), s.shape.rend())});
  }
  gguf::StreamWriter w(out_path, meta, std::move(decls));
  ThreadPool pool;
  for (const auto& p : plans) {
    write_tensor(src, p, w, pool);
    HS_CHECK(w.current() > stats.tensors, "internal: tensor ", p.spec.name, " written short");
    ++stats.tensors;
    stats.repacked_fp4 += p.path == Path::RepackFp4;
    stats.copied += p.path == Path::Copy;
    stats.quantized += p.path == Path::Quantize;
    if (opts.progress) opts.progress(stats.tensors, plans.size());
  }
  w.finish();
  return stats;
}

}  // namespace hs
