// Internal to the quants*.cpp files: per-block codecs and little-endian field access.
// One block in, one block out; quants.cpp loops over rows and checks sizes.
#pragma once
#include <cstdint>

#include "util/fp.h"

namespace hs::qimpl {

using DequantBlock = void (*)(const uint8_t* blk, float* y);
using QuantBlock = void (*)(const float* x, uint8_t* blk);

// Little-endian field access at byte offsets (blocks are unaligned, packed byte strings).
inline uint16_t rd_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
inline uint32_t rd_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
inline float rd_f16(const uint8_t* p) { return f16_to_f32(rd_u16(p)); }
inline void wr_u16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void wr_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void wr_f16(uint8_t* p, float v) { wr_u16(p, f32_to_f16(v)); }

// ---- 32-element blocks with one scale (quants_legacy.cpp)
void dq_q4_0(const uint8_t*, float*);
void dq_q4_1(const uint8_t*, float*);
void dq_q5_0(const uint8_t*, float*);
void dq_q5_1(const uint8_t*, float*);
void dq_q8_0(const uint8_t*, float*);
void dq_iq4_nl(const uint8_t*, float*);
void dq_mxfp4(const uint8_t*, float*);
void q_q4_0(const float*, uint8_t*);
void q_q4_1(const float*, uint8_t*);
void q_q5_0(const float*, uint8_t*);
void q_q5_1(const float*, uint8_t*);
void q_q8_0(const float*, uint8_t*);
void q_mxfp4(const float*, uint8_t*);

// ---- K-quants, 256-element super-blocks (quants_k.cpp, quants_kq.cpp)
void dq_q2_k(const uint8_t*, float*);
void dq_q3_k(const uint8_t*, float*);
void dq_q4_k(const uint8_t*, float*);
void dq_q5_k(const uint8_t*, float*);
void dq_q6_k(const uint8_t*, float*);
void dq_q8_k(const uint8_t*, float*);
void q_q2_k(const float*, uint8_t*);
void q_q4_k(const float*, uint8_t*);
void q_q5_k(const float*, uint8_t*);
void q_q6_k(const float*, uint8_t*);
void q_q8_k(const float*, uint8_t*);

// ---- i-quants with grids (quants_iq.cpp)
void dq_iq2_xxs(const uint8_t*, float*);
void dq_iq2_xs(const uint8_t*, float*);
void dq_iq2_s(const uint8_t*, float*);
void dq_iq3_xxs(const uint8_t*, float*);
void dq_iq3_s(const uint8_t*, float*);
void dq_iq1_s(const uint8_t*, float*);
void dq_iq1_m(const uint8_t*, float*);
void dq_iq4_xs(const uint8_t*, float*);
// IQ2_XXS quantizer (quants_iq2q.cpp); w: per-weight importance, nullptr for all 1.
void q_iq2_xxs(const float*, uint8_t*);
void q_iq2_xxs_weighted(const float* x, const float* w, uint8_t* blk);

// ---- Lucebox ROCm types (quants_rocm.cpp)
void dq_rocm_fp4(const uint8_t*, float*);
void dq_rocm_fp4_fast(const uint8_t*, float*);
void dq_rocm_fp6(const uint8_t*, float*);
void dq_rocm_fp8(const uint8_t*, float*);
void dq_rocm_fp3(const uint8_t*, float*);
void dq_rocm_fp2(const uint8_t*, float*);

}  // namespace hs::qimpl
