// I-quant dequantizers: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_XS.
// A group of 8 (or 4) weights is a grid entry (quant_tables.h) times a sub-block scale,
// with per-weight signs. Expressions follow ggml's order; all products are exact in f32.
#include "format/quant_tables.h"
#include "format/quants_impl.h"

namespace hs::qimpl {

namespace {

// Element j of a packed grid entry (byte j, little-endian).
template <typename T>
float grid_at(T entry, int j) {
  return static_cast<float>(static_cast<uint8_t>(entry >> (8 * j)));
}
float iq1_grid_at(uint64_t entry, int j) {
  return static_cast<float>(static_cast<int8_t>(static_cast<uint8_t>(entry >> (8 * j))));
}
float sign_of(uint8_t mask, int j) { return (mask >> j & 1) ? -1.0f : 1.0f; }

// 8 outputs = db * grid entry * signs (bit j of `signs` negates element j).
void put8(float* y, float db, uint64_t entry, uint8_t signs) {
  for (int j = 0; j < 8; ++j) y[j] = db * grid_at(entry, j) * sign_of(signs, j);
}
// The same for two 4-wide IQ3 entries forming one group of 8.
void put4x2(float* y, float db, uint32_t e0, uint32_t e1, uint8_t signs) {
  for (int j = 0; j < 4; ++j) {
    y[j] = db * grid_at(e0, j) * sign_of(signs, j);
    y[j + 4] = db * grid_at(e1, j) * sign_of(signs, j + 4);
  }
}
// IQ1: dl * (grid value in {-1,0,1} + delta).
void put8_iq1(float* y, float dl, uint64_t entry, float delta) {
  for (int j = 0; j < 8; ++j) y[j] = dl * (iq1_grid_at(entry, j) + delta);
}

constexpr float kIq1Delta = 0.125f;

// IQ2_XS / IQ2_S: group i (0..3) of a sub-block uses the low (i < 2) or high nibble of the
// sub-block's scale byte; db = d * (0.5 + ls) / 4.
float iq2_group_scale(float d, uint8_t scale_byte, int i) {
  const int ls = i < 2 ? scale_byte & 15 : scale_byte >> 4;
  return d * (0.5f + static_cast<float>(ls)) * 0.25f;
}

}  // namespace

void dq_iq2_xxs(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  for (int sb = 0; sb < 8; ++sb) {
    const uint8_t* p = b + 2 + 8 * sb;
    const uint32_t w = rd_u32(p + 4);  // 4 x 7 sign bits, then the 4-bit scale
    const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.25f;
    for (int i = 0; i < 4; ++i)
      put8(y + 32 * sb + 8 * i, db, qtab::kIq2xxsGrid[p[i]], qtab::kKsignsIq2xs[w >> (7 * i) & 127]);
  }
}

void dq_iq2_xs(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* scales = b + 66;
  for (int t = 0; t < 32; ++t) {
    const uint16_t v = rd_u16(b + 2 + 2 * t);  // 9-bit grid index, 7-bit sign index
    put8(y + 8 * t, iq2_group_scale(d, scales[t / 4], t % 4), qtab::kIq2xsGrid[v & 511],
         qtab::kKsignsIq2xs[v >> 9]);
  }
}

void dq_iq2_s(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* idxlo = b + 2;
  const uint8_t* signs = b + 34;
  const uint8_t* qh = b + 66;
  const uint8_t* scales = b + 74;
  for (int t = 0; t < 32; ++t) {
    const int sb = t / 4, i = t % 4;
    const int idx = idxlo[t] | (qh[sb] >> (2 * i) & 3) << 8;  // 10-bit grid index
    put8(y + 8 * t, iq2_group_scale(d, scales[sb], i), qtab::kIq2sGrid[idx], signs[t]);
  }
}

void dq_iq3_xxs(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* qs = b + 2;
  for (int sb = 0; sb < 8; ++sb) {
    const uint32_t w = rd_u32(b + 66 + 4 * sb);
    const float db = d * (0.5f + static_cast<float>(w >> 28)) * 0.5f;
    for (int i = 0; i < 4; ++i)
      put4x2(y + 32 * sb + 8 * i, db, qtab::kIq3xxsGrid[qs[8 * sb + 2 * i]],
             qtab::kIq3xxsGrid[qs[8 * sb + 2 * i + 1]], qtab::kKsignsIq2xs[w >> (7 * i) & 127]);
  }
}

void dq_iq3_s(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* qs = b + 2;
  const uint8_t* qh = b + 66;
  const uint8_t* signs = b + 74;
  const uint8_t* scales = b + 106;
  for (int sb = 0; sb < 8; ++sb) {
    const int ls = scales[sb / 2] >> (4 * (sb % 2)) & 15;
    const float db = d * static_cast<float>(1 + 2 * ls);
    for (int i = 0; i < 4; ++i) {
      const int i1 = qs[8 * sb + 2 * i] | (qh[sb] >> (2 * i) & 1) << 8;
      const int i2 = qs[8 * sb + 2 * i + 1] | (qh[sb] >> (2 * i + 1) & 1) << 8;
      put4x2(y + 32 * sb + 8 * i, db, qtab::kIq3sGrid[i1], qtab::kIq3sGrid[i2], signs[4 * sb + i]);
    }
  }
}

void dq_iq1_s(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint8_t* qs = b + 2;
  for (int sb = 0; sb < 8; ++sb) {
    const uint16_t h = rd_u16(b + 34 + 2 * sb);  // 4 x 3 index bits, 3-bit scale, delta sign
    const float dl = d * static_cast<float>(2 * (h >> 12 & 7) + 1);
    const float delta = (h & 0x8000) ? -kIq1Delta : kIq1Delta;
    for (int i = 0; i < 4; ++i) {
      const int idx = qs[4 * sb + i] | (h >> (3 * i) & 7) << 8;
      put8_iq1(y + 32 * sb + 8 * i, dl, qtab::kIq1sGrid[idx], delta);
    }
  }
}

void dq_iq1_m(const uint8_t* b, float* y) {
  const uint8_t* qs = b;
  const uint8_t* qh = b + 32;
  uint16_t sc[4];
  for (int k = 0; k < 4; ++k) sc[k] = rd_u16(b + 48 + 2 * k);
  // No d field: the f16 super-block scale is the top nibbles of the four scale words.
  const float d = f16_to_f32(static_cast<uint16_t>(sc[0] >> 12 | (sc[1] >> 12) << 4 |
                                                   (sc[2] >> 12) << 8 | (sc[3] >> 12) << 12));
  for (int sb = 0; sb < 8; ++sb) {
    const int w = sc[sb / 2] >> (6 * (sb % 2));
    const float dl_a = d * static_cast<float>(2 * (w & 7) + 1);         // groups 0, 1
    const float dl_b = d * static_cast<float>(2 * (w >> 3 & 7) + 1);    // groups 2, 3
    for (int i = 0; i < 4; ++i) {
      const int nib = qh[2 * sb + i / 2] >> (4 * (i % 2)) & 15;
      const int idx = qs[4 * sb + i] | (nib & 7) << 8;
      const float delta = (nib & 8) ? -kIq1Delta : kIq1Delta;
      put8_iq1(y + 32 * sb + 8 * i, i < 2 ? dl_a : dl_b, qtab::kIq1sGrid[idx], delta);
    }
  }
}

void dq_iq4_xs(const uint8_t* b, float* y) {
  const float d = rd_f16(b);
  const uint16_t scales_h = rd_u16(b + 2);
  const uint8_t* scales_l = b + 4;
  const uint8_t* qs = b + 8;
  for (int sb = 0; sb < 8; ++sb) {
    const int ls = (scales_l[sb / 2] >> (4 * (sb % 2)) & 15) | (scales_h >> (2 * sb) & 3) << 4;
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[32 * sb + j] = dl * qtab::kValuesIq4nl[qs[16 * sb + j] & 15];
      y[32 * sb + 16 + j] = dl * qtab::kValuesIq4nl[qs[16 * sb + j] >> 4];
    }
  }
}

}  // namespace hs::qimpl
