// Device functions of the "model numerics" round trips (ds4-model-spec.md §3.4, §3.5, §9), each
// bit-exact with its scalar twin in util/fp.h / kernels/cpu/quant_sim.cpp, so any kernel can fuse
// them (quant_sim.cu uses them for the ops of quant_sim_cuda.h). Every arithmetic step that can
// round is spelled with an IEEE intrinsic (__fdiv_rn, __fmul_rn, __fadd_rn, __fsub_rn), so
// neither contraction into an FMA nor a fast-math reciprocal can change a result; denormals are
// kept, as on the CPU.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace hs::cuda::detail {

// hs::round_bf16: round to nearest even at bit 16; a NaN stays NaN (quieted, as f32_to_bf16).
__device__ __forceinline__ float bf16_round(float f) {
  uint32_t b = __float_as_uint(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(((b >> 16) | 0x40u) << 16);
  b += 0x7fffu + ((b >> 16) & 1u);
  return __uint_as_float(b & 0xffff0000u);
}

// 2^ceil(log2(x)) for x >= 0 from the f32 bit pattern, as the reference's ue8m0 scales
// (quant_sim.cpp pow2_ceil): exponent - 127, plus one when the mantissa is non-zero; +inf -> +inf.
__device__ __forceinline__ float pow2_ceil(float x) {
  const uint32_t b = __float_as_uint(x);
  int e = static_cast<int>((b >> 23) & 0xffu) - 127;
  if (b & 0x7fffffu) e += 1;
  if (e > 127) return __uint_as_float(0x7f800000u);
  if (e >= -126) return __uint_as_float(static_cast<uint32_t>(e + 127) << 23);
  return __uint_as_float(1u << (e + 149));  // 2^-127: a denormal (only for x == 0)
}

// The block scale of a round trip: s = pow2_ceil(max(amax, floor) / qmax), amax already
// including the floor. FP8: qmax 448 (floor 1e-4); FP4: qmax 6 (floor 6 * 2^-126).
__device__ __forceinline__ float block_scale(float amax, float qmax) { return pow2_ceil(__fdiv_rn(amax, qmax)); }

// amax <- max(amax, |v|) with std::max's semantics (a NaN v leaves amax as it is).
__device__ __forceinline__ float amax_step(float amax, float v) {
  const float a = fabsf(v);
  return amax < a ? a : amax;
}

// std::clamp(v, -q, q) (a NaN passes through).
__device__ __forceinline__ float clamp_sym(float v, float q) { return v < -q ? -q : (q < v ? q : v); }

// e4m3_to_f32(f32_to_e4m3(v)): nearest E4M3FN value, ties to even, |v| >= 448 saturating to
// +-448, the sign of zero kept; NaN -> the positive quiet NaN e4m3_to_f32 returns.
__device__ __forceinline__ float e4m3_round_trip(float v) {
  if (v != v) return __uint_as_float(0x7fc00000u);
  const float a = fabsf(v);
  if (a >= 448.0f) return copysignf(448.0f, v);
  int eu = static_cast<int>((__float_as_uint(a) >> 23) & 0xffu) - 127;  // a in [2^eu, 2^(eu+1))
  if (eu < -6) eu = -6;                                                  // subnormal spacing 2^-9
  // step = 2^(eu-3) and 1/step are normal powers of two: a / step and q * step are exact.
  const float inv_step = __uint_as_float(static_cast<uint32_t>(127 + 3 - eu) << 23);
  const float step = __uint_as_float(static_cast<uint32_t>(127 - 3 + eu) << 23);
  const float q = __fmul_rn(rintf(__fmul_rn(a, inv_step)), step);  // rintf: ties to even
  return copysignf(q, v);
}

// The E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} by index.
__device__ __forceinline__ float e2m1_mag(int i) {
  return i < 4 ? 0.5f * static_cast<float>(i) : (i == 4 ? 2.0f : i == 5 ? 3.0f : i == 6 ? 4.0f : 6.0f);
}
// The index of the nearest magnitude to a = |v| (util/fp.h's candidate scan: ties to the even
// index; NaN gives 0).
__device__ __forceinline__ int e2m1_nearest(float a) {
  int best = 0;
  float bd = a;
#pragma unroll
  for (int i = 1; i < 8; ++i) {
    const float d = fabsf(__fsub_rn(a, e2m1_mag(i)));
    if (d < bd || (d == bd && (i & 1) == 0)) {
      bd = d;
      best = i;
    }
  }
  return best;
}

// e2m1_to_f32(f32_to_e2m1(v)): a negative v that rounds to 0 gives +0 (code 0), and NaN gives
// +0 as well.
__device__ __forceinline__ float e2m1_round_trip(float v) {
  const int best = e2m1_nearest(fabsf(v));
  const float bm = e2m1_mag(best);
  return (signbit(v) && best != 0) ? -bm : bm;
}

// Max over a warp of values that hold no NaN (amax_step drops them), so the order does not matter.
__device__ __forceinline__ float warp_amax(float m) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float t = __shfl_xor_sync(0xffffffffu, m, o);
    m = m < t ? t : m;
  }
  return m;
}

// One element of a block round trip with scale s (cpu::fp8_round_trip / fp4_round_trip):
// code(clamp(v / s, +-qmax)) * s.
__device__ __forceinline__ float fp8_sim(float v, float s) {
  return __fmul_rn(e4m3_round_trip(clamp_sym(__fdiv_rn(v, s), 448.0f)), s);
}
__device__ __forceinline__ float fp4_sim(float v, float s) {
  return __fmul_rn(e2m1_round_trip(clamp_sym(__fdiv_rn(v, s), 6.0f)), s);
}

// The amax floors of the reference's two round trips.
constexpr float kFp8AmaxFloor = 1e-4f;
constexpr float kFp4AmaxFloor = 6.0f * 0x1p-126f;

// One warp's FP8 round trip of the block [b0, b1) (b1 - b0 <= 128) of a row whose element i is
// at(i): out[i] = fp8_sim(at(i)) with the block's ue8m0 scale, rounded to bf16 when bf16_after.
// Lane l holds elements b0 + l + 32k. out may be what at reads (every value is read first).
template <class At>
__device__ __forceinline__ void fp8_block_warp_of(float* out, At&& at, int64_t b0, int64_t b1, bool bf16_after) {
  const int lane = threadIdx.x & 31;
  float val[4];
  float amax = kFp8AmaxFloor;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t i = b0 + lane + 32 * k;
    val[k] = i < b1 ? at(i) : 0.0f;
    if (i < b1) amax = amax_step(amax, val[k]);
  }
  const float s = block_scale(warp_amax(amax), 448.0f);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t i = b0 + lane + 32 * k;
    if (i < b1) {
      const float q = fp8_sim(val[k], s);
      out[i] = bf16_after ? bf16_round(q) : q;
    }
  }
}

// The same of in[i], rounded to bf16 first when bf16_before.
__device__ __forceinline__ void fp8_block_warp(float* out, const float* in, int64_t b0, int64_t b1, bool bf16_before,
                                               bool bf16_after) {
  fp8_block_warp_of(out, [&](int64_t i) { return bf16_before ? bf16_round(in[i]) : in[i]; }, b0, b1, bf16_after);
}

}  // namespace hs::cuda::detail
