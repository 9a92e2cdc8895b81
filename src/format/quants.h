// CPU reference codecs for GGUF tensor types: dequantizers for every block type hyperstream
// reads, and the round-to-nearest reference quantizers that `convert` / `synth` write with.
// Byte layouts and formulas: shared/docs/quant-formats.md. Dequantization is bit-exact with
// llama.cpp / Lucebox (tests/test_quants.cpp checks every type against their output).
#pragma once
#include <cstdint>

#include "format/ggml_types.h"

namespace hs {

// Dequantize n elements (a whole number of blocks of `type`) from src into dst (f32).
// Throws hs::Error for a type without a dequantizer, an n that is not a multiple of the block
// size, or a ROCm scale byte outside 0x00..0x7E (UE4M3 NaN / sign bit: invalid per Lucebox).
void dequantize_row(GgmlType type, const void* src, float* dst, int64_t n);
bool type_has_dequantizer(GgmlType type);

// Quantize n elements (a whole number of blocks) of src into dst, which must hold
// ggml_row_bytes(type, n) bytes. Reference (llama.cpp `quantize_row_*_ref`-style) quantizers:
// F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, Q2_K, Q4_K, Q5_K, Q6_K, Q8_K; and
// IQ2_XXS, hyperstream's own search (quants_iq2q.cpp: a valid encoding, not llama.cpp's bytes).
// Throws hs::Error for other types or a bad n.
void quantize_row(GgmlType type, const float* src, void* dst, int64_t n);
bool type_has_quantizer(GgmlType type);

// DeepSeek's official FP4 expert layout -> GGUF MXFP4, losslessly. Source: n E2M1 codes packed
// two per byte (element 2j in the LOW nibble, element 2j+1 in the high nibble, bit 3 = sign)
// and n/32 E8M0 scale bytes (value = e2m1 * 2^(s-127)). MXFP4 stores the same codes and the
// same scale byte, only with split-half nibble order (byte j = element j | element j+16 << 4).
// dst must hold n/32 * 17 bytes. Throws hs::Error when n % 32 != 0 or a scale byte is 0xFF
// (NaN in E8M0, but 2^127 in ggml's MXFP4: it cannot be carried over faithfully).
void repack_fp4_to_mxfp4(const uint8_t* packed_e2m1, const uint8_t* e8m0_scales, void* dst_mxfp4,
                         int64_t n);

// DeepSeek's official FP8 matrix [rows, cols] -> f32: e4m3 codes times the scale of their
// 128x128 block; block_scale(i) is the scale of block i of the [ceil(rows/128), ceil(cols/128)]
// grid (the caller reads it as E8M0 or F32), asked once per block and row.
template <typename BlockScale>
void dequantize_fp8_block128(const uint8_t* e4m3, int64_t rows, int64_t cols, BlockScale&& block_scale, float* out);

float e4m3_value(uint8_t code);  // util/fp.h e4m3_to_f32 (out of line: CUDA sources include this header)

template <typename BlockScale>
void dequantize_fp8_block128(const uint8_t* e4m3, int64_t rows, int64_t cols, BlockScale&& block_scale, float* out) {
  const int64_t sc = (cols + 127) / 128;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      const float s = block_scale((r / 128) * sc + c0 / 128);
      const int64_t c1 = c0 + 128 < cols ? c0 + 128 : cols;
      for (int64_t c = c0; c < c1; ++c) out[r * cols + c] = e4m3_value(e4m3[r * cols + c]) * s;
    }
}

}  // namespace hs
