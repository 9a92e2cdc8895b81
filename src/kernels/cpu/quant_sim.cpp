// The "model numerics" round trips of DeepSeek's reference (ds4-model-spec.md §3.4, §3.5, §9):
// BF16 storage, FP8 activation quantisation, FP8 KV simulation, Hadamard + FP4 indexer simulation.
#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"
#include "util/error.h"
#include "util/fp.h"

namespace hs::cpu {

namespace {
// 2^ceil(log2(x)) taken from the f32 bit pattern, as the reference computes its ue8m0 scales.
float pow2_ceil(float x) {
  uint32_t b = std::bit_cast<uint32_t>(x);
  int e = static_cast<int>((b >> 23) & 0xff) - 127;
  if (b & 0x7fffffu) e += 1;
  return std::ldexp(1.0f, e);
}
}  // namespace

void round_bf16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = hs::round_bf16(x[i]);
}

float block_scale(const float* v, int64_t n, float amax_floor, float qmax) {
  float amax = amax_floor;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  return pow2_ceil(amax / qmax);
}

namespace {
// Per row (stride apart), per block of `block` among the first `channels`: a power-of-two
// scale s = block_scale(...) and v <- code(clamp(v / s, +-qmax)) * s.
template <typename RoundTrip>
void block_round_trip(float* x, int64_t rows, int64_t stride, int64_t channels, int block, float amax_floor,
                      float qmax, RoundTrip round_trip) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * stride;
    for (int64_t b = 0; b < channels; b += block) {
      const int64_t e = std::min<int64_t>(channels, b + block);
      const float s = block_scale(v + b, e - b, amax_floor, qmax);
      for (int64_t i = b; i < e; ++i) v[i] = round_trip(std::clamp(v[i] / s, -qmax, qmax)) * s;
    }
  }
}
}  // namespace

void fp8_round_trip(float* x, int64_t rows, int64_t stride, int64_t channels, int block, float amax_floor) {
  block_round_trip(x, rows, stride, channels, block, amax_floor, 448.0f,
                   [](float v) { return e4m3_to_f32(f32_to_e4m3(v)); });
}

void fp4_round_trip(float* x, int64_t rows, int64_t d, int block) {
  block_round_trip(x, rows, d, d, block, kFp4AmaxFloor, 6.0f, [](float v) { return e2m1_to_f32(f32_to_e2m1(v)); });
}

void hadamard(float* x, int64_t rows, int64_t d) {
  HS_CHECK(d > 0 && (d & (d - 1)) == 0, "Hadamard rotation needs a power-of-two width, got ", d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * d;
    // In-place fast Walsh-Hadamard transform (Sylvester order), then the 1/sqrt(d) scale.
    for (int64_t h = 1; h < d; h *= 2)
      for (int64_t i = 0; i < d; i += 2 * h)
        for (int64_t j = i; j < i + h; ++j) {
          const float a = v[j], b = v[j + h];
          v[j] = a + b;
          v[j + h] = a - b;
        }
    for (int64_t i = 0; i < d; ++i) v[i] *= scale;
  }
}

}  // namespace hs::cpu
