// Synthetic weights: the quant-mix table and the deterministic generator (synthetic_impl.h).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string_view>

#include "format/quants.h"
#include "model/synthetic_impl.h"
#include "model/tensor_names.h"
#include "util/error.h"
#include "util/fp.h"

namespace hs::synth {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

// SplitMix64's finalizer: a counter-based generator, so any element can be drawn on its own.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t tensor_key(const std::string& name, uint64_t seed) {
  uint64_t h = 0xCBF29CE484222325ULL;  // FNV-1a
  for (unsigned char c : name) h = (h ^ c) * 0x100000001B3ULL;
  return mix64(h ^ mix64(seed + kGolden));
}

bool ends_with(std::string_view s, std::string_view suffix) { return s.ends_with(suffix); }

// The matrices the official checkpoint stores as FP8 (shared/fixtures/tiny-official); the
// ".attn_q_b" suffix also takes the indexer's q projection, FP8 there too.
bool official_fp8(const std::string& name) {
  for (std::string_view s : {".attn_q_a", ".attn_q_b", ".attn_kv", ".attn_output_a", ".attn_output_b",
                             ".ffn_gate_shexp", ".ffn_up_shexp", ".ffn_down_shexp"})
    if (ends_with(name, s)) return true;
  return false;
}

// antirez's ds4 q2 file (gguf-ds4.md §2 "Quant mixes seen"): F16 for the token embedding, the
// router, the HC projections, the compressors (their ape too) and the indexer; Q8_0 for the
// other matrices (attention, shared experts, output); F32 for the other vectors.
bool antirez_f16(const TensorSpec& s) {
  const std::string& n = s.name;
  switch (s.role) {
    case TensorRole::HcFn: return true;
    case TensorRole::Vector: return ends_with(n, "_ape");
    case TensorRole::Matrix:
      return n == "token_embd" || ends_with(n, ".ffn_gate_inp") || n.find("compressor_") != std::string::npos ||
             n.find(".indexer") != std::string::npos;
    default: return false;
  }
}

// llama-quantize's fallback when a row is not a whole number of 256-element super-blocks
// (llama_tensor_get_type, src/llama-quant.cpp): IQ2_XXS / Q2_K -> IQ4_NL, which has no
// quantizer here, so Q4_0 (the same block and size); Q4_K -> Q5_0; F16 when the row is not a
// whole number of 32-element blocks either.
GgmlType fit_row(GgmlType t, int64_t row) {
  if (row % ggml_type_info(t).block_elems == 0) return t;
  const bool low = t == GgmlType::IQ2_XXS || t == GgmlType::Q2_K;
  if (low || t == GgmlType::Q4_K) return row % 32 != 0 ? GgmlType::F16 : low ? GgmlType::Q4_0 : GgmlType::Q5_0;
  return GgmlType::F32;
}

}  // namespace

Quant parse_quant(const std::string& name) {
  if (name == "f32") return Quant::F32;
  if (name == "q8") return Quant::Q8;
  if (name == "mxfp4") return Quant::MXFP4;
  if (name == "q2") return Quant::Q2;
  if (name == "q4k") return Quant::Q4K;
  if (name == "native") return Quant::Native;
  fail("synthetic model: unknown quant '", name, "' (expected f32, q8, mxfp4, q2, q4k or native)");
}

Storage storage_of(const TensorSpec& s, Quant q) {
  if (s.role == TensorRole::TokenTable) return {GgmlType::I32, Pre::None, "I32"};
  if (q == Quant::Q2 && antirez_f16(s)) return {GgmlType::F16, Pre::None, "F16"};
  if (s.role == TensorRole::Vector || s.role == TensorRole::HcFn) {
    // The official checkpoint keeps norms in BF16 (GGUF converters widen them to F32).
    if (q == Quant::Native && s.role == TensorRole::Vector && s.name.find("norm") != std::string::npos)
      return {GgmlType::F32, Pre::Bf16, "BF16"};
    return {GgmlType::F32, Pre::None, "F32"};
  }
  Storage st;
  if (s.role == TensorRole::Experts) {
    constexpr GgmlType kExperts[] = {GgmlType::F32,  GgmlType::Q8_0, GgmlType::MXFP4,
                                     GgmlType::Q2_K, GgmlType::Q4_K, GgmlType::MXFP4};
    st.gguf = kExperts[static_cast<int>(q)];
    if (q == Quant::Q2 && !ends_with(s.name, ".ffn_down_exps")) st.gguf = GgmlType::IQ2_XXS;  // gate, up
    if (q == Quant::Native) st.reported = "F4_E2M1";
  } else if (q == Quant::Native) {
    st.gguf = GgmlType::BF16;
    st.pre = official_fp8(s.name) ? Pre::Fp8Block : Pre::Bf16;
    st.reported = st.pre == Pre::Fp8Block ? "F8_E4M3" : "BF16";
  } else {
    st.gguf = q == Quant::F32 ? GgmlType::F32 : GgmlType::Q8_0;
  }
  const GgmlType fitted = fit_row(st.gguf, s.shape.back());
  if (fitted != st.gguf) st.reported.clear();
  st.gguf = fitted;
  if (st.reported.empty()) st.reported = ggml_type_name(st.gguf);
  return st;
}

std::string gguf_name(const TensorSpec& spec) { return gguf_tensor_name(spec); }

TensorGen::TensorGen(const TensorSpec& spec, Quant q, uint64_t seed)
    : storage_(storage_of(spec, q)), key_(tensor_key(spec.name, seed)) {
  HS_CHECK(spec.role != TensorRole::TokenTable, "internal: ", spec.name, " is an integer table");
  cols_ = spec.shape.back();
  mat_rows_ = spec.shape.size() >= 2 ? spec.shape[spec.shape.size() - 2] : 1;
  n_mats_ = spec.n_elements() / (cols_ * mat_rows_);
  bands_per_mat_ = (mat_rows_ + kBandRows - 1) / kBandRows;
  row_bytes_ = static_cast<uint64_t>(ggml_row_bytes(storage_.gguf, cols_));
  // Scales of shared/tools/gen_hf_fixtures.py randomise().
  const std::string& n = spec.name;
  const float inv_sqrt_in = 1.0f / std::sqrt(static_cast<float>(cols_));
  if (spec.role != TensorRole::Vector) {
    scale_ = n == "token_embd" ? 1.0f : ends_with(n, "indexer.proj") ? 10.0f * inv_sqrt_in : inv_sqrt_in;
  } else if (ends_with(n, "_scale")) {
    uniform_ = true, mean_ = 0.5f, scale_ = 1.0f;
  } else if (ends_with(n, "attn_sinks")) {
    scale_ = 1.0f;
  } else if (ends_with(n, "exp_probs_b")) {
    scale_ = 0.1f;
  } else if (n.find("norm") != std::string::npos) {
    mean_ = 1.0f, scale_ = 0.1f;
  } else {
    scale_ = 0.5f;  // HC base, compressor position bias
  }
}

int64_t TensorGen::band_first_row(int64_t b) const {
  return (b / bands_per_mat_) * mat_rows_ + (b % bands_per_mat_) * kBandRows;
}

int64_t TensorGen::band_rows(int64_t b) const {
  return std::min(kBandRows, mat_rows_ - (b % bands_per_mat_) * kBandRows);
}

inline float TensorGen::draw(uint64_t index) const {
  const uint64_t h = mix64(key_ + (index + 1) * kGolden);
  if (uniform_) return mean_ + scale_ * static_cast<float>(h >> 40) * 0x1p-24f;
  // Irwin-Hall(4): four 16-bit uniforms summed, centred, scaled to unit variance.
  const auto sum = static_cast<float>((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48));
  return mean_ + scale_ * ((sum + 2.0f) * 0x1p-16f - 2.0f) * 1.7320508f;
}

// DeepSeek's FP8 weights: e4m3 values times one power-of-two (UE8M0) scale per 128x128 block,
// the scale the smallest that brings the block's max magnitude within 448.
void TensorGen::fp8_blocks(float* x, int64_t rows) const {
  for (int64_t c0 = 0; c0 < cols_; c0 += kBandRows) {
    const int64_t c1 = std::min(cols_, c0 + kBandRows);
    float amax = 0.0f;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols_ + c]));
    int e = 0;
    if (amax > 0.0f) {
      const float m = std::frexp(amax / 448.0f, &e);  // amax/448 = m * 2^e, m in [0.5, 1)
      if (m == 0.5f) --e;                             // an exact power of two needs no rounding up
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = c0; c < c1; ++c) {
        float& v = x[r * cols_ + c];
        v = std::ldexp(e4m3_to_f32(f32_to_e4m3(std::ldexp(v, -e))), e);
      }
  }
}

void TensorGen::band(int64_t b, float* values, uint8_t* bytes, BandScratch& s) const {
  const int64_t r0 = band_first_row(b), rows = band_rows(b), n = rows * cols_;
  s.x.resize(static_cast<size_t>(n));
  float* x = s.x.data();
  const uint64_t base = static_cast<uint64_t>(r0 * cols_);
  for (int64_t i = 0; i < n; ++i) x[i] = draw(base + static_cast<uint64_t>(i));
  if (storage_.pre == Pre::Bf16)
    for (int64_t i = 0; i < n; ++i) x[i] = round_bf16(x[i]);
  else if (storage_.pre == Pre::Fp8Block)
    fp8_blocks(x, rows);
  if (!bytes) s.q.resize(row_bytes_);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* q = bytes ? bytes + r * static_cast<int64_t>(row_bytes_) : s.q.data();
    quantize_row(storage_.gguf, x + r * cols_, q, cols_);
    if (values) dequantize_row(storage_.gguf, q, values + r * cols_, cols_);
  }
}

std::vector<int32_t> gen_token_table(const TensorSpec& spec, int n_experts, uint64_t seed) {
  const int64_t rows = spec.shape[0], k = spec.shape[1];
  HS_CHECK(k <= n_experts, "tensor ", spec.name, ": ", k, " experts per token from only ", n_experts);
  const uint64_t key = tensor_key(spec.name, seed);
  std::vector<int32_t> out(static_cast<size_t>(rows * k));
  std::vector<int32_t> perm(static_cast<size_t>(n_experts));
  for (int64_t t = 0; t < rows; ++t) {
    std::iota(perm.begin(), perm.end(), 0);
    for (int64_t j = 0; j < k; ++j) {  // partial Fisher-Yates: k distinct experts
      const uint64_t h = mix64(key + static_cast<uint64_t>(t * k + j + 1) * kGolden);
      const auto pick = j + static_cast<int64_t>(h % static_cast<uint64_t>(n_experts - j));
      std::swap(perm[static_cast<size_t>(j)], perm[static_cast<size_t>(pick)]);
      out[static_cast<size_t>(t * k + j)] = perm[static_cast<size_t>(j)];
    }
  }
  return out;
}

}  // namespace hs::synth
