// Scalar conversions between f32 and the storage formats DeepSeek-V4 checkpoints use.
// Header-only and constexpr-friendly so CPU reference code and tests share one definition.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace hs {

inline float bits_to_f32(uint32_t b) { return std::bit_cast<float>(b); }
inline uint32_t f32_to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// ---- bfloat16: the high half of an f32. Rounding is to nearest even; NaN stays NaN.
inline float bf16_to_f32(uint16_t h) { return bits_to_f32(static_cast<uint32_t>(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);  // quiet NaN
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// ---- IEEE half.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // subnormal: value = man * 2^-24
    float v = static_cast<float>(man) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
inline uint16_t f32_to_f16(float f) {
  uint32_t b = f32_to_bits(f);
  uint32_t sign = (b >> 16) & 0x8000u;
  uint32_t abs = b & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: round man*2^-24 to an integer, ties even
    float v = bits_to_f32(abs);
    float q = std::nearbyint(v * 0x1p24f);  // default rounding mode is nearest-even
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r - (112u << 23)) >> 13));
}

// ---- FP8 E4M3FN: bias 7, max 448, no infinities, 0x7f/0xff are NaN.
inline float e4m3_to_f32(uint8_t v) {
  uint32_t sign = v & 0x80u;
  uint32_t exp = (v >> 3) & 0xfu;
  uint32_t man = v & 0x7u;
  float r;
  if (exp == 0xf && man == 0x7) return std::nanf("");
  if (exp == 0) r = static_cast<float>(man) * 0x1p-9f;  // subnormal: man/8 * 2^-6
  else r = std::ldexp(1.0f + static_cast<float>(man) / 8.0f, static_cast<int>(exp) - 7);
  return sign ? -r : r;
}
// Round to nearest even, saturating to +-448 (callers clamp first, as the reference does).
inline uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float a = std::fabs(f);
  if (a >= 448.0f) return sign | 0x7e;
  // Find the nearest representable magnitude by comparing candidates on the grid.
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int exp_unb = e - 1;  // a in [2^exp_unb, 2^(exp_unb+1))
  if (exp_unb < -6) exp_unb = -6;  // subnormal spacing 2^-9
  float step = std::ldexp(1.0f, exp_unb - 3);
  float q = std::nearbyint(a / step) * step;  // ties to even on the mantissa grid
  // Re-encode q.
  if (q == 0.0f) return sign;
  int qe;
  std::frexp(q, &qe);
  int qunb = qe - 1;
  if (qunb < -6) {  // subnormal
    return sign | static_cast<uint8_t>(std::lround(q / 0x1p-9f));
  }
  int man = static_cast<int>(std::lround((q / std::ldexp(1.0f, qunb) - 1.0f) * 8.0f));
  return sign | static_cast<uint8_t>(((qunb + 7) << 3) | man);
}

// ---- E8M0 scale byte: 2^(v-127); 0xff is NaN.
inline float e8m0_to_f32(uint8_t v) {
  if (v == 0xff) return std::nanf("");
  if (v == 0) return 0x1p-127f;
  return bits_to_f32(static_cast<uint32_t>(v) << 23);
}

// ---- FP4 E2M1: bit 3 sign, bits 2..0 index {0, .5, 1, 1.5, 2, 3, 4, 6}.
inline float e2m1_to_f32(uint8_t nib) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float m = kMag[nib & 7u];
  return (nib & 8u) ? -m : m;
}
// Nearest E2M1 code, ties to the even code (the smaller magnitude at the midpoints).
inline uint8_t f32_to_e2m1(float f) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  float a = std::fabs(f);
  int best = 0;
  float bd = a;
  for (int i = 1; i < 8; ++i) {
    float d = std::fabs(a - kMag[i]);
    if (d < bd || (d == bd && (i & 1) == 0)) {
      bd = d;
      best = i;
    }
  }
  uint8_t code = static_cast<uint8_t>(best);
  if (std::signbit(f) && best != 0) code |= 8u;
  return code;
}

}  // namespace hs
