// util/: scalar format conversions against independently known values, and the thread
// pool's determinism.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <numeric>

#include "util/fp.h"
#include "util/thread_pool.h"

using namespace hs;

TEST(Fp, Bf16KnownValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  // 1 + 2^-8 is halfway between bf16 1.0 and 1.0078125: ties to even -> 1.0
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1.0078125 (odd) and 1.015625 (even) -> up
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
}

TEST(Fp, F16KnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  for (uint32_t h = 0; h < 0x7c00; ++h) {  // every finite positive half round-trips
    ASSERT_EQ(f32_to_f16(f16_to_f32(static_cast<uint16_t>(h))), h) << h;
  }
}

TEST(Fp, E4M3KnownValues) {
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0xb8), -1.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  for (int v = 0; v < 256; ++v) {  // every finite code round-trips through f32
    if ((v & 0x7f) == 0x7f) continue;
    float f = e4m3_to_f32(static_cast<uint8_t>(v));
    if (f == 0.0f) continue;
    ASSERT_EQ(f32_to_e4m3(f), v) << v;
  }
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // halfway 1.0 / 1.125: ties to even mantissa
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // halfway 1.125 / 1.25 -> 1.25 (even)
}

TEST(Fp, E8M0AndE2M1) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_EQ(e8m0_to_f32(120), 0x1p-7f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
  const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(i)), (i & 8 ? -1 : 1) * mags[i & 7]);
  EXPECT_EQ(f32_to_e2m1(5.0f), 6);    // tie between 4 and 6 -> even code (4)
  EXPECT_EQ(f32_to_e2m1(-0.75f), 10); // tie 0.5/1.0 -> 1.0 (code 2), negative
}

TEST(ThreadPool, CoversEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1003);
  pool.parallel_for(1003, 7, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, ResultIndependentOfThreadCount) {
  std::vector<float> x(10000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 1e3f;
  auto run = [&](int threads) {
    ThreadPool pool(threads);
    std::vector<float> out(100);
    pool.parallel_for(100, 1, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float acc = 0;
        for (size_t i = 0; i < x.size(); ++i) acc += x[i] * static_cast<float>(r + 1);
        out[r] = acc;
      }
    });
    return out;
  };
  EXPECT_EQ(run(1), run(3));
}
