// Row-level entry points: type dispatch, size checks, the plain (block size 1) types, and
// the FP4 -> MXFP4 repack. The block codecs live in quants_{legacy,k,kq,iq,rocm}.cpp.
#include "format/quants.h"

#include <cmath>
#include <cstring>

#include "format/quants_impl.h"
#include "util/error.h"

namespace hs {

namespace {

using namespace qimpl;

struct BlockCodec {
  GgmlType type;
  DequantBlock dq;
  QuantBlock q;  // nullptr: no quantizer
};

constexpr BlockCodec kBlockCodecs[] = {
    {GgmlType::Q4_0, dq_q4_0, q_q4_0},
    {GgmlType::Q4_1, dq_q4_1, q_q4_1},
    {GgmlType::Q5_0, dq_q5_0, q_q5_0},
    {GgmlType::Q5_1, dq_q5_1, q_q5_1},
    {GgmlType::Q8_0, dq_q8_0, q_q8_0},
    {GgmlType::IQ4_NL, dq_iq4_nl, nullptr},
    {GgmlType::MXFP4, dq_mxfp4, q_mxfp4},
    {GgmlType::Q2_K, dq_q2_k, q_q2_k},
    {GgmlType::Q3_K, dq_q3_k, nullptr},
    {GgmlType::Q4_K, dq_q4_k, q_q4_k},
    {GgmlType::Q5_K, dq_q5_k, q_q5_k},
    {GgmlType::Q6_K, dq_q6_k, q_q6_k},
    {GgmlType::Q8_K, dq_q8_k, q_q8_k},
    {GgmlType::IQ2_XXS, dq_iq2_xxs, q_iq2_xxs},
    {GgmlType::IQ2_XS, dq_iq2_xs, nullptr},
    {GgmlType::IQ2_S, dq_iq2_s, nullptr},
    {GgmlType::IQ3_XXS, dq_iq3_xxs, nullptr},
    {GgmlType::IQ3_S, dq_iq3_s, nullptr},
    {GgmlType::IQ1_S, dq_iq1_s, nullptr},
    {GgmlType::IQ1_M, dq_iq1_m, nullptr},
    {GgmlType::IQ4_XS, dq_iq4_xs, nullptr},
    {GgmlType::Q4_0_ROCMFP4, dq_rocm_fp4, nullptr},
    {GgmlType::Q4_0_ROCMFP4_FAST, dq_rocm_fp4_fast, nullptr},
    {GgmlType::Q6_0_ROCMFPX, dq_rocm_fp6, nullptr},
    {GgmlType::Q8_0_ROCMFPX, dq_rocm_fp8, nullptr},
    {GgmlType::Q3_0_ROCMFPX, dq_rocm_fp3, nullptr},
    {GgmlType::Q2_0_ROCMFP2, dq_rocm_fp2, nullptr},
};

const BlockCodec* find_codec(GgmlType t) {
  for (const auto& c : kBlockCodecs)
    if (c.type == t) return &c;
  return nullptr;
}

bool is_plain_dequant(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::I8 ||
         t == GgmlType::I16 || t == GgmlType::I32;
}
bool is_plain_quant(GgmlType t) {
  return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16;
}

// "Q8_1 (id 9)"; also safe for ids ggml_types.h does not know.
std::string type_label(GgmlType t) {
  const auto id = static_cast<uint32_t>(t);
  const auto info = ggml_type_info(id);
  return cat(info ? info->name : "unknown type", " (id ", id, ")");
}

// Block geometry of t, after checking that n is a whole number of blocks.
const GgmlTypeInfo& checked_info(GgmlType t, int64_t n, const char* what) {
  const GgmlTypeInfo& info = ggml_type_info(t);
  HS_CHECK(n >= 0 && n % info.block_elems == 0, what, " ", info.name, ": ", n,
           " elements is not a whole number of blocks of ", info.block_elems);
  return info;
}

void dequant_plain(GgmlType t, const uint8_t* s, float* y, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(y, s, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: for (int64_t i = 0; i < n; ++i) y[i] = rd_f16(s + 2 * i); return;
    case GgmlType::BF16: for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(rd_u16(s + 2 * i)); return;
    case GgmlType::I8: for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int8_t>(s[i]); return;
    case GgmlType::I16:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<int16_t>(rd_u16(s + 2 * i));
      return;
    case GgmlType::I32:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<int32_t>(rd_u32(s + 4 * i)));
      return;
    default: fail("internal: ", type_label(t), " is not a plain type");
  }
}

void quant_plain(GgmlType t, const float* x, uint8_t* d, int64_t n) {
  switch (t) {
    case GgmlType::F32: std::memcpy(d, x, static_cast<size_t>(n) * 4); return;
    case GgmlType::F16: for (int64_t i = 0; i < n; ++i) wr_f16(d + 2 * i, x[i]); return;
    case GgmlType::BF16: for (int64_t i = 0; i < n; ++i) wr_u16(d + 2 * i, f32_to_bf16(x[i])); return;
    default: fail("internal: ", type_label(t), " is not a plain type");
  }
}

}  // namespace

bool type_has_dequantizer(GgmlType type) { return is_plain_dequant(type) || find_codec(type); }

bool type_has_quantizer(GgmlType type) {
  const BlockCodec* c = find_codec(type);
  return is_plain_quant(type) || (c && c->q);
}

void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  HS_CHECK(type_has_dequantizer(type), "no dequantizer for GGML type ", type_label(type));
  const GgmlTypeInfo& info = checked_info(type, n, "dequantize");
  const auto* s = static_cast<const uint8_t*>(src);
  if (is_plain_dequant(type)) return dequant_plain(type, s, dst, n);
  const DequantBlock dq = find_codec(type)->dq;
  for (int64_t b = 0; b < n / info.block_elems; ++b)
    dq(s + b * info.block_bytes, dst + b * info.block_elems);
}

void quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  HS_CHECK(type_has_quantizer(type), "no quantizer for GGML type ", type_label(type));
  const GgmlTypeInfo& info = checked_info(type, n, "quantize");
  auto* d = static_cast<uint8_t*>(dst);
  if (type == GgmlType::F32) return quant_plain(type, src, d, n);
  // Non-finite input, or values too large for the type's scales (e.g. |x| > 65504 * 127 for
  // Q8_0), would be written as inf/NaN blocks: refuse them instead.
  for (int64_t i = 0; i < n; ++i)
    HS_CHECK(std::isfinite(src[i]), "quantize ", info.name, ": element ", i, " is ", src[i]);
  const QuantBlock q = is_plain_quant(type) ? nullptr : find_codec(type)->q;
  const DequantBlock dq = is_plain_quant(type) ? nullptr : find_codec(type)->dq;
  float back[256];
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    const float* x = src + b * info.block_elems;
    uint8_t* blk = d + b * info.block_bytes;
    if (q) {
      q(x, blk);
      dq(blk, back);
    } else {
      quant_plain(type, x, blk, 1);
      dequant_plain(type, blk, back, 1);
    }
    for (int64_t i = 0; i < info.block_elems; ++i)
      HS_CHECK(std::isfinite(back[i]), "quantize ", info.name, ": element ", b * info.block_elems + i,
               " (", x[i], ") is out of the type's range");
  }
}

float e4m3_value(uint8_t code) { return e4m3_to_f32(code); }

void repack_fp4_to_mxfp4(const uint8_t* packed_e2m1, const uint8_t* e8m0_scales, void* dst_mxfp4,
                         int64_t n) {
  HS_CHECK(n >= 0 && n % 32 == 0, "FP4 -> MXFP4 repack: ", n, " elements is not a multiple of 32");
  auto* out = static_cast<uint8_t*>(dst_mxfp4);
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint8_t e = e8m0_scales[b];
    HS_CHECK(e != 0xFF, "FP4 -> MXFP4 repack: block ", b, " has the E8M0 NaN scale 0xFF");
    const uint8_t* p = packed_e2m1 + 16 * b;  // element i: nibble i&1 of byte i/2
    uint8_t* blk = out + 17 * b;
    blk[0] = e;  // same byte: MXFP4's doubled codes x 2^(e-128) == E2M1 x 2^(e-127)
    for (int j = 0; j < 16; ++j) {
      const uint8_t lo = (p[j / 2] >> (4 * (j & 1))) & 15;             // element j
      const uint8_t hi = (p[(j + 16) / 2] >> (4 * (j & 1))) & 15;      // element j + 16
      blk[1 + j] = static_cast<uint8_t>(lo | hi << 4);
    }
  }
}

}  // namespace hs
