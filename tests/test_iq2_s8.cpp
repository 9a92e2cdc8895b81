// The int8 operands of the planned q2 body (src/kernels/iq2_s8.h) against independent
// expectations: every IQ2_XXS grid entry under every sign field equals the signed grid bytes;
// FP8 round trips (cpu::fp8_round_trip, the model numerics' input quantisation) become integers
// of fewer than 18 bits and three digits that recombine exactly, and a value that is not such a
// round trip is reported; the body's fragment placement, run through a host model of PTX's
// mma.m16n8k32 s8 layout, gives each row's dot product with each digit column.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "format/quant_tables.h"
#include "kernels/cpu/ops.h"
#include "kernels/iq2_s8.h"

namespace {

using namespace hs;

int8_t byte_of(uint32_t w, int i) { return static_cast<int8_t>((w >> (8 * i)) & 255u); }

TEST(Iq2S8, SignedGroupsEqualTheSignedGrid) {
  int64_t bad = 0;
  for (int e = 0; e < 256; ++e) {
    const uint64_t pos = qtab::kIq2xxsGrid[e];
    for (uint32_t s7 = 0; s7 < 128; ++s7) {
      uint32_t w[2];
      iq2s8::signed_group(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32), iq2s8::sign_selectors(s7), w);
      const uint32_t signs = qtab::kKsignsIq2xs[s7];
      for (int j = 0; j < 8; ++j) {
        const int mag = static_cast<int>((pos >> (8 * j)) & 255u);
        const int want = (signs >> j) & 1u ? -mag : mag;
        bad += byte_of(w[j >> 2], j & 3) != want;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

// Rows at scales from subnormal-adjacent to large, with zeros, through the FP8 round trip.
TEST(Iq2S8, Fp8RoundTripsAreDigitsOfSmallIntegers) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t D = 1024;
  for (float scale : {1e-3f, 0.37f, 1.0f, 5.5f, 300.0f, 6e4f}) {
    std::vector<float> x(static_cast<size_t>(D));
    for (int64_t i = 0; i < D; ++i) x[static_cast<size_t>(i)] = i % 97 == 0 ? 0.f : scale * nd(rng);
    cpu::fp8_round_trip(x.data(), 1, D, D, 128);
    for (int64_t b = 0; b < D; b += 128) {
      float amax = 0.f;
      for (int64_t i = b; i < b + 128; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(i)]));
      ASSERT_GT(amax, 0.f);
      const int q = iq2s8::quantum_exp(amax);
      int32_t big = 0;
      for (int64_t i = b; i < b + 128; ++i) {
        const float v = x[static_cast<size_t>(i)];
        int32_t X = 0;
        ASSERT_TRUE(iq2s8::to_int(v, q, X)) << "scale " << scale << " element " << i << " value " << v;
        EXPECT_EQ(std::ldexp(static_cast<double>(X), q), static_cast<double>(v));
        big = std::max(big, X < 0 ? -X : X);
        int8_t d[3];
        iq2s8::digits(X, d);
        for (int8_t di : d) EXPECT_TRUE(di >= -64 && di <= 63);
        EXPECT_EQ(d[0] + 128 * d[1] + 16384 * d[2], X);
      }
      EXPECT_LT(big, iq2s8::kMaxInput);
      EXPECT_GE(big, iq2s8::kMaxInput / 8) << "the quantum is at most 4x finer than it needs to be";
    }
  }
  // Not round trips: a value with more significant bits than E4M3 relative to the block's top.
  const float amax = 3.0f;
  int32_t X = 0;
  EXPECT_FALSE(iq2s8::to_int(1.0f + 0x1p-20f, iq2s8::quantum_exp(amax), X));
  EXPECT_FALSE(iq2s8::to_int(8.0f, iq2s8::quantum_exp(amax), X));  // |X| past the bound (x above amax)
  // Every digit triple of the full input range recombines.
  for (int32_t v = -iq2s8::kMaxInput + 1; v < iq2s8::kMaxInput; v += 37) {
    int8_t d[3];
    iq2s8::digits(v, d);
    ASSERT_EQ(d[0] + 128 * d[1] + 16384 * d[2], v);
  }
}

// PTX ISA, mma.m16n8k32 with .s8 A and B: lane (g, c) = (lane / 4, lane % 4) holds A rows g and
// g + 8 at k = 4c..4c+3 (a0, a1) and 16 + 4c.. (a2, a3); B column g at k = 4c.. (b0) and 16 +
// 4c.. (b1); C rows g, g + 8 at columns 2c, 2c + 1.
struct Frag {
  uint32_t a[32][4], b[32][2];
};
void mma_s8_model(const Frag& f, int32_t (&C)[16][8]) {
  int8_t A[16][32] = {}, B[32][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, c = lane % 4;
    for (int i = 0; i < 4; ++i) {
      A[g][4 * c + i] = byte_of(f.a[lane][0], i);
      A[g + 8][4 * c + i] = byte_of(f.a[lane][1], i);
      A[g][16 + 4 * c + i] = byte_of(f.a[lane][2], i);
      A[g + 8][16 + 4 * c + i] = byte_of(f.a[lane][3], i);
      B[4 * c + i][g] = byte_of(f.b[lane][0], i);
      B[16 + 4 * c + i][g] = byte_of(f.b[lane][1], i);
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      int32_t s = 0;
      for (int k = 0; k < 32; ++k) s += A[r][k] * B[k][n];
      C[r][n] = s;
    }
}

// The planned body's placement of one 32-element unit of 16 rows: lane (g, c) takes group c
// (elements 8c..8c+7) of rows g and g + 8 as a0/a1 (elements 8c..8c+3) and a2/a3 (8c+4..8c+7);
// B column j < 3 holds digit j of the same elements in the same places.
TEST(Iq2S8, FragmentPlacementGivesEachRowsDotProducts) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 50; ++trial) {
    uint8_t grid[16][4], sign[16][4];  // per row: the unit's four groups' grid index and sign field
    int8_t d[32][3];                     // per element: the input's digits
    for (auto& r : grid)
      for (auto& v : r) v = static_cast<uint8_t>(rng() & 255u);
    for (auto& r : sign)
      for (auto& v : r) v = static_cast<uint8_t>(rng() & 127u);
    for (auto& e : d) {
      int8_t t[3];
      iq2s8::digits(static_cast<int32_t>(rng() % (2 * iq2s8::kMaxInput - 1)) - iq2s8::kMaxInput + 1, t);
      for (int j = 0; j < 3; ++j) e[j] = t[j];
    }
    auto w_of = [&](int row, int e) {  // element e of a row, from the grid and signs directly
      const int grp = e / 8, j = e % 8;
      const int mag = static_cast<int>((qtab::kIq2xxsGrid[grid[row][grp]] >> (8 * j)) & 255u);
      return (qtab::kKsignsIq2xs[sign[row][grp]] >> j) & 1u ? -mag : mag;
    };
    Frag f{};
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, c = lane % 4;
      for (int h = 0; h < 2; ++h) {
        const int row = g + 8 * h;
        const uint64_t pos = qtab::kIq2xxsGrid[grid[row][c]];
        uint32_t w[2];
        iq2s8::signed_group(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                            iq2s8::sign_selectors(sign[row][c]), w);
        f.a[lane][h] = w[0], f.a[lane][2 + h] = w[1];
      }
      for (int half = 0; half < 2; ++half) {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i)
          v |= static_cast<uint32_t>(static_cast<uint8_t>(g < 3 ? d[8 * c + 4 * half + i][g] : 0)) << (8 * i);
        f.b[lane][half] = v;
      }
    }
    int32_t C[16][8];
    mma_s8_model(f, C);
    for (int row = 0; row < 16; ++row)
      for (int col = 0; col < 8; ++col) {
        int32_t want = 0;
        if (col < 3)
          for (int e = 0; e < 32; ++e) want += w_of(row, e) * d[e][col];
        ASSERT_EQ(C[row][col], want) << "trial " << trial << " row " << row << " column " << col;
      }
  }
}

// The kernel's column maps (iq2s8::Cols) for 1 and 4 input rows: digits staged at their stored
// columns, each lane's B fragment read through lane_col, the tiles multiplied by the mma model
// and combined as the kernel does (digit 0 + 128 x digit 1 + 16384 x digit 2 from the lanes that
// hold them) equal each weight row's dot product with each input row.
template <int BC>
void check_columns(std::mt19937& rng) {
  using C = iq2s8::Cols<BC>;
  uint8_t grid[16][4], sign[16][4];
  int32_t X[BC][32];
  for (auto& r : grid)
    for (auto& v : r) v = static_cast<uint8_t>(rng() & 255u);
  for (auto& r : sign)
    for (auto& v : r) v = static_cast<uint8_t>(rng() & 127u);
  for (auto& r : X)
    for (auto& v : r) v = static_cast<int32_t>(rng() % (2 * iq2s8::kMaxInput - 1)) - iq2s8::kMaxInput + 1;
  // Staged unit: stored column s, element e -> digit.
  int8_t st[C::kStored][32] = {};
  for (int j = 0; j < BC; ++j)
    for (int e = 0; e < 32; ++e) {
      int8_t d[3];
      iq2s8::digits(X[j][e], d);
      for (int dd = 0; dd < 3; ++dd) st[C::stored(j, dd)][e] = d[dd];
    }
  int64_t C32[C::kTiles][16][8];
  for (int nt = 0; nt < C::kTiles; ++nt) {
    Frag f{};
    for (int lane = 0; lane < 32; ++lane) {
      const int g = lane / 4, c = lane % 4;
      for (int h = 0; h < 2; ++h) {
        const uint64_t pos = qtab::kIq2xxsGrid[grid[g + 8 * h][c]];
        uint32_t w[2];
        iq2s8::signed_group(static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                            iq2s8::sign_selectors(sign[g + 8 * h][c]), w);
        f.a[lane][h] = w[0], f.a[lane][2 + h] = w[1];
      }
      const int col = C::lane_col(nt, g);
      for (int half = 0; half < 2; ++half) {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i)
          v |= static_cast<uint32_t>(static_cast<uint8_t>(col >= 0 ? st[col][8 * c + 4 * half + i] : 0)) << (8 * i);
        f.b[lane][half] = v;
      }
    }
    int32_t out[16][8];
    mma_s8_model(f, out);
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) C32[nt][r][n] = out[r][n];
  }
  for (int row = 0; row < 16; ++row)
    for (int j = 0; j < BC; ++j) {
      int64_t want = 0;
      for (int e = 0; e < 32; ++e) {
        const int grp = e / 8, k = e % 8;
        const int mag = static_cast<int>((qtab::kIq2xxsGrid[grid[row][grp]] >> (8 * k)) & 255u);
        want += static_cast<int64_t>((qtab::kKsignsIq2xs[sign[row][grp]] >> k) & 1u ? -mag : mag) * X[j][e];
      }
      // BC = 1: lane c = 0 holds columns 0, 1 and lane c = 1 column 2; BC = 4: lane c = j holds
      // tile 0's columns 2j, 2j + 1 and tile 1's column 2j.
      const int64_t got = BC == 1 ? C32[0][row][0] + 128 * C32[0][row][1] + 16384 * C32[0][row][2]
                                  : C32[0][row][2 * j] + 128 * C32[0][row][2 * j + 1] + 16384 * C32[C::kTiles - 1][row][2 * j];
      ASSERT_EQ(got, want) << "BC " << BC << " row " << row << " input " << j;
      if (BC == 4) ASSERT_EQ(C32[C::kTiles - 1][row][2 * j + 1], 0) << "tile 1's odd columns are zeros";
    }
}

TEST(Iq2S8, ColumnMapsGiveEachInputsDotProducts) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 40; ++trial) {
    check_columns<1>(rng);
    check_columns<4>(rng);
  }
}

}  // namespace
