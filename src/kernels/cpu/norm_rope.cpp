// RMSNorm and interleaved partial RoPE (plain and YaRN frequency tables).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ops.h"

namespace hs::cpu {

void rmsnorm(const float* x, const float* w, int64_t rows, int64_t d, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + eps);
    float* yr = y + r * d;
    for (int64_t i = 0; i < d; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void rmsnorm_unweighted(float* x, int64_t rows, int64_t d, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * d;
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(d)) + eps);
    for (int64_t i = 0; i < d; ++i) xr[i] *= inv;
  }
}

std::vector<float> rope_inv_freq(int rope_dim, float theta) {
  std::vector<float> f(static_cast<size_t>(rope_dim / 2));
  for (int i = 0; i < rope_dim / 2; ++i)
    f[static_cast<size_t>(i)] =
        1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
  return f;
}

std::vector<float> rope_inv_freq_yarn(int rope_dim, float theta, float factor, double original_ctx, float beta_fast,
                                      float beta_slow) {
  // ds4-model-spec.md §3.6: blend between the plain and the factor-divided frequencies with a
  // linear ramp over [lo, hi] (floor/ceil of the correction dims). No magnitude scaling.
  const double two_pi = 2.0 * M_PI;
  auto corr = [&](double rotations) {
    return rope_dim * std::log(original_ctx / (rotations * two_pi)) / (2.0 * std::log(static_cast<double>(theta)));
  };
  double lo = std::max(std::floor(corr(beta_fast)), 0.0);
  double hi = std::min(std::ceil(corr(beta_slow)), static_cast<double>(rope_dim - 1));
  if (lo == hi) hi += 0.001;
  std::vector<float> plain = rope_inv_freq(rope_dim, theta);
  std::vector<float> f(plain.size());
  for (size_t i = 0; i < f.size(); ++i) {
    float ramp = static_cast<float>((static_cast<double>(i) - lo) / (hi - lo));
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrap = 1.0f - ramp;  // weight of the unscaled frequency
    const float pos_freq = std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(rope_dim));
    const float interp_f = 1.0f / (factor * pos_freq);
    const float extrap_f = 1.0f / pos_freq;
    f[i] = interp_f * (1.0f - extrap) + extrap_f * extrap;
  }
  return f;
}

void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, int rope_dim, const int64_t* pos,
          const float* inv_freq, int sign) {
  const int half = rope_dim / 2;
  for (int64_t t = 0; t < n; ++t) {
    const float p = static_cast<float>(pos[t]);
    for (int i = 0; i < half; ++i) {
      const float ang = p * inv_freq[i];  // f32 product, as the reference computes it
      const float c = std::cos(ang), s = sign * std::sin(ang);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim + (head_dim - rope_dim) + 2 * i;
        const float a = v[0], b = v[1];
        v[0] = a * c - b * s;
        v[1] = b * c + a * s;
      }
    }
  }
}

}  // namespace hs::cpu
