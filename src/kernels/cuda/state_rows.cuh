// Device forms of the state pool's rows (kernels/state_rows.h), bit-exact with their CPU twins
// in kernels/cpu/state_rows.cpp: encoding computes each code as the model-numerics round trip
// computes it (quant_sim.cuh), decoding is the same IEEE multiply and BF16 rounding as the CPU.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/quant_sim.cuh"
#include "kernels/state_rows.h"

namespace hs::cuda::detail {

// util/fp.h e4m3_to_f32.
__device__ __forceinline__ float e4m3_value(uint32_t v) {
  const uint32_t sign = (v & 0x80u) << 24, exp = (v >> 3) & 0xfu, man = v & 0x7u;
  if (exp == 0xfu && man == 0x7u) return __uint_as_float(0x7fc00000u);
  if (exp == 0) return __uint_as_float(sign | __float_as_uint(static_cast<float>(man) * 0x1p-9f));
  return __uint_as_float(sign | ((exp + 120u) << 23) | (man << 20));
}

// util/fp.h f32_to_e4m3 of v (already divided by the scale and clamped).
__device__ __forceinline__ uint8_t e4m3_code(float v) {
  if (v != v) return 0x7f;
  const float q = e4m3_round_trip(v);  // the nearest E4M3 value, sign kept
  const uint32_t sign = signbit(v) ? 0x80u : 0u;
  const float a = fabsf(q);
  if (a == 0.0f) return static_cast<uint8_t>(sign);
  const uint32_t b = __float_as_uint(a);
  const int e = static_cast<int>((b >> 23) & 0xffu) - 127;
  if (e < -6) return static_cast<uint8_t>(sign | static_cast<uint32_t>(__fmul_rn(a, 0x1p9f)));  // subnormal: a / 2^-9
  return static_cast<uint8_t>(sign | (static_cast<uint32_t>(e + 7) << 3) | ((b >> 20) & 7u));
}

__device__ __forceinline__ float e2m1_value(uint32_t c) {
  const float v = e2m1_mag(static_cast<int>(c & 7u));
  return (c & 8u) ? -v : v;
}

// util/fp.h f32_to_e2m1 (the code of e2m1_round_trip's value).
__device__ __forceinline__ uint8_t e2m1_code(float v) {
  const int best = e2m1_nearest(fabsf(v));
  return static_cast<uint8_t>(best | ((signbit(v) && best != 0) ? 8 : 0));
}

// One warp encodes the row x [f.d] (shared or global memory; for Fp4Index it is the scratch
// the Hadamard rotation runs in, and is overwritten) into dst (f.bytes).
__device__ inline void encode_row_warp(const RowFormat& f, float* x, uint8_t* dst) {
  const int lane = threadIdx.x & 31;
  if (f.form == RowForm::F32) {
    float* o = reinterpret_cast<float*>(dst);
    for (int i = lane; i < f.d; i += 32) o[i] = x[i];
    return;
  }
  if (f.form == RowForm::Fp8Kv) {
    const int n = f.fp8_channels();
    uint16_t* tail = reinterpret_cast<uint16_t*>(dst);
    for (int i = lane; i < f.rope; i += 32) tail[i] = static_cast<uint16_t>(__float_as_uint(bf16_round(x[n + i])) >> 16);
    uint8_t* codes = dst + f.codes_at();
    uint8_t* scales = dst + f.fp8_scales_at();
    for (int b = 0, k = 0; b < n; b += RowFormat::kFp8Block, ++k) {
      const int e = b + RowFormat::kFp8Block < n ? b + RowFormat::kFp8Block : n;
      const int i0 = b + lane, i1 = b + lane + 32;
      const float v0 = i0 < e ? x[i0] : 0.0f, v1 = i1 < e ? x[i1] : 0.0f;
      float amax = kFp8AmaxFloor;
      if (i0 < e) amax = amax_step(amax, v0);
      if (i1 < e) amax = amax_step(amax, v1);
      const float s = block_scale(warp_amax(amax), 448.0f);
      if (i0 < e) codes[i0] = e4m3_code(clamp_sym(__fdiv_rn(v0, s), 448.0f));
      if (i1 < e) codes[i1] = e4m3_code(clamp_sym(__fdiv_rn(v1, s), 448.0f));
      if (lane == 0) scales[k] = scale_byte(s);
    }
    return;
  }
  // Fp4Index: Hadamard (the CPU's stage order; each output the same a + b or a - b), scale,
  // BF16, then FP4 codes per 32-block.
  const int d = f.d;
  for (int h = 1; h < d; h <<= 1) {
    __syncwarp();
    for (int t = lane; t < d / 2; t += 32) {
      const int i = (t / h) * 2 * h + (t % h);
      const float a = x[i], b = x[i + h];
      x[i] = __fadd_rn(a, b);
      x[i + h] = __fsub_rn(a, b);
    }
  }
  __syncwarp();
  const float scale = __fdiv_rn(1.0f, __fsqrt_rn(static_cast<float>(d)));  // as the CPU's 1 / sqrt(d)
  uint8_t* scales = dst + f.fp4_scales_at();
  for (int b = 0, k = 0; b < d; b += RowFormat::kFp4Block, ++k) {
    const int i = b + lane;
    const int e = b + RowFormat::kFp4Block < d ? b + RowFormat::kFp4Block : d;
    const float v = i < e ? bf16_round(__fmul_rn(x[i], scale)) : 0.0f;
    const float s = block_scale(warp_amax(i < e ? amax_step(kFp4AmaxFloor, v) : kFp4AmaxFloor), 6.0f);
    const uint32_t c = i < e ? e2m1_code(clamp_sym(__fdiv_rn(v, s), 6.0f)) : 0u;
    // Two channels per byte: lane pairs combine through a shuffle.
    const uint32_t hi = __shfl_down_sync(kFullMask, c, 1);
    if (i < e && (lane & 1) == 0) dst[i / 2] = static_cast<uint8_t>(c | (i + 1 < e ? hi << 4 : 0u));
    if (lane == 0) scales[k] = scale_byte(s);
  }
}

// Channels 4c..4c+3 of a row in form f (f.d % 4 == 0; for Fp8Kv (d - rope) % 4 == 0).
__device__ __forceinline__ float4 decode4(const RowFormat& f, const uint8_t* row, int c) {
  const int ch = 4 * c;
  if (f.form == RowForm::F32) return reinterpret_cast<const float4*>(row)[c];
  if (f.form == RowForm::Fp8Kv) {
    const int n = f.fp8_channels();
    if (ch >= n) {
      const uint2 t = *reinterpret_cast<const uint2*>(row + 2 * (ch - n));
      return make_float4(__uint_as_float(t.x << 16), __uint_as_float(t.x & 0xffff0000u), __uint_as_float(t.y << 16),
                         __uint_as_float(t.y & 0xffff0000u));
    }
    const uint32_t q = *reinterpret_cast<const uint32_t*>(row + f.codes_at() + ch);
    const float s = scale_value(row[f.fp8_scales_at() + ch / RowFormat::kFp8Block]);
    return make_float4(bf16_round(__fmul_rn(e4m3_value(q & 0xffu), s)), bf16_round(__fmul_rn(e4m3_value((q >> 8) & 0xffu), s)),
                       bf16_round(__fmul_rn(e4m3_value((q >> 16) & 0xffu), s)), bf16_round(__fmul_rn(e4m3_value(q >> 24), s)));
  }
  const uint32_t q = *reinterpret_cast<const uint16_t*>(row + ch / 2);
  const float s = scale_value(row[f.fp4_scales_at() + ch / RowFormat::kFp4Block]);
  return make_float4(bf16_round(__fmul_rn(e2m1_value(q & 0xfu), s)), bf16_round(__fmul_rn(e2m1_value((q >> 4) & 0xfu), s)),
                     bf16_round(__fmul_rn(e2m1_value((q >> 8) & 0xfu), s)), bf16_round(__fmul_rn(e2m1_value(q >> 12), s)));
}

}  // namespace hs::cuda::detail
