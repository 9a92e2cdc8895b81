// IQ2_XXS quantizer: hyperstream's own search, written from the format (quant-formats.md §3.4,
// §4.3); it is not llama.cpp's algorithm and does not reproduce its bytes, only a valid
// encoding that dq_iq2_xxs decodes.
//
// Block (66 bytes): f16 d, then 8 sub-blocks of 32 weights, each 4 grid indices (one per group
// of 8) and a u32 with 4 x 7 sign bits and a 4-bit scale ls. A group decodes to
// s * grid[k] * signs with s = d * (0.5 + ls) / 4, grid levels {8, 25, 43}, and an even number
// of negative signs (the 8th sign is implied by the parity of the 7 stored ones).
//
// Search, per 256-weight block, minimising the weighted squared error Σ w (y - x)²:
//  1. Per group and grid entry k: with signs taken from x, the error at scale s is
//     Σ w x² + s² B_k - 2 s A_k, where A_k = Σ w |x| g_k and B_k = Σ w g_k². When the group has
//     an odd number of negative weights one sign must flip; the cheapest is the element with
//     the least w |x| g, which costs 4 s min_j(w |x_j| g_kj): folded into A_k. So the best
//     (entry, signs) at any s is an argmin over 256 precomputed pairs, exact.
//  2. Per sub-block, its best free scale: a geometric scan of amax / s over 8..128, then
//     closed-form refits s = Σ A / Σ B over the entries chosen.
//  3. d = 4 * (largest sub-block scale) / 15.5 (that sub-block gets ls = 15), rounded to f16.
//     Each sub-block tries the ls values around its own best scale with the decoder's exact s.
//     Then d is refitted in closed form for the chosen (ls, k) and kept when the error drops.
// d too large for f16 gives an infinite d, which quantize_row reports as out of range.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "format/quant_tables.h"
#include "format/quants_impl.h"

namespace hs::qimpl {

namespace {

constexpr int kEntries = 256;
constexpr int kScaleSteps = 24;  // geometric scan of amax / s

// The grid as floats, transposed (element j of every entry is contiguous: loops over k
// vectorise), and Σ g² per entry.
struct Grid {
  float gt[8][kEntries];
  float g2[kEntries];
};

const Grid& grid() {
  static const Grid t = [] {
    Grid r{};
    for (int k = 0; k < kEntries; ++k)
      for (int j = 0; j < 8; ++j) {
        const auto v = static_cast<float>(static_cast<uint8_t>(qtab::kIq2xxsGrid[k] >> (8 * j)));
        r.gt[j][k] = v;
        r.g2[k] += v * v;
      }
    return r;
  }();
  return t;
}

// One group of 8 weights, reduced to what the entry search needs (step 1). The error of entry
// k at scale s, less Σ w x², is s (s B_k - 2 A_k): for s > 0 the best k minimises the line
// s B_k - 2 A_k, so the lower envelope of the 256 lines (at most 12 of them for unit weights,
// see UnitClasses) answers any s exactly.
struct Group {
  float a[kEntries];  // Σ w|x|g, less 2 min_j w|x_j|g_j when the parity is odd
  float b[kEntries];  // Σ w g²
  uint8_t hull[kEntries];  // envelope lines, best first for small s
  float brk[kEntries];     // brk[i]: the s where hull[i + 1] takes over from hull[i]
  int n_hull = 0;
  float wax[8];     // w |x|
  uint8_t neg = 0;  // bit j: x_j < 0
  bool odd = false;
};

// Unit weights: the 256 entries fall into 12 classes of equal Σ g² (equal slope); only the
// entry with the largest A in a class can be best. Classes in descending Σ g² order.
struct UnitClasses {
  int n = 0;
  int begin[kEntries + 1] = {};  // class c: entries[begin[c] .. begin[c + 1])
  uint8_t entries[kEntries] = {};
};

const UnitClasses& unit_classes() {
  static const UnitClasses u = [] {
    const Grid& t = grid();
    UnitClasses r;
    for (int k = 0; k < kEntries; ++k) r.entries[k] = static_cast<uint8_t>(k);
    std::stable_sort(r.entries, r.entries + kEntries, [&](uint8_t p, uint8_t q) { return t.g2[p] > t.g2[q]; });
    for (int i = 0; i < kEntries; ++i)
      if (i == 0 || t.g2[r.entries[i]] != t.g2[r.entries[i - 1]]) r.begin[r.n++] = i;
    r.begin[r.n] = kEntries;
    return r;
  }();
  return u;
}

// Lower envelope of the lines y = b_k s - 2 a_k for the n candidate entries, given in
// descending slope order.
void build_hull(Group& G, const uint8_t* order, int n_order) {
  const auto c = [&](int k) { return -2.0 * G.a[k]; };
  int n = 0;
  for (int i = 0; i < n_order; ++i) {
    const int k = order[i];
    if (n && G.b[G.hull[n - 1]] == G.b[k]) {
      if (c(k) >= c(G.hull[n - 1])) continue;
      --n;
    }
    // The last line is useless when the new one meets the one before it no later than it does.
    while (n >= 2) {
      const int k1 = G.hull[n - 2], k2 = G.hull[n - 1];
      const double m1 = G.b[k1], m2 = G.b[k2], m3 = G.b[k];
      if ((c(k) - c(k1)) * (m1 - m2) > (c(k2) - c(k1)) * (m1 - m3)) break;
      --n;
    }
    G.hull[n++] = static_cast<uint8_t>(k);
  }
  G.n_hull = n;
  for (int i = 0; i + 1 < n; ++i) {
    const int k1 = G.hull[i], k2 = G.hull[i + 1];
    G.brk[i] = static_cast<float>((c(k2) - c(k1)) / (static_cast<double>(G.b[k1]) - G.b[k2]));
  }
}

void init_group(const float* x, const float* w, Group& G) {
  const Grid& t = grid();
  G.neg = 0;
  for (int j = 0; j < 8; ++j) {
    G.wax[j] = (w ? w[j] : 1.0f) * std::fabs(x[j]);
    if (x[j] < 0.0f) G.neg |= static_cast<uint8_t>(1u << j);
  }
  G.odd = std::popcount(G.neg) & 1;
  float mn[kEntries];
  for (int k = 0; k < kEntries; ++k) G.a[k] = 0.0f, mn[k] = std::numeric_limits<float>::infinity();
  for (int j = 0; j < 8; ++j)
    for (int k = 0; k < kEntries; ++k) {
      const float p = G.wax[j] * t.gt[j][k];
      G.a[k] += p;
      mn[k] = std::min(mn[k], p);
    }
  if (G.odd)
    for (int k = 0; k < kEntries; ++k) G.a[k] -= 2.0f * mn[k];
  if (!w) {
    std::memcpy(G.b, t.g2, sizeof G.b);
    const UnitClasses& u = unit_classes();
    uint8_t best[kEntries];
    for (int c = 0; c < u.n; ++c) {
      int k = u.entries[u.begin[c]];
      for (int i = u.begin[c] + 1; i < u.begin[c + 1]; ++i)
        if (G.a[u.entries[i]] > G.a[k]) k = u.entries[i];
      best[c] = static_cast<uint8_t>(k);
    }
    build_hull(G, best, u.n);
    return;
  }
  for (int k = 0; k < kEntries; ++k) G.b[k] = 0.0f;
  for (int j = 0; j < 8; ++j)
    for (int k = 0; k < kEntries; ++k) G.b[k] += w[j] * t.gt[j][k] * t.gt[j][k];
  std::array<uint8_t, kEntries> order{};
  for (int k = 0; k < kEntries; ++k) order[k] = static_cast<uint8_t>(k);
  std::stable_sort(order.begin(), order.end(), [&](uint8_t p, uint8_t q) { return G.b[p] > G.b[q]; });
  build_hull(G, order.data(), kEntries);
}

// The best entry at scale s > 0 and its error less the constant Σ w x².
int best_entry(const Group& G, float s, float& cost) {
  const int i = static_cast<int>(std::upper_bound(G.brk, G.brk + G.n_hull - 1, s) - G.brk);
  const int k = G.hull[i];
  cost = s * (s * G.b[k] - 2.0f * G.a[k]);
  return k;
}

// Error (less Σ w x²) of the 4 groups of a sub-block at scale s; the entries into ks.
double eval_sub(const Group* G, float s, uint8_t* ks) {
  double total = 0.0;
  for (int i = 0; i < 4; ++i) {
    float c;
    ks[i] = static_cast<uint8_t>(best_entry(G[i], s, c));
    total += c;
  }
  return total;
}

// s = Σ A / Σ B over the chosen entries (times c per sub-block for the shared d): the least-
// squares scale for fixed entries and signs.
void accumulate_fit(const Group* G, const uint8_t* ks, double c, double& num, double& den) {
  for (int i = 0; i < 4; ++i) {
    num += c * G[i].a[ks[i]];
    den += c * c * G[i].b[ks[i]];
  }
}

// Step 2: the best free scale of one sub-block (0 when it is all zeros).
float best_sub_scale(const Group* G, float amax) {
  if (amax == 0.0f) return 0.0f;
  // amax / s from 8 (every weight at the lowest level, as for flat data) to 128 (amax far past
  // the top level 43, i.e. an outlier clipped so that the rest keep their resolution).
  static const auto ratios = [] {
    std::array<float, kScaleSteps> r{};
    for (int i = 0; i < kScaleSteps; ++i) r[i] = 8.0f * std::pow(16.0f, static_cast<float>(i) / (kScaleSteps - 1));
    return r;
  }();
  float best_s = 0.0f;
  double best = std::numeric_limits<double>::infinity();
  uint8_t ks[4];
  for (float r : ratios) {
    const float s = amax / r;
    const double e = eval_sub(G, s, ks);
    if (e < best) best = e, best_s = s;
  }
  for (int it = 0; it < 3; ++it) {
    eval_sub(G, best_s, ks);
    double num = 0.0, den = 0.0;
    accumulate_fit(G, ks, 1.0, num, den);
    const auto s = static_cast<float>(num / den);
    if (!(s > 0.0f) || s == best_s) break;
    const double e = eval_sub(G, s, ks);
    if (!(e < best)) break;
    best = e, best_s = s;
  }
  return best_s;
}

struct Choice {
  float d = 0.0f;
  double err = std::numeric_limits<double>::infinity();  // less Σ w x²
  uint8_t ls[8] = {};
  uint8_t ks[8][4] = {};
};

// Step 3 for a given (f16-exact, finite, non-zero) d: each sub-block's best ls near its scale.
Choice assign(const Group* G, const float* sub_scale, float d) {
  Choice ch;
  ch.d = d;
  ch.err = 0.0;
  const float unit = d * 0.25f;
  for (int sb = 0; sb < 8; ++sb) {
    const float l = sub_scale[sb] / unit - 0.5f;
    const int lo = std::clamp(static_cast<int>(std::floor(l)) - 1, 0, 15);
    const int hi = std::clamp(static_cast<int>(std::ceil(l)) + 1, 0, 15);
    double best = std::numeric_limits<double>::infinity();
    for (int ls = std::min(lo, hi); ls <= hi; ++ls) {
      uint8_t ks[4];
      const double e = eval_sub(G + 4 * sb, d * (0.5f + static_cast<float>(ls)) * 0.25f, ks);
      if (e < best) {
        best = e;
        ch.ls[sb] = static_cast<uint8_t>(ls);
        std::memcpy(ch.ks[sb], ks, 4);
      }
    }
    ch.err += best;
  }
  return ch;
}

float round_f16(float v) { return f16_to_f32(f32_to_f16(v)); }

// Bit j of the returned 8-bit mask negates element j; its popcount is even.
uint8_t group_signs(const Group& G, int k) {
  uint8_t signs = G.neg;
  if (G.odd) {
    const Grid& t = grid();
    int flip = 0;
    for (int j = 1; j < 8; ++j)
      if (G.wax[j] * t.gt[j][k] < G.wax[flip] * t.gt[flip][k]) flip = j;
    signs ^= static_cast<uint8_t>(1u << flip);
  }
  return signs;
}

void pack(const Group* G, const Choice& ch, uint8_t* blk) {
  wr_f16(blk, ch.d);
  for (int sb = 0; sb < 8; ++sb) {
    uint8_t* p = blk + 2 + 8 * sb;
    uint32_t word = static_cast<uint32_t>(ch.ls[sb]) << 28;
    for (int i = 0; i < 4; ++i) {
      p[i] = ch.ks[sb][i];
      word |= static_cast<uint32_t>(group_signs(G[4 * sb + i], ch.ks[sb][i]) & 127) << (7 * i);
    }
    wr_u32(p + 4, word);
  }
}

}  // namespace

// w: per-weight importance (nullptr: all 1, i.e. plain squared error).
void q_iq2_xxs_weighted(const float* x, const float* w, uint8_t* blk) {
  std::memset(blk, 0, 66);
  Group G[32];
  for (int g = 0; g < 32; ++g) init_group(x + 8 * g, w ? w + 8 * g : nullptr, G[g]);
  float sub_scale[8], smax = 0.0f;
  for (int sb = 0; sb < 8; ++sb) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[32 * sb + i]));
    sub_scale[sb] = best_sub_scale(G + 4 * sb, amax);
    smax = std::max(smax, sub_scale[sb]);
  }
  const float d0 = round_f16(4.0f * smax / 15.5f);
  if (d0 == 0.0f) return;  // all zeros, or too small for an f16 d: every output 0
  if (!std::isfinite(d0)) {
    wr_f16(blk, d0);  // decodes to inf: quantize_row reports the block as out of range
    return;
  }
  Choice best = assign(G, sub_scale, d0);
  for (int it = 0; it < 2; ++it) {
    double num = 0.0, den = 0.0;
    for (int sb = 0; sb < 8; ++sb)
      accumulate_fit(G + 4 * sb, best.ks[sb], (0.5 + best.ls[sb]) * 0.25, num, den);
    const float d = round_f16(static_cast<float>(num / den));
    if (!(d > 0.0f) || !std::isfinite(d) || d == best.d) break;
    const Choice c = assign(G, sub_scale, d);
    if (!(c.err < best.err)) break;
    best = c;
  }
  pack(G, best, blk);
}

void q_iq2_xxs(const float* x, uint8_t* blk) { q_iq2_xxs_weighted(x, nullptr, blk); }

}  // namespace hs::qimpl
