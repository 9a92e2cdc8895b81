// Internals shared by the synthetic source and the synthetic GGUF writer: the quant-mix
// table and the band-by-band generator of one tensor. Not for use outside src/model.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/ggml_types.h"
#include "model/synthetic.h"
#include "model/tensors.h"

namespace hs::synth {

enum class Quant { F32, Q8, MXFP4, Q2, Q4K, Native };
Quant parse_quant(const std::string& name);

// Applied to the random values before the GGUF type's quantizer (native mix only).
enum class Pre { None, Bf16, Fp8Block };

struct Storage {
  GgmlType gguf = GgmlType::F32;
  Pre pre = Pre::None;
  std::string reported;
};
Storage storage_of(const TensorSpec& spec, Quant q);

// "blk.3.ffn_norm.weight" / "blk.3.exp_probs_b.bias": the GGUF name of an inventory entry.
std::string gguf_name(const TensorSpec& spec);

struct BandScratch {
  std::vector<float> x;
  std::vector<uint8_t> q;
};

// Generates one float tensor in bands: up to 128 rows of one matrix (experts are E matrices),
// so FP8 128x128 blocks never straddle a band. Rows are GGUF rows (ne0 = shape.back() wide).
class TensorGen {
 public:
  static constexpr int64_t kBandRows = 128;

  TensorGen(const TensorSpec& spec, Quant q, uint64_t seed);

  const Storage& storage() const { return storage_; }
  int64_t cols() const { return cols_; }
  int64_t n_bands() const { return n_mats_ * bands_per_mat_; }
  int64_t band_first_row(int64_t b) const;
  int64_t band_rows(int64_t b) const;
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t nbytes() const { return row_bytes_ * static_cast<uint64_t>(n_mats_ * mat_rows_); }

  // Band b: its GGUF bytes into `bytes` and/or its values (dequantized) into `values`; either
  // may be null. Both point at the band's first row.
  void band(int64_t b, float* values, uint8_t* bytes, BandScratch& scratch) const;

 private:
  float draw(uint64_t index) const;
  void fp8_blocks(float* x, int64_t rows) const;

  Storage storage_;
  uint64_t key_ = 0;
  bool uniform_ = false;
  float mean_ = 0.0f, scale_ = 1.0f;  // normal: mean and std; uniform: low end and width
  int64_t cols_ = 0, mat_rows_ = 1, n_mats_ = 1, bands_per_mat_ = 1;
  uint64_t row_bytes_ = 0;
};

// tid2eid [vocab, k]: k distinct experts per token, drawn from (seed, name, token).
std::vector<int32_t> gen_token_table(const TensorSpec& spec, int n_experts, uint64_t seed);

}  // namespace hs::synth
