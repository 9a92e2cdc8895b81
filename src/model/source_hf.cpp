// HF directory sources: config.json + safetensors, in HF-transformers naming (F32/BF16/F16,
// fused expert tensors) or official DeepSeek naming (FP8 e4m3 with 128x128 E8M0 block
// scales, FP4 e2m1 experts packed in I8 with per-32 E8M0 scales, BF16/F32 rest).
#include <cmath>
#include <cstring>

#include "format/quants.h"
#include "format/safetensors.h"
#include "model/source.h"
#include "util/error.h"
#include "util/fp.h"

namespace hs {

namespace {

using st::DType;

bool is_float_dtype(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }

void plain_to_f32(const st::Tensor& t, float* out, int64_t n) {
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case DType::F32: std::memcpy(out, p, static_cast<size_t>(n) * 4); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = f16_to_f32(v); }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) { uint16_t v; std::memcpy(&v, p + 2 * i, 2); out[i] = bf16_to_f32(v); }
      return;
    default: fail(t.file, ": tensor ", t.name, ": dtype ", st::dtype_name(t.dtype), " is not a float type");
  }
}

float scale_at(const st::Tensor& s, int64_t idx) {
  if (s.dtype == DType::F8_E8M0) return e8m0_to_f32(s.data[idx]);
  if (s.dtype == DType::F32) { float v; std::memcpy(&v, s.data + 4 * idx, 4); return v; }
  fail(s.file, ": scale tensor ", s.name, ": dtype ", st::dtype_name(s.dtype), ", expected F8_E8M0 or F32");
}

std::string shape_of(const st::Tensor& t) { return shape_str(t.shape); }

class HfSource : public ModelSource {
 public:
  explicit HfSource(const std::string& dir) : st_(dir) {
    path_ = dir;
    config_ = config_from_hf_dir(dir);
    if (st_.find("embed.weight") || st_.find("layers.0.attn.wq_a.weight")) official_ = true;
    else if (!st_.find("model.embed_tokens.weight") && !st_.find("model.layers.0.self_attn.q_a_proj.weight"))
      fail(dir, ": neither HF-transformers names (model.embed_tokens.weight) nor official DeepSeek names "
                "(embed.weight) found in the safetensors");
    // The DSpark stages (their count is not in config.json): mtp.0, mtp.1, ... that hold a block.
    if (official_ && config_.dspark.any() && config_.dspark.stages == 0) {
      int s = 0;
      while (s < 16 && st_.find(cat("mtp.", s, ".attn.wq_a.weight"))) ++s;
      config_.dspark.stages = s;
    }
  }

  std::string format() const override { return official_ ? "official" : "hf"; }

  std::vector<StoredTensor> stored_tensors() const override {
    std::vector<StoredTensor> out;
    for (const auto& n : st_.names()) {
      const auto& t = st_.get(n);
      out.push_back({n, st::dtype_name(t.dtype), t.shape, t.nbytes});
    }
    return out;
  }

  std::string storage_type(const TensorSpec& spec) const override {
    const st::Tensor* t = st_.find(stored_name(spec, 0));
    return t ? st::dtype_name(t->dtype) : "";
  }

  void check(const TensorSpec& spec) const override {
    if (spec.role == TensorRole::Experts) {
      if (official_) {
        for (int64_t e = 0; e < spec.shape[0]; ++e) check_matrix(stored_name(spec, e), {spec.shape[1], spec.shape[2]}, true);
      } else {
        // HF fuses gate and up as [E, 2I, D] (gate rows first); down is [E, D, I].
        const st::Tensor& t = get(spec.hf);
        const bool fused = spec.name.find("down_exps") == std::string::npos;
        std::vector<int64_t> want = {spec.shape[0], fused ? 2 * spec.shape[1] : spec.shape[1], spec.shape[2]};
        HS_CHECK(t.shape == want, t.file, ": tensor ", t.name, ": shape ", shape_of(t), ", expected ",
                 shape_str(want), " (for ", spec.name, ")");
        HS_CHECK(is_float_dtype(t.dtype), t.file, ": tensor ", t.name, ": dtype ", st::dtype_name(t.dtype),
                 ", expected F32, F16 or BF16");
      }
      return;
    }
    const std::string name = stored_name(spec, 0);
    if (spec.role == TensorRole::TokenTable) {
      const st::Tensor& t = get(name);
      HS_CHECK(t.dtype == DType::I32 || t.dtype == DType::I64, t.file, ": tensor ", name, ": dtype ",
               st::dtype_name(t.dtype), ", expected I32 or I64");
      HS_CHECK(t.shape == spec.shape, t.file, ": tensor ", name, ": shape ", shape_of(t), ", expected ",
               shape_str(spec.shape));
      return;
    }
    if (spec.role == TensorRole::Matrix) {
      check_matrix(name, spec.shape, false);
      return;
    }
    const st::Tensor& t = get(name);
    HS_CHECK(is_float_dtype(t.dtype), t.file, ": tensor ", name, ": dtype ", st::dtype_name(t.dtype),
             ", expected F32, F16 or BF16");
    HS_CHECK(t.shape == spec.shape, t.file, ": tensor ", name, ": shape ", shape_of(t), ", expected ",
             shape_str(spec.shape));
  }

  std::vector<float> read_f32(const TensorSpec& spec) const override {
    check(spec);
    std::vector<float> out(static_cast<size_t>(spec.n_elements()));
    if (spec.role == TensorRole::Experts) {
      const int64_t per = spec.shape[1] * spec.shape[2];
      if (official_) {
        for (int64_t e = 0; e < spec.shape[0]; ++e)
          read_matrix(stored_name(spec, e), spec.shape[1], spec.shape[2], out.data() + e * per);
      } else {
        const st::Tensor& t = get(spec.hf);
        const int64_t rows_total = t.shape[1], cols = t.shape[2];
        std::vector<float> all(static_cast<size_t>(t.n_elements()));
        plain_to_f32(t, all.data(), t.n_elements());
        for (int64_t e = 0; e < spec.shape[0]; ++e)
          std::memcpy(out.data() + e * per, all.data() + (e * rows_total + spec.hf_rows_begin) * cols,
                      static_cast<size_t>(per) * 4);
      }
      return out;
    }
    if (spec.role == TensorRole::Matrix) {
      read_matrix(stored_name(spec, 0), spec.shape[0], spec.shape[1], out.data());
      return out;
    }
    HS_CHECK(spec.role != TensorRole::TokenTable, "tensor ", spec.name, " is an integer table");
    plain_to_f32(get(stored_name(spec, 0)), out.data(), spec.n_elements());
    return out;
  }

  std::vector<float> read_expert_f32(const TensorSpec& spec, int64_t e) const override {
    HS_CHECK(spec.role == TensorRole::Experts && e >= 0 && e < spec.shape[0], "tensor ", spec.name, ": no expert ", e,
             " (", shape_str(spec.shape), ")");
    const int64_t rows = spec.shape[1], cols = spec.shape[2];
    std::vector<float> out(static_cast<size_t>(rows * cols));
    if (official_) {
      check_matrix(stored_name(spec, e), {rows, cols}, true);
      read_matrix(stored_name(spec, e), rows, cols, out.data());
      return out;
    }
    check(spec);
    const st::Tensor& t = get(spec.hf);  // [E, rows_total, cols]: this expert's rows are contiguous
    st::Tensor part = t;
    const int64_t first = e * t.shape[1] + spec.hf_rows_begin;
    part.data += first * cols * static_cast<int64_t>(st::dtype_size(t.dtype));
    plain_to_f32(part, out.data(), rows * cols);
    return out;
  }

  std::optional<Fp4Matrix> fp4_expert(const TensorSpec& spec, int64_t e) const override {
    if (!official_ || spec.role != TensorRole::Experts || e < 0 || e >= spec.shape[0]) return std::nullopt;
    const std::string name = stored_name(spec, e);
    const st::Tensor* t = st_.find(name);
    const st::Tensor* s = st_.find(scale_name(name));
    if (!t || !s || (t->dtype != DType::I8 && t->dtype != DType::U8) || s->dtype != DType::F8_E8M0) return std::nullopt;
    check_matrix(name, {spec.shape[1], spec.shape[2]}, true);  // shapes of codes and scales
    return Fp4Matrix{t->data, s->data, spec.shape[1], spec.shape[2]};
  }

  NativeTensor native(const TensorSpec& spec) const override {
    if (spec.role != TensorRole::Matrix && spec.role != TensorRole::Experts) return {};
    check(spec);
    if (spec.role == TensorRole::Matrix) return native_matrix(stored_name(spec, 0), spec.shape[0], spec.shape[1]);
    const int64_t E = spec.shape[0], rows = spec.shape[1], cols = spec.shape[2];
    if (!official_) {
      // HF experts: down [E, D, I] is the stack as is; gate/up are fused [E, 2I, D].
      const st::Tensor& t = get(spec.hf);
      const GgmlType type = plain_type(t.dtype);
      const size_t es = st::dtype_size(t.dtype), row_bytes = static_cast<size_t>(cols) * es;
      if (t.shape[1] == rows) return plain(type, t.data, static_cast<uint64_t>(E * rows) * row_bytes);
      auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(E * rows) * row_bytes);
      for (int64_t e = 0; e < E; ++e)
        std::memcpy(buf->data() + static_cast<size_t>(e * rows) * row_bytes,
                    t.data + static_cast<size_t>(e * t.shape[1] + spec.hf_rows_begin) * row_bytes,
                    static_cast<size_t>(rows) * row_bytes);
      return owned(type, std::move(buf));
    }
    // Official experts are one tensor each: assemble the stack in the first expert's form.
    if (fp4_expert(spec, 0)) {
      const int64_t blocks = rows * cols / 32;
      auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(E * blocks * 17));
      for (int64_t e = 0; e < E; ++e) {
        const std::optional<Fp4Matrix> m = fp4_expert(spec, e);
        HS_CHECK(m, path_, ": expert ", e, " of ", spec.name, " is not FP4 like expert 0");
        repack_fp4_to_mxfp4(m->codes, m->scales, buf->data() + e * blocks * 17, rows * cols);
      }
      return owned(GgmlType::MXFP4, std::move(buf));
    }
    std::vector<NativeTensor> parts;
    for (int64_t e = 0; e < E; ++e) {
      parts.push_back(native_matrix(stored_name(spec, e), rows, cols));
      if (!parts.back() || parts.back().kind != parts.front().kind || parts.back().type != parts.front().type ||
          (parts.back().kind == NativeTensor::Kind::Fp8Block && rows % 128 != 0))
        return {};  // mixed storage (or FP8 blocks that straddle experts): f32 instead
    }
    const size_t per = parts.front().nbytes;
    const size_t per_scales = parts.front().kind == NativeTensor::Kind::Fp8Block
                                  ? static_cast<size_t>((rows / 128) * ((cols + 127) / 128)) : 0;
    auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(E) * (per + per_scales));
    for (int64_t e = 0; e < E; ++e) {
      std::memcpy(buf->data() + e * per, parts[static_cast<size_t>(e)].data, per);
      if (per_scales) std::memcpy(buf->data() + E * per + e * per_scales, parts[static_cast<size_t>(e)].scales, per_scales);
    }
    NativeTensor n = owned(parts.front().type, std::move(buf));
    n.kind = parts.front().kind;
    n.nbytes = static_cast<uint64_t>(E) * per;
    if (per_scales) n.scales = n.data + n.nbytes;
    return n;
  }

  std::vector<int32_t> read_i32(const TensorSpec& spec) const override {
    check(spec);
    HS_CHECK(spec.role == TensorRole::TokenTable, "tensor ", spec.name, " is not an integer table");
    const st::Tensor& t = get(stored_name(spec, 0));
    std::vector<int32_t> out(static_cast<size_t>(spec.n_elements()));
    for (int64_t i = 0; i < spec.n_elements(); ++i) {
      int64_t v;
      if (t.dtype == DType::I32) { int32_t x; std::memcpy(&x, t.data + 4 * i, 4); v = x; }
      else std::memcpy(&v, t.data + 8 * i, 8);
      HS_CHECK(v >= 0 && v < config_.n_experts, t.file, ": tensor ", t.name, ": entry ", i, " = ", v,
               " is not an expert id in [0, ", config_.n_experts, ")");
      out[static_cast<size_t>(i)] = static_cast<int32_t>(v);
    }
    return out;
  }

 private:
  std::string stored_name(const TensorSpec& spec, int64_t expert) const {
    if (!official_) return spec.hf;
    if (spec.role != TensorRole::Experts) return spec.official;
    std::string n = spec.official;
    n.replace(n.find("{e}"), 3, std::to_string(expert));
    return n + ".weight";
  }

  const st::Tensor& get(const std::string& name) const {
    const st::Tensor* t = st_.find(name);
    HS_CHECK(t, path_, ": missing tensor ", name);
    return *t;
  }

  static std::string scale_name(const std::string& weight_name) {
    return weight_name.substr(0, weight_name.size() - std::strlen("weight")) + "scale";
  }

  // A matrix [rows, cols]: plain float, FP8 e4m3 + 128x128 block scale, or (experts) FP4 in I8.
  void check_matrix(const std::string& name, const std::vector<int64_t>& shape, bool expert) const {
    const st::Tensor& t = get(name);
    const int64_t rows = shape[0], cols = shape[1];
    if (is_float_dtype(t.dtype)) {
      HS_CHECK(t.shape == shape, t.file, ": tensor ", name, ": shape ", shape_of(t), ", expected ", shape_str(shape));
      return;
    }
    if (t.dtype == DType::F8_E4M3) {
      HS_CHECK(t.shape == shape, t.file, ": tensor ", name, ": shape ", shape_of(t), ", expected ", shape_str(shape));
      const st::Tensor& s = get(scale_name(name));
      std::vector<int64_t> want = {(rows + 127) / 128, (cols + 127) / 128};
      HS_CHECK(s.shape == want, s.file, ": tensor ", s.name, ": shape ", shape_of(s), ", expected ",
               shape_str(want), " (128x128 blocks of ", name, ")");
      scale_at(s, 0);
      return;
    }
    if ((t.dtype == DType::I8 || t.dtype == DType::U8) && expert) {
      HS_CHECK(cols % 32 == 0, t.file, ": tensor ", name, ": FP4 needs the input width ", cols,
               " to be a multiple of 32");
      std::vector<int64_t> packed = {rows, cols / 2};
      HS_CHECK(t.shape == packed, t.file, ": tensor ", name, ": shape ", shape_of(t), ", expected ",
               shape_str(packed), " (FP4 e2m1, two per byte, of a ", shape_str(shape), " matrix)");
      const st::Tensor& s = get(scale_name(name));
      std::vector<int64_t> want = {rows, cols / 32};
      HS_CHECK(s.shape == want, s.file, ": tensor ", s.name, ": shape ", shape_of(s), ", expected ",
               shape_str(want), " (per-32 scales of ", name, ")");
      scale_at(s, 0);
      return;
    }
    fail(t.file, ": tensor ", name, ": dtype ", st::dtype_name(t.dtype), " is not allowed here (expected ",
         expert ? "F32/F16/BF16, F8_E4M3 + scale or FP4-in-I8 + scale" : "F32/F16/BF16 or F8_E4M3 + scale", ")");
  }

  static GgmlType plain_type(DType d) {
    return d == DType::F32 ? GgmlType::F32 : d == DType::F16 ? GgmlType::F16 : GgmlType::BF16;
  }
  static NativeTensor plain(GgmlType type, const uint8_t* data, uint64_t nbytes) {
    NativeTensor n;
    n.kind = NativeTensor::Kind::Gguf;
    n.type = type;
    n.data = data;
    n.nbytes = nbytes;
    return n;
  }
  static NativeTensor owned(GgmlType type, std::shared_ptr<std::vector<uint8_t>> buf) {
    NativeTensor n = plain(type, buf->data(), buf->size());
    n.owned = std::move(buf);
    return n;
  }

  // A matrix in stored form: plain float rows, or FP8 e4m3 with e8m0 block scales (F32 scales
  // that are powers of two convert; others make the matrix go through f32).
  NativeTensor native_matrix(const std::string& name, int64_t rows, int64_t cols) const {
    const st::Tensor& t = get(name);
    if (is_float_dtype(t.dtype))
      return plain(plain_type(t.dtype), t.data, static_cast<uint64_t>(rows * cols) * st::dtype_size(t.dtype));
    if (t.dtype != DType::F8_E4M3) return {};
    const st::Tensor& s = get(scale_name(name));
    NativeTensor n;
    n.kind = NativeTensor::Kind::Fp8Block;
    n.type = GgmlType::F32;
    n.data = t.data;
    n.nbytes = static_cast<uint64_t>(rows * cols);
    if (s.dtype == DType::F8_E8M0) {
      n.scales = s.data;
      return n;
    }
    const int64_t count = ((rows + 127) / 128) * ((cols + 127) / 128);
    auto buf = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const float v = scale_at(s, i);
      int e = 0;
      if (!(v > 0.0f) || std::frexp(v, &e) != 0.5f || e - 1 < -127 || e - 1 > 127) return {};
      (*buf)[static_cast<size_t>(i)] = static_cast<uint8_t>(e - 1 + 127);
    }
    n.scales = buf->data();
    n.owned = std::move(buf);
    return n;
  }

  void read_matrix(const std::string& name, int64_t rows, int64_t cols, float* out) const {
    const st::Tensor& t = get(name);
    if (is_float_dtype(t.dtype)) {
      plain_to_f32(t, out, rows * cols);
      return;
    }
    const st::Tensor& s = get(scale_name(name));
    if (t.dtype == DType::F8_E4M3) {
      dequantize_fp8_block128(t.data, rows, cols, [&](int64_t b) { return scale_at(s, b); }, out);
      return;
    }
    // FP4 e2m1: element 2j in the low nibble, 2j+1 in the high nibble, one scale per 32.
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        uint8_t byte = t.data[r * (cols / 2) + c / 2];
        uint8_t nib = (c & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 15);
        out[r * cols + c] = e2m1_to_f32(nib) * scale_at(s, r * (cols / 32) + c / 32);
      }
  }

  st::Collection st_;
  bool official_ = false;
};

}  // namespace

std::unique_ptr<ModelSource> open_hf_source(const std::string& dir) { return std::make_unique<HfSource>(dir); }

}  // namespace hs
