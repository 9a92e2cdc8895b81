// Weight-type traits for the CUDA matvec/dequantize kernels: how a 16-byte chunk of a row
// decodes into E values, in parts of 4 consecutive elements (part p = elements 4p..4p+3 of
// the chunk), and where the chunk's scale lives. Decoding is exact in f32 (the value of the
// code, before the block scale), so W[o, i] = decode * scale is the CPU dequantizer's value.
#pragma once
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"

namespace hs::cuda::detail {

template <WType T>
struct WTraits;

template <>
struct WTraits<WType::F32> {
  static constexpr int E = 4;  // elements per 16-byte chunk
  static constexpr bool kScaled = false;
  __device__ static void part(const uint4& v, int, float (&w)[4]) {
    w[0] = __uint_as_float(v.x);
    w[1] = __uint_as_float(v.y);
    w[2] = __uint_as_float(v.z);
    w[3] = __uint_as_float(v.w);
  }
};

__device__ __forceinline__ uint32_t word_of(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <>
struct WTraits<WType::BF16> {
  static constexpr int E = 8;
  static constexpr bool kScaled = false;
  __device__ static void part(const uint4& v, int p, float (&w)[4]) {
    const uint32_t a = word_of(v, 2 * p), b = word_of(v, 2 * p + 1);
    w[0] = __uint_as_float(a << 16);
    w[1] = __uint_as_float(a & 0xffff0000u);
    w[2] = __uint_as_float(b << 16);
    w[3] = __uint_as_float(b & 0xffff0000u);
  }
};

template <>
struct WTraits<WType::F16> {
  static constexpr int E = 8;
  static constexpr bool kScaled = false;
  __device__ static void part(const uint4& v, int p, float (&w)[4]) {
    const uint32_t a = word_of(v, 2 * p), b = word_of(v, 2 * p + 1);
    __half2 ha, hb;
    memcpy(&ha, &a, 4);
    memcpy(&hb, &b, 4);
    const float2 fa = __half22float2(ha), fb = __half22float2(hb);
    w[0] = fa.x;
    w[1] = fa.y;
    w[2] = fb.x;
    w[3] = fb.y;
  }
};

// Signed bytes to f32 through the 2^23 magic number (exact, no int->float conversion unit):
// byte k of v (already XORed with 0x80) becomes 0x4B0000bb = 2^23 + bb.
__device__ __forceinline__ float s8_biased_to_f32(uint32_t v_xor80, int k) {
  return __uint_as_float(__byte_perm(v_xor80, 0x4B000000u, 0x7540u | static_cast<uint32_t>(k))) - 8388736.0f;
}

template <>
struct WTraits<WType::Q8_0> {
  static constexpr int E = 16;
  static constexpr bool kScaled = true;
  __device__ static void part(const uint4& v, int p, float (&w)[4]) {
    const uint32_t a = word_of(v, p) ^ 0x80808080u;
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = s8_biased_to_f32(a, k);
  }
};

template <>
struct WTraits<WType::FP8_B128> {
  static constexpr int E = 16;
  static constexpr bool kScaled = true;
  __device__ static void part(const uint4& v, int p, float (&w)[4]) {
    const uint32_t a = word_of(v, p);
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(a & 0xffffu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(a >> 16), __NV_E4M3);
    const float2 fl = __half22float2(__half2(lo)), fh = __half22float2(__half2(hi));
    w[0] = fl.x;
    w[1] = fl.y;
    w[2] = fh.x;
    w[3] = fh.y;
  }
};

// MXFP4 (ggml's doubled E2M1 table K_FP4 = 0,1,2,3,4,6,8,12 and negatives). Word w of a
// chunk (bytes 4w..4w+3) holds elements 4w..4w+3 in its low nibbles and 16+4w..19+4w in its
// high nibbles. Decoding takes the nibbles as byte-permute selectors straight from the word
// (ggml's table-of-16 trick): one permute looks up |K| + 128, one 128 - |K|, a third picks by
// the sign bit, giving biased signed bytes that the magic-number step turns into f32.
// lo[k] = element 4w+k, hi[k] = element 16+4w+k.
template <>
struct WTraits<WType::MXFP4> {
  static constexpr int E = 32;
  static constexpr bool kScaled = true;
  __device__ static void word(uint32_t q, float (&lo)[4], float (&hi)[4]) {
    constexpr uint32_t kPos0 = 0x83828180u, kPos1 = 0x8c888684u;  // 128 + |K| for codes 0..7
    constexpr uint32_t kNeg0 = 0x7d7e7f80u, kNeg1 = 0x74787a7cu;  // 128 - |K| for codes 8..15
    const uint32_t pick = 0x32103210u | ((q & 0x88888888u) >> 1);
    const uint32_t q1 = q >> 16;
    const uint32_t t0 = __byte_perm(__byte_perm(kPos0, kPos1, q), __byte_perm(kNeg0, kNeg1, q), pick);
    const uint32_t t1 = __byte_perm(__byte_perm(kPos0, kPos1, q1), __byte_perm(kNeg0, kNeg1, q1), pick >> 16);
    // t0 bytes: lo(b0), hi(b0), lo(b1), hi(b1); t1 the same for b2, b3.
    lo[0] = s8_biased_to_f32(t0, 0);
    hi[0] = s8_biased_to_f32(t0, 1);
    lo[1] = s8_biased_to_f32(t0, 2);
    hi[1] = s8_biased_to_f32(t0, 3);
    lo[2] = s8_biased_to_f32(t1, 0);
    hi[2] = s8_biased_to_f32(t1, 1);
    lo[3] = s8_biased_to_f32(t1, 2);
    hi[3] = s8_biased_to_f32(t1, 3);
  }
  // Part p < 4: elements 4p..4p+3; p >= 4: elements 4p..4p+3 = the high nibbles of word p-4.
  __device__ static void part(const uint4& v, int p, float (&w)[4]) {
    float lo[4], hi[4];
    word(word_of(v, p & 3), lo, hi);
#pragma unroll
    for (int k = 0; k < 4; ++k) w[k] = p < 4 ? lo[k] : hi[k];
  }
};

// Scale of chunk c of row `row` (global row index).
struct ScaleRef {
  const uint8_t* s;
  int64_t cols;
  __device__ __forceinline__ float get(WType t, int64_t row, int64_t c) const {
    if (t == WType::Q8_0) {
      const uint16_t d = __ldg(reinterpret_cast<const unsigned short*>(s) + row * (cols / 32) + c / 2);
      return f16_bits_to_f32(d);
    }
    if (t == WType::FP8_B128) {
      const int64_t kb = (cols + 127) / 128;
      return e8m0_to_f32(__ldg(s + (row / 128) * kb + c / 8));
    }
    if (t == WType::MXFP4) return e8m0_half_to_f32(__ldg(s + row * (cols / 32) + c));
    return 1.0f;
  }
};

template <WType T>
__host__ __device__ constexpr int64_t row_bytes(int64_t cols) {
  return T == WType::MXFP4 ? cols / 2 : T == WType::F32 ? cols * 4 : (T == WType::F16 || T == WType::BF16) ? cols * 2 : cols;
}

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// Streamed 16-byte load that does not displace L1 (weights are read once per use).
__device__ __forceinline__ uint4 ld_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// ---- Q8_0, FP8_B128, F16 and BF16 on tensor cores (matvec_mma.cu)

// Whether the tensor-core matvec takes W (its type, whole 32-element blocks).
bool mma_matvec_supported(const WeightView& W);
// Whether a matvec of n columns takes it by default (where it measured faster, n <= 32).
bool mma_matvec_default(const WeightView& W, int64_t n);
// One matvec_dispatch on tensor cores for 1 <= n <= kMatvecMmaMaxCols columns (same arguments
// as matvec_dispatch; x is read in place).
void mma_matvec(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy,
                int groups, int64_t rows_per_group, int64_t x_group);

// ---- GGML_BLOCK weights (matvec_ggml.cu): GGUF blocks decoded by quant_decode.cuh.

// Whether `t` has a device decoder.
bool ggml_block_supported(GgmlType t);
// Throws hs::Error when a block of `t` cannot be decoded faithfully (a Lucebox scale byte
// above 0x7E, which the CPU dequantizer refuses too). host: n_blocks GGUF blocks.
void ggml_block_validate(GgmlType t, const void* host, int64_t n_blocks);
// Shared memory the GGML_BLOCK matvec needs besides x (n * cols floats).
size_t ggml_matvec_smem_reserve(GgmlType t);
// One batch of matvec_dispatch for GGML_BLOCK: 1 <= n <= 8 columns whose x fits in shared
// memory next to ggml_matvec_smem_reserve (same arguments as matvec_dispatch).
void ggml_matvec(DeviceContext& ctx, const WeightView& W, const float* x, int64_t n, float* y, int64_t ldx,
                 int64_t ldy, int groups, int64_t rows_per_group, int64_t x_group);
// dequant_launch for GGML_BLOCK: out [n, cols] as f32, or bf16 (round to nearest even) when bf16.
void ggml_dequant(DeviceContext& ctx, const WeightView& W, const int32_t* rows, int64_t r0, int64_t n, void* out,
                  bool bf16);

}  // namespace hs::cuda::detail
