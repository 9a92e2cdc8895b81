// Batch-1 weight streaming with the input in registers (moe_experts.cu decode, matvec.cu n == 1).
//
// A warp owns one K-slice of 1024 input elements and walks rows: lane l holds the input values
// of its NCH = 32 / E chunks of the slice (chunk l + 32 j, E elements each: 32 floats for every
// type), so x is read once per warp instead of once per weight chunk from shared memory. Each
// step issues the 16-byte chunks of kRows rows (8 loads per lane in flight), decodes them in
// registers (weights.cuh: exact f32 values) and multiplies in f32 FMA; the kRows per-lane sums are
// then reduced across the warp by a reduce-scatter (9 shuffles for 8 rows instead of 40). Every
// sum has a fixed order (chunks, then lanes in a fixed tree, then slices in the caller): the
// results are reproducible run to run.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/weights.cuh"

namespace hs::cuda::detail {

constexpr int kSliceElems = 1024;  // input elements of one warp's K-slice

template <WType T>
struct Rs {
  using Tr = WTraits<T>;
  static constexpr int E = Tr::E;                       // elements per 16-byte chunk
  static constexpr int NCH = kSliceElems / (32 * E);    // chunks per lane and row: MXFP4 1 .. F32 8
  static constexpr int kRows = 8 / NCH;                 // rows per step
  static_assert(NCH * E == 32 && kRows * NCH == 8, "rowstream: 32 input values and 8 chunks per lane");
};

// K-slices of an input of `cols` elements.
__host__ __device__ constexpr int64_t rs_slices(int64_t cols) { return (cols + kSliceElems - 1) / kSliceElems; }

// The lane's input values of slice `slice` of x (cols floats, 16-byte aligned): xr[j*E + i] =
// x[(chunk l + 32 j of the slice) * E + i], zeros past cols.
template <WType T>
__device__ __forceinline__ void rs_load_x(const float* x, int64_t cols, int64_t slice, float (&xr)[32]) {
  constexpr int E = Rs<T>::E, NCH = Rs<T>::NCH;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int j = 0; j < NCH; ++j) {
    const int64_t c = slice * (32 * NCH) + lane + 32 * j;
    const bool ok = (c + 1) * E <= cols;
#pragma unroll
    for (int q = 0; q < E / 4; ++q) {
      const float4 v = ok ? __ldg(reinterpret_cast<const float4*>(x + c * E) + q) : make_float4(0.f, 0.f, 0.f, 0.f);
      xr[j * E + 4 * q] = v.x;
      xr[j * E + 4 * q + 1] = v.y;
      xr[j * E + 4 * q + 2] = v.z;
      xr[j * E + 4 * q + 3] = v.w;
    }
  }
}

// Unscaled dot product of one decoded chunk with the lane's chunk j (xc = &xr[j * E]).
template <WType T>
__device__ __forceinline__ float rs_dot(const uint4& raw, const float* xc) {
  using Tr = WTraits<T>;
  float part = 0.f;
  if constexpr (T == WType::MXFP4) {
#pragma unroll
    for (int wd = 0; wd < 4; ++wd) {  // word wd: elements 4wd..4wd+3 (low nibbles), 16+4wd.. (high)
      float lo[4], hi[4];
      Tr::word(word_of(raw, wd), lo, hi);
      part = fma4(lo, make_float4(xc[4 * wd], xc[4 * wd + 1], xc[4 * wd + 2], xc[4 * wd + 3]), part);
      part = fma4(hi, make_float4(xc[16 + 4 * wd], xc[17 + 4 * wd], xc[18 + 4 * wd], xc[19 + 4 * wd]), part);
    }
  } else {
#pragma unroll
    for (int p = 0; p < Tr::E / 4; ++p) {
      float w[4];
      Tr::part(raw, p, w);
      part = fma4(w, make_float4(xc[4 * p], xc[4 * p + 1], xc[4 * p + 2], xc[4 * p + 3]), part);
    }
  }
  return part;
}

// One step: acc[r] = the lane's part of row r's slice (rows at rowp[r], global row index grow[r]
// for the scales; C = 16-byte chunks per row). All loads are issued before the first multiply.
template <WType T>
__device__ __forceinline__ void rs_step(const uint8_t* const (&rowp)[Rs<T>::kRows], const int64_t (&grow)[Rs<T>::kRows],
                                        const ScaleRef& sref, int64_t C, int64_t slice, const float (&xr)[32],
                                        float (&acc)[Rs<T>::kRows]) {
  using R = Rs<T>;
  using Tr = WTraits<T>;
  const int lane = threadIdx.x & 31;
  uint4 raw[R::kRows][R::NCH];
  float sc[R::kRows][R::NCH];
#pragma unroll
  for (int r = 0; r < R::kRows; ++r)
#pragma unroll
    for (int j = 0; j < R::NCH; ++j) {
      const int64_t c = slice * (32 * R::NCH) + lane + 32 * j;
      const bool ok = c < C;
      raw[r][j] = ok ? ld_stream16(rowp[r] + c * 16) : make_uint4(0u, 0u, 0u, 0u);
      sc[r][j] = !ok ? 0.f : Tr::kScaled ? sref.get(T, grow[r], c) : 1.0f;
    }
#pragma unroll
  for (int r = 0; r < R::kRows; ++r) {
    float a = 0.f;
#pragma unroll
    for (int j = 0; j < R::NCH; ++j) {
      const float d = rs_dot<T>(raw[r][j], xr + j * R::E);
      a = Tr::kScaled ? fmaf(d, sc[r][j], a) : a + d;
    }
    acc[r] = a;
  }
}

// Sum over the warp of each of the NR per-lane values v[0..NR): a reduce-scatter (halving steps
// over lane bits 16, 8, ...; NR - 1 shuffles) then a butterfly over the remaining bits. Returns the sum of row
// `row` (set here); every lane whose low 5 - log2(NR) bits are zero holds a distinct row, and the
// lanes sharing a row hold bit-identical sums. v is clobbered.
template <int NR>
__device__ __forceinline__ float rs_reduce(float (&v)[NR], int& row) {
  constexpr int L = NR == 32 ? 5 : NR == 16 ? 4 : NR == 8 ? 3 : NR == 4 ? 2 : NR == 2 ? 1 : 0;
  static_assert((1 << L) == NR, "rs_reduce: 1, 2, 4, 8, 16 or 32 values");
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int s = 0; s < L; ++s) {
    const int o = 16 >> s, half = NR >> (s + 1);
    const bool up = (lane & o) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float keep = up ? v[i + half] : v[i], send = up ? v[i] : v[i + half];
      v[i] = keep + __shfl_xor_sync(kFullMask, send, o);
    }
  }
  float r = v[0];
#pragma unroll
  for (int o = 16 >> L; o > 0; o >>= 1) r += __shfl_xor_sync(kFullMask, r, o);
  row = 0;
#pragma unroll
  for (int s = 0; s < L; ++s) row |= ((lane >> (4 - s)) & 1) << (L - 1 - s);
  return r;
}

// Whether this lane writes its rs_reduce result (one lane per row).
template <int NR>
__device__ __forceinline__ bool rs_writer() {
  return (threadIdx.x & (32 / NR - 1)) == 0;
}

}  // namespace hs::cuda::detail
