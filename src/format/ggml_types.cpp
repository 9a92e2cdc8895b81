#include "format/ggml_types.h"

#include <cctype>

#include "util/error.h"

namespace hs {

namespace {
constexpr GgmlTypeInfo kTypes[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},
    {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},
    {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},
    {GgmlType::Q8_1, "Q8_1", 32, 36},
    {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},
    {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},
    {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::MXFP4, "MXFP4", 32, 17},
    {GgmlType::Q4_0_ROCMFP4, "Q4_0_ROCMFP4", 32, 18},
    {GgmlType::Q4_0_ROCMFP4_FAST, "Q4_0_ROCMFP4_FAST", 32, 17},
    {GgmlType::Q6_0_ROCMFPX, "Q6_0_ROCMFPX", 32, 26},
    {GgmlType::Q8_0_ROCMFPX, "Q8_0_ROCMFPX", 32, 33},
    {GgmlType::Q3_0_ROCMFPX, "Q3_0_ROCMFPX", 32, 14},
    {GgmlType::Q2_0_ROCMFP2, "Q2_0_ROCMFP2", 32, 10},
};
}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<uint32_t>(t.type) == id) return t;
  return std::nullopt;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t;
  fail("unknown GGML type id ", static_cast<uint32_t>(type));
}

const char* ggml_type_name(GgmlType t) { return ggml_type_info(t).name; }

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    std::string_view n = t.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size() && eq; ++i)
      eq = std::toupper(static_cast<unsigned char>(n[i])) == std::toupper(static_cast<unsigned char>(name[i]));
    if (eq) return t.type;
  }
  return std::nullopt;
}

int64_t ggml_row_bytes(GgmlType t, int64_t n) {
  const auto& info = ggml_type_info(t);
  HS_CHECK(n % info.block_elems == 0, "a row of ", n, " elements is not a whole number of ", info.name,
           " blocks (", info.block_elems, " elements each)");
  return n / info.block_elems * info.block_bytes;
}

}  // namespace hs
