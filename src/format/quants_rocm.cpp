// Lucebox ROCm block dequantizers (32 elements, codes first, UE4M3 half scales last):
// Q4_0_ROCMFP4(_FAST), Q6_0_ROCMFPX, Q8_0_ROCMFPX, Q3_0_ROCMFPX, Q2_0_ROCMFP2.
// Output = integer level * scale, as Lucebox's reference computes it (so a "minus zero"
// code gives +0.0, and a negative level times a zero scale gives -0.0).
#include <cstdio>

#include "format/quant_tables.h"
#include "format/quants_impl.h"
#include "util/error.h"

namespace hs::qimpl {

namespace {

// Half-UE4M3 scale. Lucebox's CPU reference silently maps 0x7F (NaN) and bytes with the top
// bit set to 0, and its HIP fast path decodes them as garbage, so such data is refused.
float rocm_scale(uint8_t e, const char* type) {
  if (e > 0x7E) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02X", e);
    fail(type, " block has the invalid scale byte ", hex, " (valid UE4M3 scales are 0x00..0x7E)");
  }
  return qtab::kUe4m3HalfScale[e];
}

// Code of element i in an LSB-first bit stream of `bits`-bit codes.
int stream_code(const uint8_t* qs, int i, int bits) {
  int c = 0;
  for (int k = 0; k < bits; ++k) {
    const int n = bits * i + k;
    c |= (qs[n >> 3] >> (n & 7) & 1) << k;
  }
  return c;
}

// FP4 codebook blocks with one scale per half (s0 == s1 for the FAST variant).
void dq_fp4_halves(const uint8_t* b, float s0, float s1, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qtab::kRocmFp4Codebook[b[j] & 15]) * s0;
    y[j + 16] = static_cast<float>(qtab::kRocmFp4Codebook[b[j] >> 4]) * s1;
  }
}

}  // namespace

void dq_rocm_fp4(const uint8_t* b, float* y) {
  dq_fp4_halves(b, rocm_scale(b[16], "Q4_0_ROCMFP4"), rocm_scale(b[17], "Q4_0_ROCMFP4"), y);
}

void dq_rocm_fp4_fast(const uint8_t* b, float* y) {
  const float s = rocm_scale(b[16], "Q4_0_ROCMFP4_FAST");
  dq_fp4_halves(b, s, s, y);
}

void dq_rocm_fp6(const uint8_t* b, float* y) {
  const float s[2] = {rocm_scale(b[24], "Q6_0_ROCMFPX"), rocm_scale(b[25], "Q6_0_ROCMFPX")};
  for (int i = 0; i < 32; ++i) {
    const int c = stream_code(b, i, 6);
    const int v = (c & 32) ? -(c & 31) : (c & 31);
    y[i] = static_cast<float>(v) * s[i / 16];
  }
}

void dq_rocm_fp8(const uint8_t* b, float* y) {
  const float s = rocm_scale(b[32], "Q8_0_ROCMFPX");
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<int8_t>(b[i])) * s;
}

void dq_rocm_fp3(const uint8_t* b, float* y) {
  const float s[2] = {rocm_scale(b[12], "Q3_0_ROCMFPX"), rocm_scale(b[13], "Q3_0_ROCMFPX")};
  for (int i = 0; i < 32; ++i)
    y[i] = static_cast<float>(qtab::kRocmFp3Levels[stream_code(b, i, 3)]) * s[i / 16];
}

void dq_rocm_fp2(const uint8_t* b, float* y) {
  const float s[2] = {rocm_scale(b[8], "Q2_0_ROCMFP2"), rocm_scale(b[9], "Q2_0_ROCMFP2")};
  for (int i = 0; i < 32; ++i)
    y[i] = static_cast<float>(qtab::kRocmFp2Levels[stream_code(b, i, 2)]) * s[i / 16];
}

}  // namespace hs::qimpl
