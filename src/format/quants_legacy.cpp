// 32-element blocks with one scale: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4.
// All 4-bit types use split-half nibble order: byte j = element j | element j+16 << 4.
// Dequantizers evaluate exactly ggml's expressions (int code * f32 scale [+ min]): every
// product is exact, so the only rounding is the final "+ m", and signed zeros match too.
#include <cmath>

#include "format/quant_tables.h"
#include "format/quants_impl.h"

namespace hs::qimpl {

namespace {

// MXFP4's E8M0 "half scale" 2^(e-128), built from bits as ggml does. Unlike OCP E8M0,
// e = 255 is 2^127 (not NaN); e = 0, 1 are the f32 subnormals 2^-128, 2^-127.
float e8m0_half(uint8_t e) {
  if (e >= 2) return bits_to_f32(static_cast<uint32_t>(e - 1) << 23);
  return bits_to_f32(e == 1 ? 0x00400000u : 0x00200000u);
}

// Truncation toward zero clamped to [lo, hi] (ggml casts x + 0.5 / x + 8.5 to an int).
int trunc_clamp(float v, int lo, int hi) {
  if (!(v > static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// Nearest integer, ties away from zero (C roundf), clamped to [lo, hi]. NaN maps to lo.
int round_clamp(float v, int lo, int hi) {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::round(v));
}

// The 5th bits of a Q5 block's codes, u32le: bit i belongs to element i.
uint32_t q5_high_bits(const int* q) {
  uint32_t qh = 0;
  for (int i = 0; i < 32; ++i) qh |= static_cast<uint32_t>(q[i] >> 4 & 1) << i;
  return qh;
}

// 32 codes (4 low bits used) -> 16 split-half bytes.
void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
}

// Signed value of largest magnitude (the first one on ties), as ggml's symmetric quantizers use.
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

void min_max(const float* x, float& mn, float& mx) {
  mn = x[0];
  mx = x[0];
  for (int j = 1; j < 32; ++j) {
    if (x[j] < mn) mn = x[j];
    if (x[j] > mx) mx = x[j];
  }
}

}  // namespace

// ---------------------------------------------------------------- dequantizers

void dq_q4_0(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((b[2 + j] & 15) - 8) * d;
    y[j + 16] = static_cast<float>((b[2 + j] >> 4) - 8) * d;
  }
}

void dq_q4_1(const uint8_t* b, float* y) {
  const float d = rd_f16(b), m = rd_f16(b + 2);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(b[4 + j] & 15) * d + m;
    y[j + 16] = static_cast<float>(b[4 + j] >> 4) * d + m;
  }
}

void dq_q5_0(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint32_t qh = rd_u32(b + 2);
  for (int j = 0; j < 16; ++j) {
    const int q0 = (b[6 + j] & 15) | static_cast<int>(qh >> j & 1) << 4;
    const int q1 = (b[6 + j] >> 4) | static_cast<int>(qh >> (j + 16) & 1) << 4;
    y[j] = static_cast<float>(q0 - 16) * d;
    y[j + 16] = static_cast<float>(q1 - 16) * d;
  }
}

void dq_q5_1(const uint8_t* b, float* y) {
  const float d = rd_f16(b), m = rd_f16(b + 2);
  const uint32_t qh = rd_u32(b + 4);
  for (int j = 0; j < 16; ++j) {
    const int q0 = (b[8 + j] & 15) | static_cast<int>(qh >> j & 1) << 4;
    const int q1 = (b[8 + j] >> 4) | static_cast<int>(qh >> (j + 16) & 1) << 4;
    y[j] = static_cast<float>(q0) * d + m;
    y[j + 16] = static_cast<float>(q1) * d + m;
  }
}

void dq_q8_0(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dq_iq4_nl(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * qtab::kValuesIq4nl[b[2 + j] & 15];
    y[j + 16] = d * qtab::kValuesIq4nl[b[2 + j] >> 4];
  }
}

void dq_mxfp4(const uint8_t* b, float* y) {
  const float d = e8m0_half(b[0]);
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qtab::kValuesMxfp4[b[1 + j] & 15]) * d;
    y[j + 16] = static_cast<float>(qtab::kValuesMxfp4[b[1 + j] >> 4]) * d;
  }
}

// ---------------------------------------------------------------- quantizers
// As llama.cpp's quantize_row_*_ref: the scale is computed in f32 and stored as f16, while
// the codes are rounded with the unrounded f32 scale (so requantizing on-grid data is exact).

namespace {

// Q4_0 / Q5_0: d = -max / 2^(bits-1) puts the extreme element at code 0, zero at 2^(bits-1).
void quant_symmetric(const float* x, uint8_t* b, int bits) {
  const int zero = 1 << (bits - 1);
  const float d = signed_absmax(x) / static_cast<float>(-zero);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = trunc_clamp(x[j] * id + (static_cast<float>(zero) + 0.5f), 0, 2 * zero - 1);
  wr_f16(b, d);
  if (bits == 5) wr_u32(b + 2, q5_high_bits(q));
  pack_nibbles(q, b + (bits == 5 ? 6 : 2));
}

// Q4_1 / Q5_1: d = (max - min) / (2^bits - 1), m = min.
void quant_affine(const float* x, uint8_t* b, int bits) {
  float mn, mx;
  min_max(x, mn, mx);
  const int top = (1 << bits) - 1;
  const float d = (mx - mn) / static_cast<float>(top);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int q[32];
  for (int j = 0; j < 32; ++j) q[j] = trunc_clamp((x[j] - mn) * id + 0.5f, 0, top);
  wr_f16(b, d);
  wr_f16(b + 2, mn);
  if (bits == 5) wr_u32(b + 4, q5_high_bits(q));
  pack_nibbles(q, b + (bits == 5 ? 8 : 4));
}

}  // namespace

void q_q4_0(const float* x, uint8_t* b) { quant_symmetric(x, b, 4); }
void q_q5_0(const float* x, uint8_t* b) { quant_symmetric(x, b, 5); }
void q_q4_1(const float* x, uint8_t* b) { quant_affine(x, b, 4); }
void q_q5_1(const float* x, uint8_t* b) { quant_affine(x, b, 5); }

void q_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  wr_f16(b, d);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(round_clamp(x[j] * id, -127, 127));
}

// E8M0 exponent so that amax lands in the top binade of E2M1 (4..6 x 2^(e-127)), then the
// nearest code; ties keep the lower table index (the smaller magnitude), as ggml does.
void q_mxfp4(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
  int e = 0;
  if (amax > 0.0f) {
    const float ef = std::floor(std::log2(amax)) - 2.0f + 127.0f;
    e = ef < 0.0f ? 0 : ef > 254.0f ? 254 : static_cast<int>(ef);  // ggml leaves this unclamped
  }
  const float d = e8m0_half(static_cast<uint8_t>(e));
  b[0] = static_cast<uint8_t>(e);
  int q[32];
  for (int j = 0; j < 32; ++j) {
    int best = 0;
    float best_err = std::fabs(qtab::kValuesMxfp4[0] * d - x[j]);
    for (int i = 1; i < 16; ++i) {
      const float err = std::fabs(qtab::kValuesMxfp4[i] * d - x[j]);
      if (err < best_err) {
        best = i;
        best_err = err;
      }
    }
    q[j] = best;
  }
  pack_nibbles(q, b + 1);
}

}  // namespace hs::qimpl
