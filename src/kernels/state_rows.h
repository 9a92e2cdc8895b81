// The row forms of a shard's state pool and the addressing of its pages, shared by the CPU
// reference (kernels/cpu/state_rows.cpp) and the CUDA kernels (kernels/cuda/state_rows.cuh)
// so that both read and write one layout (docs/architecture.md, "State pool").
//
// A row is one SWA KV row, one compressed entry or one indexer key:
//   F32       d floats (reference numerics; the open compressor windows in both numerics)
//   Fp8Kv     model numerics' KV form: the rope tail as BF16, the other channels as E4M3 codes
//             with one power-of-two scale byte per 64 channels. Decoding gives exactly what
//             kv_fp8_sim leaves (that round trip is what the codes store).
//   Fp4Index  model numerics' indexer-key form: E2M1 codes, two per byte, one scale byte per
//             32 channels: exactly what indexer_fp4_sim leaves.
// Plain structs only: no CUDA, no engine types.
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define HS_HD __host__ __device__ __forceinline__
#else
#define HS_HD inline
#endif

namespace hs {

enum class RowForm : int32_t { F32 = 0, Fp8Kv = 1, Fp4Index = 2 };

struct RowFormat {
  RowForm form = RowForm::F32;
  int32_t d = 0;      // channels
  int32_t rope = 0;   // Fp8Kv: trailing channels kept as BF16
  int32_t bytes = 0;  // per row, a multiple of 16

  static constexpr int kFp8Block = 64;
  static constexpr int kFp4Block = 32;
  HS_HD int32_t fp8_channels() const { return d - rope; }
  HS_HD int32_t fp8_scales() const { return (fp8_channels() + kFp8Block - 1) / kFp8Block; }
  // Fp8Kv byte offsets: [BF16 rope tail][E4M3 codes][scale bytes]
  HS_HD int32_t codes_at() const { return 2 * rope; }
  HS_HD int32_t fp8_scales_at() const { return 2 * rope + fp8_channels(); }
  // Fp4Index: [codes, channel 2i in the low nibble of byte i][scale bytes]
  HS_HD int32_t fp4_scales() const { return (d + kFp4Block - 1) / kFp4Block; }
  HS_HD int32_t fp4_scales_at() const { return d / 2; }

  static RowFormat make(RowForm f, int32_t d, int32_t rope) {
    RowFormat r{f, d, rope, 0};
    int32_t b = 4 * d;
    if (f == RowForm::Fp8Kv) b = r.fp8_scales_at() + r.fp8_scales();
    if (f == RowForm::Fp4Index) b = r.fp4_scales_at() + r.fp4_scales();
    r.bytes = (b + 15) / 16 * 16;
    return r;
  }
};

HS_HD uint32_t state_f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
HS_HD float state_bits_f32(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// A power-of-two scale 2^e (what the round trips' pow2_ceil gives: 2^-127 .. 2^127, +inf) as
// its byte e + 127 (0: 2^-127, a denormal; 255: +inf).
HS_HD uint8_t scale_byte(float s) { return static_cast<uint8_t>((state_f32_bits(s) >> 23) & 0xffu); }
HS_HD float scale_value(uint8_t b) { return state_bits_f32(b == 0 ? 0x00400000u : static_cast<uint32_t>(b) << 23); }

// Where the rows of one layer live in a pool. Pages of P positions; block ids come from the
// sequence's page table (one table for SWA rows, one for the compressed rows).
struct PagedRows {
  uint8_t* base = nullptr;  // [blocks, rows_per_block, fmt.bytes]
  RowFormat fmt;
  int32_t rows_per_block = 0;
  HS_HD uint8_t* row(int64_t block, int64_t i) const {
    return base + (block * rows_per_block + i) * static_cast<int64_t>(fmt.bytes);
  }
};

}  // namespace hs
