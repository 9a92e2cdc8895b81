// Reference K-quant quantizers (no importance matrix): Q2_K, Q4_K, Q5_K, Q6_K, Q8_K.
// Same algorithm as llama.cpp's quantize_row_*_ref: fit a (scale, min) or a scale per
// sub-block, quantize those to 4/6/8 bits against one f16 super-block scale, then requantize
// every weight with the stored scales (so the codes are right for what decodes).
#include <algorithm>
#include <cmath>

#include "format/quants_impl.h"

namespace hs::qimpl {

namespace {

// Round half to even (as ggml's nearest_int), saturating; NaN -> 0.
int nint(float v) {
  if (v != v) return 0;
  v = std::clamp(v, -4194303.0f, 4194303.0f);
  return static_cast<int>(std::nearbyint(v));
}

// Asymmetric fit of x[0..n) to scale * L + min with L in [0, nmax] and min <= 0: start from
// the full range, then try nstep+1 stretched grids and keep the weighted least-squares fit of
// lowest error (absolute error if use_mad). Returns the scale; *neg_min = -min >= 0.
float fit_scale_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                    float rmin, float rdelta, int nstep, bool use_mad) {
  float mn = x[0], mx = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (mn > 0) mn = 0;
  if (mx == mn) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -mn;
    return 0.0f;
  }
  auto error = [&](float scale, float min, const uint8_t* q) {
    float e = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = scale * q[i] + min - x[i];
      e += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
    }
    return e;
  };
  float iscale = nmax / (mx - mn);
  float scale = 1 / iscale;
  for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(std::clamp(nint(iscale * (x[i] - mn)), 0, nmax));
  float best = error(scale, mn, L);
  uint8_t aux[32];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (mx - mn);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(nint(iscale * (x[i] - mn)), 0, nmax);  // mn: the best min so far
      aux[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    const float err = error(this_scale, this_min, aux);
    if (err < best) {
      std::copy(aux, aux + n, L);
      best = err;
      scale = this_scale;
      mn = this_min;
    }
  }
  *neg_min = -mn;
  return scale;
}

// Symmetric fit for Q6_K: L[i] = l + nmax with l in [-nmax, nmax), weights x^2. Starts from
// the range fit (the extreme element at -nmax), then keeps the best of 18 stretched grids.
float fit_scale_sym(int n, int nmax, const float* x, int8_t* L) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  if (amax < 1e-15f) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  auto code = [&](float iscale, int i) { return std::clamp(nint(iscale * x[i]), -nmax, nmax - 1); };
  auto sums = [&](float iscale, float& sumlx, float& suml2) {
    sumlx = suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = code(iscale, i);
      sumlx += x[i] * x[i] * x[i] * l;
      suml2 += x[i] * x[i] * l * l;
    }
  };
  auto set_codes = [&](float iscale) {
    for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(code(iscale, i) + nmax);
  };
  float sumlx, suml2;
  float iscale = -nmax / max;
  sums(iscale, sumlx, suml2);
  set_codes(iscale);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sums(iscale, sumlx, suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      set_codes(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q4_K / Q5_K pack 8 (6-bit scale, 6-bit min) pairs into 12 bytes.
void pack_scale_min_k4(const int* ls, const int* lm, uint8_t* sc) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = static_cast<uint8_t>(ls[j] | (ls[j + 4] >> 4) << 6);
    sc[j + 4] = static_cast<uint8_t>(lm[j] | (lm[j + 4] >> 4) << 6);
    sc[j + 8] = static_cast<uint8_t>((ls[j + 4] & 15) | (lm[j + 4] & 15) << 4);
  }
}

// Q4_K (nmax 15) and Q5_K (nmax 31): 8 sub-blocks of 32. L receives the final codes.
void quant_q45_k(const float* x, uint8_t* b, int nmax, float rmin, int nstep, uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_scale_min(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  int ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::clamp(nint(inv_scale * scales[j]), 0, 63);
    lm[j] = std::clamp(nint(inv_min * mins[j]), 0, 63);
  }
  wr_f16(b, max_scale / 63.0f);
  wr_f16(b + 2, max_min / 63.0f);
  pack_scale_min_k4(ls, lm, b + 4);
  const float d = rd_f16(b), dmin = rd_f16(b + 2);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * ls[j];
    if (dl == 0.0f) continue;
    const float ml = dmin * lm[j];
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(std::clamp(nint((x[32 * j + l] + ml) / dl), 0, nmax));
  }
}

}  // namespace

void q_q4_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quant_q45_k(x, b, 15, -1.0f, 20, L);
  uint8_t* qs = b + 16;  // 64-element chunk c: sub-block 2c in low nibbles, 2c+1 in high
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) qs[32 * c + l] = static_cast<uint8_t>(L[64 * c + l] | L[64 * c + 32 + l] << 4);
}

void q_q5_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  quant_q45_k(x, b, 31, -0.5f, 15, L);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  for (int l = 0; l < 32; ++l) {
    qh[l] = 0;
    for (int k = 0; k < 8; ++k) qh[l] |= static_cast<uint8_t>((L[32 * k + l] >> 4) << k);
  }
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<uint8_t>((L[64 * c + l] & 15) | (L[64 * c + 32 + l] & 15) << 4);
}

void q_q2_k(const float* x, uint8_t* b) {
  uint8_t L[256];
  float scales[16], mins[16], w[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
    scales[j] = fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  uint8_t* sc = b;
  for (int j = 0; j < 16; ++j) {
    const int ls = max_scale > 0 ? std::clamp(nint(15.0f / max_scale * scales[j]), 0, 15) : 0;
    const int lm = max_min > 0 ? std::clamp(nint(15.0f / max_min * mins[j]), 0, 15) : 0;
    sc[j] = static_cast<uint8_t>(ls | lm << 4);
  }
  wr_f16(b + 80, max_scale > 0 ? max_scale / 15.0f : 0.0f);
  wr_f16(b + 82, max_min > 0 ? max_min / 15.0f : 0.0f);
  const float d = rd_f16(b + 80), dmin = rd_f16(b + 82);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * (sc[j] & 15);
    if (dl == 0.0f) continue;
    const float ml = dmin * (sc[j] >> 4);
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<uint8_t>(std::clamp(nint((x[16 * j + l] + ml) / dl), 0, 3));
  }
  uint8_t* qs = b + 16;  // byte 32h + l: elements 128h + 32p + l at bits 2p
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* q = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(q[0] | q[32] << 2 | q[64] << 4 | q[96] << 6);
    }
}

void q_q6_k(const float* x, uint8_t* b) {
  int8_t L[256];
  float scales[16];
  float max_scale = 0, max_abs = 0;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_scale_sym(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > max_abs) {
      max_abs = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::fill(b, b + 210, uint8_t{0});
  if (max_abs < 1e-15f) return;  // all-zero block
  const float iscale = -128.0f / max_scale;
  wr_f16(b + 208, 1 / iscale);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(std::clamp(nint(iscale * scales[j]), -128, 127));
  const float d = rd_f16(b + 208);
  for (int j = 0; j < 16; ++j) {
    const float dl = d * sc[j];
    if (dl == 0.0f) continue;
    for (int l = 0; l < 16; ++l)
      L[16 * j + l] = static_cast<int8_t>(std::clamp(nint(x[16 * j + l] / dl), -32, 31) + 32);
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int e = 0; e < 256; ++e) {  // inverse of dq_q6_k's addressing
    const int h = e / 128, g = (e % 128) / 32, l = e % 32, q = L[e];
    ql[64 * h + 32 * (g & 1) + l] |= static_cast<uint8_t>((q & 15) << (g < 2 ? 0 : 4));
    qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * g));
  }
}

void q_q8_k(const float* x, uint8_t* b) {
  float amax = 0, max = 0;
  for (int i = 0; i < 256; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  std::fill(b, b + 292, uint8_t{0});
  if (amax == 0) return;
  const float iscale = -127.0f / max;  // the extreme element becomes -127
  wr_u32(b, f32_to_bits(1 / iscale));
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int i = 16 * j; i < 16 * j + 16; ++i) {
      const int q = std::min(127, nint(iscale * x[i]));
      b[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(q));
      sum += q;
    }
    wr_u16(b + 260 + 2 * j, static_cast<uint16_t>(static_cast<int16_t>(sum)));
  }
}

}  // namespace hs::qimpl
