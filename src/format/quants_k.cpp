// K-quant dequantizers (256-element super-blocks): Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Element e of a 2-bit-plane type (Q2_K, Q3_K, Q6_K) is addressed as half h = e/128,
// plane j = (e%128)/32, lane l = e%32: byte [32h + l] holds planes 0..3 at bits 2j.
// Each output is "(d*sc) * q - (dmin*m)" exactly as ggml evaluates it (one rounding).
#include "format/quants_impl.h"

namespace hs::qimpl {

namespace {

// 6-bit scale and min of sub-block k (0..7) from the 12 packed bytes of Q4_K / Q5_K.
void scale_min_k4(int k, const uint8_t* sc, int& s, int& m) {
  if (k < 4) {
    s = sc[k] & 63;
    m = sc[k + 4] & 63;
  } else {
    s = (sc[k + 4] & 15) | (sc[k - 4] >> 6) << 4;
    m = (sc[k + 4] >> 4) | (sc[k] >> 6) << 4;
  }
}

// Q4_K and Q5_K share everything but the 5th bit (qh == nullptr for Q4_K).
void dq_q45_k(const uint8_t* b, const uint8_t* qh, const uint8_t* qs, float* y) {
  const float d = rd_f16(b), dmin = rd_f16(b + 2);
  for (int k = 0; k < 8; ++k) {
    int s, m;
    scale_min_k4(k, b + 4, s, m);
    const float dl = d * static_cast<float>(s), ml = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (k / 2);  // sub-blocks 2c, 2c+1 share bytes: low, high nibble
    for (int l = 0; l < 32; ++l) {
      int v = (k & 1) ? q[l] >> 4 : q[l] & 15;
      if (qh) v += (qh[l] >> k & 1) << 4;
      y[32 * k + l] = dl * static_cast<float>(v) - ml;
    }
  }
}

}  // namespace

void dq_q2_k(const uint8_t* b, float* y) {
  const uint8_t* sc = b;
  const uint8_t* qs = b + 16;
  const float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32, k = e / 16;
    const int q = qs[32 * h + l] >> (2 * j) & 3;
    const float dl = d * static_cast<float>(sc[k] & 15), ml = dmin * static_cast<float>(sc[k] >> 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

void dq_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* qs = b + 32;
  const uint8_t* sc = b + 96;
  const float d = rd_f16(b + 108);
  int scale[16];  // sixteen 6-bit scales: low 4 bits in sc[0..7], high 2 bits in sc[8..11]
  for (int k = 0; k < 16; ++k) {
    const int low4 = k < 8 ? sc[k] & 15 : sc[k - 8] >> 4;
    const int high2 = sc[8 + k % 4] >> (2 * (k / 4)) & 3;
    scale[k] = (low4 | high2 << 4) - 32;
  }
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, j = (e % 128) / 32, l = e % 32;
    const int low = qs[32 * h + l] >> (2 * j) & 3;
    const int q = low - ((hmask[l] >> (4 * h + j) & 1) ? 0 : 4);  // a set bit means no offset
    y[e] = d * static_cast<float>(scale[e / 16]) * static_cast<float>(q);
  }
}

void dq_q4_k(const uint8_t* b, float* y) { dq_q45_k(b, nullptr, b + 16, y); }
void dq_q5_k(const uint8_t* b, float* y) { dq_q45_k(b, b + 16, b + 48, y); }

void dq_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = rd_f16(b + 208);
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const uint8_t byte = ql[64 * h + 32 * (g & 1) + l];
    const int low = g < 2 ? byte & 15 : byte >> 4;
    const int high = qh[32 * h + l] >> (2 * g) & 3;
    y[e] = d * static_cast<float>(sc[e / 16]) * static_cast<float>((low | high << 4) - 32);
  }
}

void dq_q8_k(const uint8_t* b, float* y) {
  const float d = bits_to_f32(rd_u32(b));  // Q8_K's scale is an f32
  for (int i = 0; i < 256; ++i) y[i] = d * static_cast<float>(static_cast<int8_t>(b[4 + i]));
}

}  // namespace hs::qimpl
