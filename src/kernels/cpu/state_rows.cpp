// The state pool's row forms on the CPU (kernels/state_rows.h): each packed form stores the
// codes of the model-numerics round trip it stands for, so decoding gives that round trip's
// values bit for bit (the scale and the code are computed as quant_sim.cpp computes them).
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/ops.h"
#include "util/error.h"
#include "util/fp.h"

namespace hs::cpu {

void encode_row(const RowFormat& f, const float* x, uint8_t* row) {
  switch (f.form) {
    case RowForm::F32:
      std::memcpy(row, x, static_cast<size_t>(f.d) * 4);
      return;
    case RowForm::Fp8Kv: {
      const int32_t n = f.fp8_channels();
      auto* tail = reinterpret_cast<uint16_t*>(row);
      for (int32_t i = 0; i < f.rope; ++i) tail[i] = f32_to_bf16(x[n + i]);
      uint8_t* codes = row + f.codes_at();
      uint8_t* scales = row + f.fp8_scales_at();
      for (int32_t b = 0, k = 0; b < n; b += RowFormat::kFp8Block, ++k) {
        const int32_t e = std::min(n, b + RowFormat::kFp8Block);
        const float s = block_scale(x + b, e - b, kFp8AmaxFloor, 448.0f);
        scales[k] = scale_byte(s);
        for (int32_t i = b; i < e; ++i) codes[i] = f32_to_e4m3(std::clamp(x[i] / s, -448.0f, 448.0f));
      }
      return;
    }
    case RowForm::Fp4Index: {
      std::vector<float> h(x, x + f.d);
      hadamard(h.data(), 1, f.d);
      round_bf16(h.data(), f.d);
      uint8_t* scales = row + f.fp4_scales_at();
      std::memset(row, 0, static_cast<size_t>(f.d / 2));
      for (int32_t b = 0, k = 0; b < f.d; b += RowFormat::kFp4Block, ++k) {
        const int32_t e = std::min(f.d, b + RowFormat::kFp4Block);
        const float s = block_scale(h.data() + b, e - b, kFp4AmaxFloor, 6.0f);
        scales[k] = scale_byte(s);
        for (int32_t i = b; i < e; ++i) {
          const uint8_t c = f32_to_e2m1(std::clamp(h[static_cast<size_t>(i)] / s, -6.0f, 6.0f));
          row[i / 2] |= static_cast<uint8_t>(i % 2 ? c << 4 : c);
        }
      }
      return;
    }
  }
  fail("internal: unknown state row form ", static_cast<int>(f.form));
}

void decode_row(const RowFormat& f, const uint8_t* row, float* x) {
  switch (f.form) {
    case RowForm::F32:
      std::memcpy(x, row, static_cast<size_t>(f.d) * 4);
      return;
    case RowForm::Fp8Kv: {
      const int32_t n = f.fp8_channels();
      const auto* tail = reinterpret_cast<const uint16_t*>(row);
      for (int32_t i = 0; i < f.rope; ++i) x[n + i] = bf16_to_f32(tail[i]);
      const uint8_t* codes = row + f.codes_at();
      const uint8_t* scales = row + f.fp8_scales_at();
      for (int32_t i = 0; i < n; ++i)
        x[i] = hs::round_bf16(e4m3_to_f32(codes[i]) * scale_value(scales[i / RowFormat::kFp8Block]));
      return;
    }
    case RowForm::Fp4Index: {
      const uint8_t* scales = row + f.fp4_scales_at();
      for (int32_t i = 0; i < f.d; ++i) {
        const uint8_t c = i % 2 ? row[i / 2] >> 4 : row[i / 2] & 0xfu;
        x[i] = hs::round_bf16(e2m1_to_f32(c) * scale_value(scales[i / RowFormat::kFp4Block]));
      }
      return;
    }
  }
  fail("internal: unknown state row form ", static_cast<int>(f.form));
}

}  // namespace hs::cpu
