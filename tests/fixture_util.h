// Helpers for the model-fixture parity tests: load a fixture's expected.safetensors and
// compare logits the way ../shared/fixtures/README.md defines the pass mark.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "format/safetensors.h"

namespace hs::test {

struct Expected {
  std::vector<int32_t> tokens;
  std::vector<float> logits;  // [T, vocab]
  int64_t vocab = 0;
  std::vector<int64_t> chunk_sizes;
  std::vector<float> hc_states;  // [layers, T, hc, D] (tiny only)
};

inline Expected load_expected(const std::string& dir) {
  st::File f(dir + "/expected.safetensors");
  Expected e;
  const auto& tk = f.tensors().at("tokens");
  e.tokens.resize(static_cast<size_t>(tk.n_elements()));
  std::memcpy(e.tokens.data(), tk.data, tk.nbytes);
  const auto& lg = f.tensors().at("logits");
  e.vocab = lg.shape[1];
  e.logits.resize(static_cast<size_t>(lg.n_elements()));
  std::memcpy(e.logits.data(), lg.data, lg.nbytes);
  const auto& cs = f.tensors().at("chunk_sizes");
  for (int64_t i = 0; i < cs.n_elements(); ++i) {
    int32_t v;
    std::memcpy(&v, cs.data + 4 * i, 4);
    e.chunk_sizes.push_back(v);
  }
  if (f.tensors().count("hc_states")) {
    const auto& hs = f.tensors().at("hc_states");
    e.hc_states.resize(static_cast<size_t>(hs.n_elements()));
    std::memcpy(e.hc_states.data(), hs.data, hs.nbytes);
  }
  return e;
}

inline double rel_l2(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

// max |a - b| / max(1, max |b|): the drafter fixtures' bound (relative to the largest expected
// magnitude, at least 1).
inline double max_rel(const float* a, const float* b, size_t n) {
  double d = 0, m = 1;
  for (size_t i = 0; i < n; ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return d / m;
}

// The values of one tensor of a safetensors file (T: its element type).
template <typename T>
std::vector<T> tensor_values(const st::File& f, const std::string& name) {
  const auto& t = f.tensors().at(name);
  std::vector<T> v(static_cast<size_t>(t.n_elements()));
  std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

// Number of rows whose argmax differs (NaN anywhere counts as a mismatch).
inline int argmax_mismatches(const std::vector<float>& a, const std::vector<float>& b, int64_t vocab) {
  int bad = 0;
  for (size_t r = 0; r < a.size() / static_cast<size_t>(vocab); ++r) {
    auto am = [&](const std::vector<float>& v) {
      size_t best = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        if (std::isnan(v[r * vocab + i])) return static_cast<size_t>(-1);
        if (v[r * vocab + i] > v[r * vocab + best]) best = static_cast<size_t>(i);
      }
      return best;
    };
    if (am(a) != am(b) || am(a) == static_cast<size_t>(-1)) ++bad;
  }
  return bad;
}

// Random chunk sizes summing to T (seeded): mixes single-token steps and long chunks.
inline std::vector<int64_t> random_split(int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> out;
  int64_t done = 0;
  while (done < T) {
    int64_t c;
    switch (rng() % 4) {
      case 0: c = 1; break;
      case 1: c = 1 + rng() % 5; break;
      case 2: c = 1 + rng() % 40; break;
      default: c = 1 + rng() % 100; break;
    }
    c = std::min(c, T - done);
    out.push_back(c);
    done += c;
  }
  return out;
}

// The prompt splits every parity test replays: one chunk, token by token, the fixture's
// own chunks, and three seeded random splits.
struct Split {
  std::string name;
  std::vector<int64_t> chunks;
};

inline std::vector<Split> splits_for(const test::Expected& e) {
  const int64_t T = static_cast<int64_t>(e.tokens.size());
  std::vector<Split> s = {{"one-chunk", {T}}, {"decode", std::vector<int64_t>(static_cast<size_t>(T), 1)},
                          {"fixture", e.chunk_sizes}};
  for (uint32_t seed : {11u, 22u, 33u}) s.push_back({"random" + std::to_string(seed), test::random_split(T, seed)});
  return s;
}

inline std::vector<float> run(Engine& eng, const test::Expected& e, const std::vector<int64_t>& chunks) {
  auto seq = eng.new_sequence();
  std::vector<float> out(e.tokens.size() * static_cast<size_t>(e.vocab));
  int64_t pos = 0;
  for (int64_t c : chunks) {
    eng.step(*seq, e.tokens.data() + pos, c, out.data() + pos * e.vocab);
    pos += c;
  }
  return out;
}

// Random token ids in [0, vocab), seeded.
inline std::vector<int32_t> random_tokens(int64_t vocab, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

inline std::string fixture_dir(const char* name) { return std::string(HS_TEST_DATA) + "/" + name; }

// A parameterised test's case: a fixture under one numerics on one device, named e.g.
// "tiny_reference" or "tiny_model_cuda".
struct FixtureCase {
  const char* fixture;
  Numerics numerics;
  const char* device = "cpu";
  bool on_gpu() const { return std::string(device) != "cpu"; }
};
// (gtest prints the parameter of a failing or skipped case; bytes otherwise)
inline void PrintTo(const FixtureCase& c, std::ostream* os) {
  *os << c.fixture << (c.numerics == Numerics::Model ? " model " : " reference ") << c.device;
}
template <typename Info>
std::string fixture_case_name(const Info& i) {
  std::string n = std::string(i.param.fixture) + (i.param.numerics == Numerics::Model ? "_model" : "_reference");
  if (i.param.on_gpu()) n += "_cuda";
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
}

}  // namespace hs::test
