// GGML tensor type ids as stored in GGUF tensor-info records, with their block geometry.
// Ids and sizes: ../shared/docs/quant-formats.md §2 (llama.cpp ggml.h; Lucebox ids 100-107).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hs {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  MXFP4 = 39,
  Q4_0_ROCMFP4 = 100, Q4_0_ROCMFP4_FAST = 101, Q6_0_ROCMFPX = 102, Q8_0_ROCMFPX = 103,
  Q3_0_ROCMFPX = 104, Q2_0_ROCMFP2 = 107,
};

struct GgmlTypeInfo {
  GgmlType type;
  const char* name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

// nullopt for ids hyperstream does not implement (the loader refuses them by name/id).
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType t);
const char* ggml_type_name(GgmlType t);
std::optional<GgmlType> ggml_type_from_name(std::string_view name);  // case-insensitive

// Bytes of a row of n elements; throws hs::Error when n is not a multiple of the block.
int64_t ggml_row_bytes(GgmlType t, int64_t n);

}  // namespace hs
