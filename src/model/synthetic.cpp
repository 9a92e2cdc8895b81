// Synthetic presets (tiny / flash / pro), the in-memory source and the built-in model.
#include "model/synthetic.h"

#include <algorithm>
#include <unordered_map>

#include "model/dspark_tensors.h"
#include "model/synthetic_impl.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace hs {

namespace {

// Layers 0-1 use `first`, then the CSA ratio on even layers and `hca` on odd ones: the real
// Flash ([0,0,4,128,...]) and Pro ([128,128,4,128,...]) schedules, cut or extended.
std::vector<int> ratio_schedule(int n_layers, int first, int csa, int hca) {
  std::vector<int> r;
  for (int l = 0; l < n_layers; ++l) r.push_back(l < 2 ? first : (l % 2 == 0 ? csa : hca));
  return r;
}

// Shared by the Flash and Pro presets (ds4-model-spec.md §1.1 and the official configs).
ModelConfig real_widths() {
  ModelConfig c;
  c.vocab_size = 129280;
  c.n_layers = 43;
  c.head_dim = 512;
  c.rope_dim = 64;
  c.o_lora_rank = 1024;
  c.window = 128;
  c.index_n_heads = 64;
  c.index_head_dim = 128;
  c.n_active_experts = 6;
  c.n_hash_layers = 3;
  c.yarn = YarnParams{16.0f, 65536, 32.0f, 1.0f};
  c.max_position = 1048576;
  return c;
}

ModelConfig preset(const std::string& name) {
  if (name == "tiny") {  // tests/data/tiny/config.json
    ModelConfig c;
    c.vocab_size = 0;  // filled in by synthetic_config
    c.dim = 64, c.n_layers = 6, c.n_heads = 4, c.head_dim = 32, c.rope_dim = 8, c.q_lora_rank = 32;
    c.o_groups = 2, c.o_lora_rank = 16, c.window = 8;
    c.index_n_heads = 8, c.index_head_dim = 16, c.index_topk = 3;
    c.n_experts = 8, c.n_active_experts = 2, c.moe_inter = 32, c.n_hash_layers = 3, c.route_scale = 1.5f;
    c.yarn = YarnParams{16.0f, 64, 32.0f, 1.0f};
    c.max_position = 1024;
    return c;
  }
  if (name == "flash") {  // tests/data/official-config/config.json
    ModelConfig c = real_widths();
    c.dim = 4096, c.n_heads = 64, c.q_lora_rank = 1024, c.o_groups = 8, c.index_topk = 512;
    c.n_experts = 256, c.moe_inter = 2048, c.route_scale = 1.5f;
    return c;
  }
  if (name == "pro") {  // tests/data/official-config/config-v4-pro.json
    ModelConfig c = real_widths();
    c.dim = 7168, c.n_layers = 61, c.n_heads = 128, c.q_lora_rank = 1536, c.o_groups = 16, c.index_topk = 1024;
    c.n_experts = 384, c.moe_inter = 3072, c.route_scale = 2.5f;
    return c;
  }
  fail("synthetic model: unknown preset '", name, "' (expected tiny, flash or pro)");
}

class SyntheticSource : public ModelSource {
 public:
  explicit SyntheticSource(const SyntheticSpec& spec)
      : quant_(synth::parse_quant(spec.quant)), seed_(spec.seed), device_fill_(spec.device_fill) {
    config_ = synthetic_config(spec);
    path_ = config_.source;
    std::vector<TensorSpec> specs = model_tensor_specs(config_, 0, config_.n_layers, true, true);
    if (spec.draft == "mtp") {
      const auto mtp = mtp_tensor_specs(config_, spec.draft_layout != "mtp0");
      specs.insert(specs.end(), mtp.begin(), mtp.end());
    } else if (spec.draft == "dspark") {
      const auto d = dspark_tensor_specs(config_, config_.dspark.stages);
      specs.insert(specs.end(), d.begin(), d.end());
    }
    for (auto& s : specs) {
      order_.push_back(s.name);
      index_.emplace(s.name, std::move(s));
    }
  }

  std::string format() const override { return "synthetic"; }
  uint64_t fingerprint() const override {  // the generator's parameters decide every weight
    const std::string id = cat(config_.summary(), "|quant ", static_cast<int>(quant_), "|seed ", seed_,
                               "|device ", device_fill_);
    uint64_t h = 1469598103934665603ull;
    for (const char ch : id) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
    return h;
  }

  std::vector<StoredTensor> stored_tensors() const override {
    std::vector<StoredTensor> out;
    for (const auto& name : order_) {
      const TensorSpec& s = index_.at(name);
      out.push_back({synth::gguf_name(s), storage_type(s), s.shape, stored_bytes(s)});
    }
    return out;
  }

  std::string storage_type(const TensorSpec& spec) const override {
    return index_.count(spec.name) ? synth::storage_of(spec, quant_).reported : "";
  }

  void check(const TensorSpec& spec) const override {
    auto it = index_.find(spec.name);
    HS_CHECK(it != index_.end(), path_, ": the synthetic model has no tensor ", spec.name);
    HS_CHECK(it->second.shape == spec.shape && it->second.role == spec.role, path_, ": tensor ", spec.name, ": shape ",
             shape_str(it->second.shape), ", expected ", shape_str(spec.shape));
  }

  std::vector<float> read_f32(const TensorSpec& spec) const override {
    check(spec);
    HS_CHECK(spec.role != TensorRole::TokenTable, "tensor ", spec.name, " is an integer table");
    const synth::TensorGen gen(spec, quant_, seed_);
    std::vector<float> out(static_cast<size_t>(spec.n_elements()));
    const auto fill = [&](int64_t b0, int64_t b1) {
      synth::BandScratch scratch;
      for (int64_t b = b0; b < b1; ++b) gen.band(b, out.data() + gen.band_first_row(b) * gen.cols(), nullptr, scratch);
    };
    if (spec.n_elements() < (int64_t{1} << 22)) {
      fill(0, gen.n_bands());
    } else {  // a Flash-sized tensor: seconds per core, so use them all
      ThreadPool pool;
      pool.parallel_for(gen.n_bands(), 1, fill);
    }
    return out;
  }

  NativeTensor native(const TensorSpec& spec) const override {
    if (!device_fill_ || (spec.role != TensorRole::Matrix && spec.role != TensorRole::Experts)) return {};
    check(spec);
    const synth::Storage st = synth::storage_of(spec, quant_);
    NativeTensor n;
    n.kind = NativeTensor::Kind::DeviceFill;
    n.type = st.reported == "F4_E2M1" ? GgmlType::MXFP4 : st.reported == "BF16" ? GgmlType::BF16 : st.gguf;
    n.fp8 = st.reported == "F8_E4M3";
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the name: the same fill in every build
    for (unsigned char ch : spec.name) h = (h ^ ch) * 1099511628211ull;
    n.seed = seed_ ^ h;
    return n;
  }

  std::vector<int32_t> read_i32(const TensorSpec& spec) const override {
    check(spec);
    HS_CHECK(spec.role == TensorRole::TokenTable, "tensor ", spec.name, " is not an integer table");
    return synth::gen_token_table(spec, config_.n_experts, seed_);
  }

 private:
  // Bytes in the reported storage (FP8: a byte per value; FP4: half a byte plus a scale per 32).
  uint64_t stored_bytes(const TensorSpec& s) const {
    const synth::Storage st = synth::storage_of(s, quant_);
    const auto n = static_cast<uint64_t>(s.n_elements());
    if (st.reported == "F8_E4M3") return n;
    if (st.reported == "F4_E2M1") return n / 2 + n / 32;
    if (st.reported == "BF16") return 2 * n;
    return static_cast<uint64_t>(ggml_row_bytes(st.gguf, s.shape.back())) * (n / static_cast<uint64_t>(s.shape.back()));
  }

  synth::Quant quant_;
  uint64_t seed_;
  bool device_fill_ = false;
  std::vector<std::string> order_;
  std::unordered_map<std::string, TensorSpec> index_;
};

}  // namespace

ModelConfig synthetic_config(const SyntheticSpec& spec) {
  ModelConfig c = preset(spec.preset);
  synth::parse_quant(spec.quant);  // reject a bad quant name early
  if (spec.layers != -1) {
    HS_CHECK(spec.layers >= 1 && spec.layers <= 1000, "synthetic model: layers = ", spec.layers,
             " (expected 1..1000, or -1 for the preset's ", c.n_layers, ")");
    c.n_layers = spec.layers;
  }
  const bool tiny = spec.preset == "tiny";
  c.compress_ratios = ratio_schedule(c.n_layers, spec.preset == "pro" ? 128 : 0, 4, tiny ? 8 : 128);
  c.n_hash_layers = std::min(c.n_hash_layers, c.n_layers);
  if (spec.vocab != -1) {
    HS_CHECK(spec.vocab >= 1 && spec.vocab < (int64_t{1} << 31), "synthetic model: vocab = ", spec.vocab,
             " (expected a positive size, or -1 for the preset's)");
    c.vocab_size = spec.vocab;
  } else if (tiny) {
    c.vocab_size = synthetic_tokenizer_size();
  }
  HS_CHECK(spec.draft.empty() || spec.draft == "mtp" || spec.draft == "dspark", "synthetic model: draft '",
           spec.draft, "' is not a drafter synth can make (expected mtp or dspark)");
  HS_CHECK(spec.draft_layout == "nextn" || spec.draft_layout == "nextn-counted" || spec.draft_layout == "mtp0",
           "synthetic model: draft layout '", spec.draft_layout, "' (expected nextn, nextn-counted or mtp0)");
  if (spec.draft == "mtp") {
    c.n_mtp_layers = 1;
    c.mtp_ratio = 0;  // Flash and Pro: the MTP block is SWA-only
  } else if (spec.draft == "dspark") {
    // V4-Flash-0731's drafter (docs/speculative.md): 3 stages, blocks of 5, the last three
    // layers tapped, rank 256, noise token 128799; the tiny preset at rank 8.
    c.dspark.stages = 3;
    c.dspark.block = 5;
    c.dspark.markov_rank = tiny ? 8 : 256;
    c.dspark.noise_token = c.vocab_size > 128799 ? 128799 : static_cast<int>(c.vocab_size - 1);
    for (int l = std::max(0, c.n_layers - 3); l < c.n_layers; ++l) c.dspark.target_layers.push_back(l);
    c.validate_dspark(c.dspark.stages, "synthetic model: ");
  }
  c.source = cat("synthetic:", spec.preset, "/", spec.quant, "/seed=", spec.seed);
  c.validate();
  return c;
}

std::string synthetic_model_name(const SyntheticSpec& spec) {
  return cat("synthetic-", spec.preset, "-", synthetic_config(spec).n_layers, "L-", spec.quant);
}

SyntheticStorage synthetic_storage(const TensorSpec& spec, const std::string& quant) {
  synth::Storage s = synth::storage_of(spec, synth::parse_quant(quant));
  return {s.gguf, s.reported};
}

std::unique_ptr<ModelSource> make_synthetic_source(const SyntheticSpec& spec) {
  return std::make_unique<SyntheticSource>(spec);
}

SyntheticSpec builtin_spec() {
  SyntheticSpec s;
  s.seed = kBuiltinSeed;
  return s;
}

std::unique_ptr<ModelSource> builtin_source() { return make_synthetic_source(builtin_spec()); }

Tokenizer builtin_tokenizer() { return make_synthetic_tokenizer(); }

}  // namespace hs
