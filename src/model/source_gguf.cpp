// GGUF sources (general.architecture = deepseek4): llama.cpp / Unsloth / antirez / Lucebox
// files and our own exports (gguf-ds4.md §1-2, quant-formats.md §5). Tensor names are the
// canonical names plus ".weight" (".bias" for exp_probs_b); a bare name is accepted too.
// Shapes are GGUF ne (innermost first). Tensors outside the inventory (an MTP block as
// blk.43.* or mtp.0.*) are read only by the drafter (mtp_specs); extra metadata tensors are ignored. Vectors and HC projections may be
// F32, F16 or BF16; tid2eid I32 (or I64); matrices and experts any type with a dequantizer.
#include <cstring>

#include "format/gguf.h"
#include "format/quants.h"
#include "model/source.h"
#include "model/dspark_tensors.h"
#include "util/error.h"
#include "util/mmap.h"

namespace hs {

namespace {

bool is_plain_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

// "F32, F16, BF16, Q4_0, ...": every GGML type hyperstream can read weights from.
std::string readable_types() {
  std::string s;
  for (uint32_t id = 0; id < 256; ++id)
    if (auto info = ggml_type_info(id); info && type_has_dequantizer(info->type))
      s += cat(s.empty() ? "" : ", ", info->name, " (", id, ")");
  return s;
}

class GgufSource : public ModelSource {
 public:
  explicit GgufSource(const std::string& path) : f_(path) {
    path_ = path;
    config_ = config_from_gguf(f_);
    find_dspark();
  }
  // A drafter file for `main` (an MTP-only GGUF): its tensors are read under main's config, and
  // what its metadata says about the model it was made for must be main.
  GgufSource(const std::string& path, const ModelConfig& main) : f_(path) {
    path_ = path;
    config_ = main;
    check_drafter_metadata();
    // A DSpark drafter file's own keys (ours under deepseek4., or under its architecture's prefix).
    config_.dspark = DsparkConfig{};
    read_dspark_keys(f_, "deepseek4.", config_.dspark);
    if (f_.has("general.architecture")) read_dspark_keys(f_, f_.get_string("general.architecture") + ".", config_.dspark);
    find_dspark();
  }

  std::string format() const override { return "gguf"; }

  std::vector<StoredTensor> stored_tensors() const override {
    std::vector<StoredTensor> out;
    for (const auto& t : f_.tensors()) {
      std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
      out.push_back({t.name, ggml_type_name(t.type), shape, t.nbytes});
    }
    return out;
  }

  std::string storage_type(const TensorSpec& spec) const override {
    const gguf::TensorInfo* t = find(spec);
    return t ? ggml_type_name(t->type) : "";
  }

  void check(const TensorSpec& spec) const override {
    const gguf::TensorInfo* t = find(spec);
    if (!t && spec.name.rfind("dspark.", 0) == 0) {
      std::string tried;
      for (const std::string& n : dspark_gguf_names(spec.name, config_.dspark.stages, lucebox_))
        tried += (tried.empty() ? "" : ", ") + n;
      fail(path_, ": missing DSpark tensor ", spec.name, " (looked for ", tried, ")");
    }
    if (!t && spec.name.rfind("mtp.", 0) == 0) {
      std::string tried;
      for (const std::string& n : mtp_gguf_names(spec.name, config_.n_layers)) tried += (tried.empty() ? "" : ", ") + n;
      fail(path_, ": missing MTP tensor ", spec.name, " (looked for ", tried, ")");
    }
    HS_CHECK(t, path_, ": missing tensor ", spec.name, spec.name.ends_with("exp_probs_b") ? ".bias" : ".weight");
    std::vector<int64_t> shape(t->ne.rbegin(), t->ne.rend());
    HS_CHECK(shape == spec.shape, path_, ": tensor ", t->name, ": shape ", shape_str(shape), " (ne reversed), expected ",
             shape_str(spec.shape));
    const auto bad_type = [&](const char* expected) {
      fail(path_, ": tensor ", t->name, ": type ", ggml_type_name(t->type), ", expected ", expected);
    };
    switch (spec.role) {
      case TensorRole::TokenTable:
        if (t->type != GgmlType::I32 && t->type != GgmlType::I64) bad_type("I32 (or I64)");
        break;
      case TensorRole::Vector:
      case TensorRole::HcFn:
        if (!is_plain_float(t->type)) bad_type("F32, F16 or BF16");
        break;
      case TensorRole::Matrix:
      case TensorRole::Experts:
        if (!type_has_dequantizer(t->type)) bad_type("a weight type with a dequantizer (see docs/formats.md)");
        break;
    }
  }

  std::vector<float> read_f32(const TensorSpec& spec) const override {
    check(spec);
    HS_CHECK(spec.role != TensorRole::TokenTable, "tensor ", spec.name, " is an integer table");
    const gguf::TensorInfo* t = find(spec);
    std::vector<float> out(static_cast<size_t>(spec.n_elements()));
    dequantize_rows(*t, f_.tensor_data(*t), out.data(), spec.n_elements() / t->ne[0]);
    return out;
  }

  std::vector<float> read_expert_f32(const TensorSpec& spec, int64_t expert) const override {
    check(spec);
    HS_CHECK(spec.role == TensorRole::Experts && expert >= 0 && expert < spec.shape[0], "tensor ", spec.name,
             ": no expert ", expert, " (", shape_str(spec.shape), ")");
    const gguf::TensorInfo* t = find(spec);
    const int64_t rows = spec.shape[1];
    std::vector<float> out(static_cast<size_t>(rows * spec.shape[2]));
    const uint64_t bytes = static_cast<uint64_t>(ggml_row_bytes(t->type, t->ne[0]) * rows);
    dequantize_rows(*t, f_.tensor_data(*t) + static_cast<uint64_t>(expert) * bytes, out.data(), rows);
    return out;
  }

  std::vector<int32_t> read_i32(const TensorSpec& spec) const override {
    check(spec);
    const gguf::TensorInfo* t = find(spec);
    HS_CHECK(spec.role == TensorRole::TokenTable, "tensor ", spec.name, " is not an integer table");
    std::vector<int32_t> out(static_cast<size_t>(spec.n_elements()));
    const uint8_t* data = f_.tensor_data(*t);
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v = 0;
      if (t->type == GgmlType::I64) {
        std::memcpy(&v, data + 8 * i, 8);
      } else {
        int32_t x;
        std::memcpy(&x, data + 4 * i, 4);
        v = x;
      }
      HS_CHECK(v >= 0 && v < config_.n_experts, path_, ": tensor ", t->name, ": entry ", i, " = ", v,
               " is not an expert id in [0, ", config_.n_experts, ")");
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  }

  NativeTensor native(const TensorSpec& spec) const override {
    if (spec.role != TensorRole::Matrix && spec.role != TensorRole::Experts) return {};
    check(spec);
    const gguf::TensorInfo* t = find(spec);
    NativeTensor n;
    n.kind = NativeTensor::Kind::Gguf;
    n.type = t->type;
    n.data = f_.tensor_data(*t);
    n.nbytes = t->nbytes;
    return n;
  }

  std::optional<RawGgufTensor> raw_gguf(const TensorSpec& spec) const override {
    check(spec);
    const gguf::TensorInfo* t = find(spec);
    return RawGgufTensor{t->type, f_.tensor_data(*t), t->nbytes};
  }

 private:
  void check_drafter_metadata() {
    const std::string p = "deepseek4.";
    if (f_.has("general.architecture")) {
      const std::string arch = f_.get_string("general.architecture");
      HS_CHECK(arch == "deepseek4" || arch == "deepseek4-dflash-draft", path_, ": general.architecture is '", arch,
               "', not a DeepSeek-V4 drafter");
    }
    const ModelConfig& c = config_;
    const std::pair<const char*, int64_t> keys[] = {
        {"embedding_length", c.dim},           {"vocab_size", c.vocab_size},
        {"attention.head_count", c.n_heads},   {"attention.key_length", c.head_dim},
        {"attention.q_lora_rank", c.q_lora_rank}, {"attention.output_lora_rank", c.o_lora_rank},
        {"attention.output_group_count", c.o_groups}, {"attention.sliding_window", c.window},
        {"expert_count", c.n_experts},         {"expert_feed_forward_length", c.moe_inter},
        {"hyper_connection.count", c.hc_mult}, {"rope.dimension_count", c.rope_dim}};
    for (const auto& [k, want] : keys) {
      if (!f_.has(p + k)) continue;
      const int64_t got = static_cast<int64_t>(f_.get_u64(p + k));
      HS_CHECK(got == want, path_, ": this drafter was made for another model: ", p, k, " = ", got,
               ", the model has ", want);
    }
    if (f_.has("tokenizer.ggml.tokens")) {
      const auto n = static_cast<int64_t>(f_.get_string_array("tokenizer.ggml.tokens").size());
      HS_CHECK(n == c.vocab_size, path_, ": this drafter was made for another model: its vocabulary has ", n,
               " tokens, the model's ", c.vocab_size);
    }
    // llama.cpp's MTP-only file holds the block as its last block (block_count = layers + 1).
    if (f_.has(p + "block_count")) {
      const int64_t blocks = static_cast<int64_t>(f_.get_u64(p + "block_count"));
      // A DSpark drafter taps the model's layers by index: it is made for one layer count.
      if (f_.find_tensor("mtp.0.main_proj.weight"))
        HS_CHECK(blocks == c.n_layers, path_, ": this drafter was made for another model: its DSpark taps are for ",
                 blocks, " layers, the model has ", c.n_layers);
      if (f_.find_tensor(cat("blk.", blocks - 1, ".nextn.eh_proj.weight")))
        HS_CHECK(blocks - 1 == c.n_layers, path_, ": this drafter was made for another model: its MTP block is layer ",
                 blocks - 1, ", the model has ", c.n_layers, " layers");
    }
    if (f_.has(p + "attention.compress_ratios")) {
      const auto r = f_.get_int_array(p + "attention.compress_ratios");
      if (static_cast<int>(r.size()) > c.n_layers) config_.mtp_ratio = static_cast<int>(r[static_cast<size_t>(c.n_layers)]);
    }
  }

  // MTP tensors ("mtp.*") are looked up under every layout GGUFs use (mtp_gguf_names).
  const gguf::TensorInfo* find(const TensorSpec& spec) const {
    const bool dspark = spec.name.rfind("dspark.", 0) == 0;
    for (const std::string& name : dspark ? dspark_gguf_names(spec.name, config_.dspark.stages, lucebox_)
                                          : mtp_gguf_names(spec.name, config_.n_layers))
      for (const char* suffix : {".weight", ".bias", ""})
        if (const auto* t = f_.find_tensor(name + suffix)) return t;
    return nullptr;
  }

  // Which DSpark layout the file has (Lucebox's when dflash.fc is there) and, where its keys
  // do not say, how many stages: the stage blocks stored, counted from 0.
  void find_dspark() {
    lucebox_ = f_.find_tensor("dflash.fc.weight") != nullptr;
    if (!config_.dspark.any() || config_.dspark.stages > 0) return;
    int s = 0;
    while (s < 16 && f_.find_tensor(cat(lucebox_ ? "blk." : "mtp.", s, ".attn_q_a.weight"))) ++s;
    config_.dspark.stages = s;
  }

  // Errors from the block decoders (a ROCm NaN scale byte) get the tensor and row named.
  void dequantize_rows(const gguf::TensorInfo& t, const uint8_t* data, float* out, int64_t rows) const {
    const int64_t row = t.ne[0], row_bytes = ggml_row_bytes(t.type, row);
    int64_t r = 0;
    try {
      for (; r < rows; ++r) dequantize_row(t.type, data + r * row_bytes, out + r * row, row);
    } catch (const Error& e) {
      fail(path_, ": tensor ", t.name, ": row ", r, ": ", e.what());
    }
  }

  gguf::File f_;
  bool lucebox_ = false;  // DSpark tensors under Lucebox's names (find_dspark)
};

}  // namespace

std::unique_ptr<ModelSource> open_gguf_drafter(const std::string& path, const ModelConfig& main) {
  HS_CHECK(file_exists(path), "drafter ", path, " does not exist");
  return std::make_unique<GgufSource>(path, main);
}

std::unique_ptr<ModelSource> open_gguf_source(const std::string& path) {
  try {
    return std::make_unique<GgufSource>(path);
  } catch (const Error& e) {
    // The reader names the tensor and the id it found; say which ids would have been read.
    const std::string what = e.what();
    if (what.find("unknown GGML type id") != std::string::npos)
      fail(what, "; expected one of ", readable_types(), ", or I32/I64 for tid2eid");
    throw;
  }
}

}  // namespace hs
