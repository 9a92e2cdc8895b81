#include "kernels/cpu/ops.h"

#include <algorithm>

namespace hs::cpu {

namespace {
// Dot product with 8 independent f32 lanes combined in a fixed order (vectorisable, and the
// same bits on every run and thread count).
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}
}  // namespace

void matmul(ThreadPool& pool, const float* W, int64_t out, int64_t in, const float* x, int64_t n, float* y) {
  // Parallel over output rows: each y[t, o] is one dot product, computed by one thread.
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, in * n));
  pool.parallel_for(out, grain, [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o)
      for (int64_t t = 0; t < n; ++t) y[t * out + o] = dot(W + o * in, x + t * in, in);
  });
}

}  // namespace hs::cpu
