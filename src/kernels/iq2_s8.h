// IQ2_XXS weights and FP8-round-tripped inputs as int8 tensor-core operands: the groundwork of
// the int8 q2 body (mma m16n8k32 s8, exact int32 sums; docs/performance.md, sessions 17-18).
// Host and device; tests/test_iq2_s8.cpp checks every grid entry and sign field, the digits,
// and the fragment placement against a host model of the mma.
//
// Weights. An IQ2_XXS grid entry's bytes are its magnitudes (8, 25, 43), so they are int8
// values as stored. A table entry keeps the 8 bytes and their bytewise negations (16 bytes); a
// byte permute per 4 elements picks each element from the positive or the negative word, its
// selector nibble j = j + 4 * sign_j. The 7-bit sign field of an 8-element group (the 8th sign
// is its parity) indexes a 128-entry table of both selectors. Per 8 weights: the index byte, the
// sign field, two table reads and two permutes (~0.8 operations a weight, against ~2.5 for the
// bf16 fragments of moe_iq2_decode.cuh).
//
// Inputs. Model numerics feed the experts FP8 round trips: x = q * S with q an E4M3 value and S
// a power of two per 128-element block, so every x of a block is a multiple of its quantum
// S * 2^-9 (the E4M3 subnormal step). With E = floor(log2(amax)), S * 2^-9 >= amax / 2^18 >
// 2^(E - 18), a power of two, hence >= 2^(E - 17): X = x / 2^(E - 17) is an integer and |X| <
// 2^(E + 1) / 2^(E - 17) = 2^18. Three balanced base-128 digits (each in [-64, 63]) hold it:
// X = d0 + 128 d1 + 16384 d2, one B column each. A block that is not such a round trip (a
// non-integer X or |X| >= 2^18) is reported, so the caller can take the bf16 path instead.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "format/quant_tables.h"
#include "kernels/state_rows.h"  // HS_HD

namespace hs::iq2s8 {

// __byte_perm(a, b, s) in its default mode (selector nibbles 0-7; bit 3 is not used here).
HS_HD constexpr uint32_t byte_perm(uint32_t a, uint32_t b, uint32_t s) {
  const uint64_t x = static_cast<uint64_t>(b) << 32 | a;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((x >> (8 * ((s >> (4 * i)) & 7u))) & 255u) << (8 * i);
  return r;
}

// The bytewise negation of a grid entry (no byte is 0, so no borrow crosses a byte).
constexpr uint64_t negated(uint64_t e) {
  uint64_t r = 0;
  for (int j = 0; j < 8; ++j) r |= static_cast<uint64_t>(static_cast<uint8_t>(-static_cast<int>((e >> (8 * j)) & 255u))) << (8 * j);
  return r;
}

// The bytewise negation of 4 grid bytes as one subtraction: 256 - b per byte, the borrows
// making each higher byte's -b (no byte is 0; the device's form of negated).
HS_HD constexpr uint32_t negated_word(uint32_t w) { return 0x01010100u - w; }

// Both permute selectors of a 7-bit sign field: elements 0-3 in the low 16 bits, 4-7 in the high.
// The 8th sign is the parity of the 7 (IQ2's ksigns table, which the tests compare against).
HS_HD constexpr uint32_t sign_selectors(uint32_t s7) {
  uint32_t par = 0;
  for (uint32_t b = s7 & 127u; b; b >>= 1) par ^= b & 1u;
  const uint32_t s = (s7 & 127u) | par << 7;
  uint32_t r = 0;
  for (uint32_t j = 0; j < 8; ++j) r |= ((j & 3u) + 4u * ((s >> j) & 1u)) << (4 * (j & 3u) + 16 * (j >> 2));
  return r;
}

// byte_perm on the device's permute instruction, the host model elsewhere.
HS_HD uint32_t perm(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
  return __byte_perm(a, b, s);
#else
  return byte_perm(a, b, s);
#endif
}

// One 8-element group as signed int8 from its grid entry's low and high words (the negations
// by negated_word): w[0] = elements 0..3, w[1] = 4..7 (little-endian bytes). The kernels' form.
HS_HD void signed_group(uint32_t lo, uint32_t hi, uint32_t sel, uint32_t (&w)[2]) {
  w[0] = perm(lo, negated_word(lo), sel);  // (a permute reads the low 16 bits)
  w[1] = perm(hi, negated_word(hi), sel >> 16);
}

static_assert(negated(0x0808080808080808ull) == 0xF8F8F8F8F8F8F8F8ull, "negation of 8 is -8 in every byte");
constexpr bool negated_words_match() {
  for (uint64_t e : qtab::kIq2xxsGrid)
    if ((static_cast<uint64_t>(negated_word(static_cast<uint32_t>(e >> 32))) << 32 |
         negated_word(static_cast<uint32_t>(e))) != negated(e))
      return false;
  return true;
}
static_assert(negated_words_match(), "IQ2_XXS grid: the word negation must equal the bytewise one");
static_assert(sign_selectors(0) == 0x32103210u, "no signs: the positive word in order");
static_assert(sign_selectors(1) == 0x72103214u, "sign 0 and its parity sign 7");

// The B columns of BC input rows (1: per slot; 4: the grouped decode's items). One row: a
// single mma n-tile, columns 0..2 its digits (lane c = 0 holds digits 0 and 1, c = 1 digit 2).
// Four rows: tile 0 column 2j + i = row j's digit i < 2, tile 1 column 2j = row j's digit 2
// (odd columns zero, not stored): lane c holds row c's three digits. Stored columns per unit:
// 3 or 12 (tile 1's at 8 + j).
HS_HD constexpr int stored_columns(int BC) { return BC == 1 ? 3 : 12; }
template <int BC>
struct Cols {
  static_assert(BC == 1 || BC == 4, "int8 columns: 1 or 4 rows");
  static constexpr int kTiles = BC == 1 ? 1 : 2;
  static constexpr int kStored = stored_columns(BC);
  HS_HD static constexpr int stored(int j, int digit) { return BC == 1 ? digit : digit < 2 ? 2 * j + digit : 8 + j; }
  // Lane g's column of tile nt as a stored column, or -1 (zeros).
  HS_HD static constexpr int lane_col(int nt, int g) {
    if (BC == 1) return g < 3 ? g : -1;
    return nt == 0 ? g : (g & 1) ? -1 : 8 + (g >> 1);
  }
};

// ---- inputs

constexpr int kDigitBits = 7;        // balanced base-128 digits
constexpr int32_t kMaxInput = 1 << 18;  // |X| bound of an FP8 round trip (module comment)

// The block's quantum exponent E - 17 from its largest magnitude (amax > 0, finite).
HS_HD int quantum_exp(float amax) {
  uint32_t u = 0;
  std::memcpy(&u, &amax, 4);
  const int e = static_cast<int>((u >> 23) & 255u);
  if (e == 0) {  // subnormal amax: floor(log2) from the mantissa's top bit
    int top = 22;
    while (top > 0 && !((u >> top) & 1u)) --top;
    return -149 + top - 17;
  }
  return e - 127 - 17;
}

// x / 2^qexp as an integer of |X| < kMaxInput; false when x is not such a multiple.
HS_HD bool to_int(float x, int qexp, int32_t& X) {
  const float v = ldexpf(x, -qexp);  // one power-of-two scaling: exact while v is a small integer
  if (!(v > -static_cast<float>(kMaxInput) && v < static_cast<float>(kMaxInput))) return false;
  X = static_cast<int32_t>(v);
  return static_cast<float>(X) == v;
}

// X = d[0] + 128 d[1] + 16384 d[2], each d in [-64, 63].
HS_HD constexpr void digits(int32_t X, int8_t (&d)[3]) {
  for (int i = 0; i < 2; ++i) {
    const int32_t lo = ((X + 64) & 127) - 64;
    d[i] = static_cast<int8_t>(lo);
    X = (X - lo) / 128;  // exact
  }
  d[2] = static_cast<int8_t>(X);
}

}  // namespace hs::iq2s8
