// GGUF sources (general.architecture = deepseek4): llama.cpp / Unsloth / antirez / Lucebox
// files and our own exports. Tensor names are the canonical names plus ".weight" (".bias"
// for exp_probs_b); a bare name is accepted too. Shapes are GGUF ne (innermost first).
#include <cstring>

#include "format/gguf.h"
#include "format/quants.h"
#include "model/source.h"
#include "util/error.h"

namespace hs {

namespace {

bool is_plain_float(GgmlType t) { return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16; }

class GgufSource : public ModelSource {
 public:
  explicit GgufSource(const std::string& path) : f_(path) {
    path_ = path;
    config_ = config_from_gguf(f_);
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
    HS_CHECK(t, path_, ": missing tensor ", spec.name, ".weight");
    std::vector<int64_t> shape(t->ne.rbegin(), t->ne.rend());
    HS_CHECK(shape == spec.shape, path_, ": tensor ", t->name, ": shape ", shape_str(shape), " (ne reversed), expected ",
             shape_str(spec.shape));
    switch (spec.role) {
      case TensorRole::TokenTable:
        HS_CHECK(t->type == GgmlType::I32, path_, ": tensor ", t->name, ": type ", ggml_type_name(t->type),
                 ", expected I32");
        break;
      case TensorRole::Vector:
      case TensorRole::HcFn:
        HS_CHECK(is_plain_float(t->type), path_, ": tensor ", t->name, ": type ", ggml_type_name(t->type),
                 ", expected F32, F16 or BF16");
        break;
      case TensorRole::Matrix:
      case TensorRole::Experts:
        HS_CHECK(type_has_dequantizer(t->type), path_, ": tensor ", t->name, ": type ", ggml_type_name(t->type),
                 " is not supported for weight matrices");
        break;
    }
  }

  std::vector<float> read_f32(const TensorSpec& spec) const override {
    check(spec);
    const gguf::TensorInfo* t = find(spec);
    HS_CHECK(spec.role != TensorRole::TokenTable, "tensor ", spec.name, " is an integer table");
    std::vector<float> out(static_cast<size_t>(spec.n_elements()));
    const int64_t row = t->ne[0], rows = spec.n_elements() / row;
    const int64_t row_bytes = ggml_row_bytes(t->type, row);
    const uint8_t* data = f_.tensor_data(*t);
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t->type, data + r * row_bytes, out.data() + r * row, row);
    return out;
  }

  std::vector<int32_t> read_i32(const TensorSpec& spec) const override {
    check(spec);
    const gguf::TensorInfo* t = find(spec);
    HS_CHECK(spec.role == TensorRole::TokenTable, "tensor ", spec.name, " is not an integer table");
    std::vector<int32_t> out(static_cast<size_t>(spec.n_elements()));
    std::memcpy(out.data(), f_.tensor_data(*t), out.size() * 4);
    for (size_t i = 0; i < out.size(); ++i)
      HS_CHECK(out[i] >= 0 && out[i] < config_.n_experts, path_, ": tensor ", t->name, ": entry ", i, " = ", out[i],
               " is not an expert id in [0, ", config_.n_experts, ")");
    return out;
  }

  const gguf::File& file() const { return f_; }

 private:
  const gguf::TensorInfo* find(const TensorSpec& spec) const {
    for (const char* suffix : {".weight", ".bias", ""})
      if (const auto* t = f_.find_tensor(spec.name + suffix)) return t;
    return nullptr;
  }

  gguf::File f_;
};

}  // namespace

std::unique_ptr<ModelSource> open_gguf_source(const std::string& path) { return std::make_unique<GgufSource>(path); }

}  // namespace hs
