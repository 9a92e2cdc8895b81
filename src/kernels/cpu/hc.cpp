// Manifold-constrained hyper-connections: hc_pre (with Sinkhorn), hc_post, hc_head, hc_stream_mean.
#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace hs::cpu {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// m[r] = fn[r] . (v * rsqrt(mean(v^2) + eps)), accumulated in f64 (the reference does this
// projection in full f32; f64 keeps our side of the comparison exact to f32 rounding).
void hc_mix(const float* fn, int rows, int64_t len, const float* v, float norm_eps, float* m) {
  double ss = 0;
  for (int64_t i = 0; i < len; ++i) ss += static_cast<double>(v[i]) * v[i];
  const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(len)) + norm_eps);
  for (int k = 0; k < rows; ++k) {
    double acc = 0;
    const float* f = fn + static_cast<int64_t>(k) * len;
    for (int64_t i = 0; i < len; ++i) acc += static_cast<double>(f[i]) * (v[i] * r);
    m[k] = static_cast<float>(acc);
  }
}
}  // namespace

void sinkhorn(float* A, int hc, int iters, float eps) {
  // Row softmax (over the output index k) plus eps, then a column normalisation.
  for (int j = 0; j < hc; ++j) {
    float* row = A + j * hc;
    float mx = row[0];
    for (int k = 1; k < hc; ++k) mx = std::max(mx, row[k]);
    float s = 0;
    for (int k = 0; k < hc; ++k) {
      row[k] = std::exp(row[k] - mx);
      s += row[k];
    }
    for (int k = 0; k < hc; ++k) row[k] = row[k] / s + eps;
  }
  auto col_norm = [&] {
    for (int k = 0; k < hc; ++k) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += A[j * hc + k];
      for (int j = 0; j < hc; ++j) A[j * hc + k] /= (s + eps);
    }
  };
  auto row_norm = [&] {
    for (int j = 0; j < hc; ++j) {
      float s = 0;
      for (int k = 0; k < hc; ++k) s += A[j * hc + k];
      for (int k = 0; k < hc; ++k) A[j * hc + k] /= (s + eps);
    }
  };
  col_norm();
  for (int it = 0; it < iters - 1; ++it) {
    row_norm();
    col_norm();
  }
}

void hc_pre(ThreadPool& pool, const HcParams& p, const float* X, int64_t n, float* u, float* post, float* comb) {
  const int hc = p.hc;
  const int mix = (2 + hc) * hc;
  const int64_t len = hc * p.dim;
  pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
    std::vector<float> m(static_cast<size_t>(mix));
    for (int64_t t = b; t < e; ++t) {
      const float* x = X + t * len;
      hc_mix(p.fn, mix, len, x, p.norm_eps, m.data());
      float pre[8];
      for (int j = 0; j < hc; ++j) {
        pre[j] = sigmoid(m[j] * p.scale[0] + p.base[j]) + p.hc_eps;
        post[t * hc + j] = 2.0f * sigmoid(m[hc + j] * p.scale[1] + p.base[hc + j]);
      }
      float* A = comb + t * hc * hc;
      for (int q = 0; q < hc * hc; ++q) A[q] = m[2 * hc + q] * p.scale[2] + p.base[2 * hc + q];
      sinkhorn(A, hc, p.sinkhorn_iters, p.hc_eps);
      for (int64_t c = 0; c < p.dim; ++c) {
        float s = 0;
        for (int j = 0; j < hc; ++j) s += pre[j] * x[j * p.dim + c];
        u[t * p.dim + c] = s;
      }
    }
  });
}

void hc_post(const float* y, const float* post, const float* comb, int64_t n, int hc, int64_t dim, float* X) {
  std::vector<float> old(static_cast<size_t>(hc * dim));
  for (int64_t t = 0; t < n; ++t) {
    float* x = X + t * hc * dim;
    std::copy(x, x + hc * dim, old.begin());
    const float* A = comb + t * hc * hc;
    for (int k = 0; k < hc; ++k)
      for (int64_t c = 0; c < dim; ++c) {
        float s = post[t * hc + k] * y[t * dim + c];
        for (int j = 0; j < hc; ++j) s += A[j * hc + k] * old[static_cast<size_t>(j * dim + c)];
        x[k * dim + c] = s;
      }
  }
}

void hc_head(const float* fn, const float* base, const float* scale, int hc, int64_t dim, float hc_eps,
             float norm_eps, const float* X, int64_t n, float* h) {
  std::vector<float> m(static_cast<size_t>(hc));
  for (int64_t t = 0; t < n; ++t) {
    const float* x = X + t * hc * dim;
    hc_mix(fn, hc, hc * dim, x, norm_eps, m.data());
    float pre[8];
    for (int j = 0; j < hc; ++j) pre[j] = sigmoid(m[j] * scale[0] + base[j]) + hc_eps;
    for (int64_t c = 0; c < dim; ++c) {
      float s = 0;
      for (int j = 0; j < hc; ++j) s += pre[j] * x[j * dim + c];
      h[t * dim + c] = s;
    }
  }
}

void hc_stream_mean(const float* X, int64_t n, int hc, int64_t dim, float* out, int64_t stride) {
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < dim; ++c) {
      double s = 0;
      for (int j = 0; j < hc; ++j) s += X[(t * hc + j) * dim + c];
      out[t * stride + c] = static_cast<float>(s / static_cast<double>(hc));
    }
}

}  // namespace hs::cpu
