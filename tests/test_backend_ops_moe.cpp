// CUDA MoE experts (cuda::moe_experts, kernels/cuda/moe_cuda.h) vs a CPU twin: the loop of
// CpuOps::moe on given routing (random distinct experts per token, random weights), from
// format/quants.h dequantisation and cpu::matmul / cpu::swiglu_clamp, adding the slots in
// ascending expert id, then the shared expert. Three twins: F32 (the f32 paths: decode, prefill
// in F32 mode; rel L2 <= 1e-5), Bf16 (the prefill tensor-core path: x, W and the weighted h
// rounded to bf16 as the kernels round them, f32 products; <= 1e-3) and Model (CpuOps::moe's
// model-numerics rounding points: FP8 h, bf16 expert outputs, bf16 y with the shared expert;
// <= 1e-2). Every weight type at small shapes for decode (n <= 8) and prefill (n > 8), a skewed
// routing, the shared expert, Flash shapes with timings, replays from a captured CUDA graph with
// new routing, and the argument checks. Outputs and the workspace are poisoned (NaN) first.
// Without a GPU: SKIPPED.
#include <gtest/gtest.h>

#ifdef HS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <functional>
#include <set>

#include "backend_ops_util.h"
#include "error_util.h"
#include "kernels/cuda/moe_cuda.h"

namespace {

constexpr float kLimit = 10.0f;  // DeepSeek-V4's swiglu_limit
// Line-buffered output, so a log redirected to a file keeps the lines before a hang or crash.
[[maybe_unused]] const int kLineBuffered = std::setvbuf(stdout, nullptr, _IOLBF, 0);

// A storage kind: a WType, and the GGUF block type of GGML_BLOCK weights.
struct Kind {
  hc::WType type;
  GgmlType ggml = GgmlType::F32;
  std::string name() const {
    return type == hc::WType::GGML_BLOCK ? std::string(ggml_type_name(ggml)) + "/gen" : hc::wtype_name(type);
  }
  GgmlType gguf() const { return type == hc::WType::GGML_BLOCK ? ggml : gguf_of(type); }
  int64_t block() const { return type == hc::WType::GGML_BLOCK ? ggml_type_info(ggml).block_elems : 32; }
};

// Stacked expert weights on the host in upload layout; rows are dequantized on demand.
struct HostW {
  Kind kind;
  int64_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes, scales;  // scales: FP8_B128 only
  int64_t row_bytes() const { return kind.type == hc::WType::FP8_B128 ? cols : ggml_row_bytes(kind.gguf(), cols); }
  void deq(int64_t r0, int64_t n, float* out) const {
    const int64_t sc = (cols + 127) / 128;
    for (int64_t r = r0; r < r0 + n; ++r, out += cols) {
      if (kind.type != hc::WType::FP8_B128) {
        dequantize_row(kind.gguf(), bytes.data() + r * row_bytes(), out, cols);
        continue;
      }
      for (int64_t i = 0; i < cols; ++i)
        out[i] = e4m3_to_f32(bytes[static_cast<size_t>(r * cols + i)]) *
                 e8m0_to_f32(scales[static_cast<size_t>((r / 128) * sc + i / 128)]);
    }
  }
  int64_t bytes_per_expert(int E) const { return (static_cast<int64_t>(bytes.size() + scales.size())) / E; }
};

// Random weights: every code of Q8_0 / MXFP4 / FP8 with sane scales, quantized random values
// for the GGUF types with a reference quantizer, random bytes with valid scales for the others.
HostW make_w(const Kind& k, int64_t rows, int64_t cols, uint64_t stream) {
  HostW w{k, rows, cols, {}, {}};
  const Rand r(stream);
  if (k.type == hc::WType::FP8_B128) {
    w.bytes.resize(static_cast<size_t>(rows * cols));
    w.scales.resize(static_cast<size_t>(((rows + 127) / 128) * ((cols + 127) / 128)));
    for (size_t i = 0; i < w.scales.size(); ++i) w.scales[i] = static_cast<uint8_t>(118 + r.bits(~i) % 13);
    pool().parallel_for(rows, 64, [&](int64_t b, int64_t e) {
      for (int64_t i = b * cols / 8; i < e * cols / 8; ++i) {
        uint64_t v = r.bits(static_cast<uint64_t>(i));
        for (int j = 0; j < 8; ++j)
          if (((v >> (8 * j)) & 0x7f) == 0x7f) v ^= uint64_t{1} << (8 * j);  // no NaN codes
        std::memcpy(w.bytes.data() + 8 * i, &v, 8);
      }
    });
    return w;
  }
  const GgmlType g = k.gguf();
  const GgmlTypeInfo& info = ggml_type_info(g);
  const int64_t rb = w.row_bytes();
  w.bytes.resize(static_cast<size_t>(rows * rb));
  pool().parallel_for(rows, 16, [&](int64_t b, int64_t e) {
    std::vector<float> tmp(static_cast<size_t>(cols));
    for (int64_t o = b; o < e; ++o) {
      uint8_t* row = w.bytes.data() + o * rb;
      const uint64_t base = static_cast<uint64_t>(o) << 24;
      if (g == GgmlType::Q8_0 || g == GgmlType::MXFP4) {
        for (int64_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(r.bits(base + i));
        for (int64_t blk = 0; blk < cols / 32; ++blk) {
          uint8_t* p = row + blk * info.block_bytes;
          if (g == GgmlType::MXFP4) p[0] = static_cast<uint8_t>(110 + r.bits(base + (1 << 20) + blk) % 26);
          const uint16_t d = f32_to_f16(r.uni(base + (1 << 20) + blk) * 0.02f);
          if (g == GgmlType::Q8_0) std::memcpy(p, &d, 2);
        }
      } else if (type_has_quantizer(g) && g != GgmlType::Q2_K) {
        for (int64_t i = 0; i < cols; ++i) tmp[static_cast<size_t>(i)] = r.uni(base + i);
        quantize_row(g, tmp.data(), row, cols);
      } else {
        for (int64_t i = 0; i < rb; ++i) row[i] = static_cast<uint8_t>(r.bits(base + i));
        for (int64_t blk = 0; blk < cols / info.block_elems; ++blk) {
          uint8_t* p = row + blk * info.block_bytes;
          const uint16_t d = f32_to_f16(r.uni(base + (1 << 20) + blk) * 0.01f);
          switch (g) {
            case GgmlType::Q3_K: std::memcpy(p + 108, &d, 2); break;
            case GgmlType::Q2_K: std::memcpy(p + 80, &d, 2), std::memcpy(p + 82, &d, 2); break;
            case GgmlType::Q4_0_ROCMFP4: p[16] &= 0x3f, p[17] &= 0x3f; break;  // UE4M3 scales <= 0x3F
            case GgmlType::Q8_0_ROCMFPX: p[32] &= 0x3f; break;
            default: std::memcpy(p, &d, 2); break;  // the i-quants: f16 d at 0
          }
        }
      }
    }
  });
  return w;
}

hc::DeviceWeight upload_w(hc::DeviceContext& c, const HostW& w) {
  if (w.kind.type == hc::WType::FP8_B128)
    return hc::upload_fp8_weight(c, w.bytes.data(), w.scales.data(), w.rows, w.cols);
  return hc::upload_gguf_weight(c, w.kind.gguf(), w.bytes.data(), w.rows, w.cols,
                                w.kind.type == hc::WType::GGML_BLOCK);
}

struct Routing {
  std::vector<int32_t> idx;
  std::vector<float> wt;
};

// Distinct random experts per token and weights in (0.1, 1]. skewed: expert 3 in every token,
// the others drawn from [0, E/2) only (the upper half gets no token).
Routing make_routing(int64_t n, int k, int E, uint64_t stream, bool skewed = false) {
  const Rand r(stream);
  Routing rt{std::vector<int32_t>(static_cast<size_t>(n * k)), std::vector<float>(static_cast<size_t>(n * k))};
  uint64_t q = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int pool_n = skewed ? E / 2 : E;
    std::vector<int32_t> ids(static_cast<size_t>(pool_n));
    std::iota(ids.begin(), ids.end(), 0);
    if (skewed) std::swap(ids[0], ids[3]);
    for (int j = skewed ? 1 : 0; j < k; ++j) std::swap(ids[j], ids[j + r.bits(++q) % (pool_n - j)]);
    for (int j = 0; j < k; ++j) {
      rt.idx[static_cast<size_t>(t * k + j)] = ids[static_cast<size_t>(j)];
      rt.wt[static_cast<size_t>(t * k + j)] = 0.55f + 0.45f * r.uni(++q);
    }
  }
  return rt;
}

enum class Twin { F32, Bf16, Model };

void to_bf16(std::vector<float>& v) { cpu::round_bf16(v.data(), static_cast<int64_t>(v.size())); }
void act_quant(std::vector<float>& v, int64_t cols) {
  cpu::fp8_round_trip(v.data(), static_cast<int64_t>(v.size()) / cols, cols, cols, 128);
}

// A shared expert on the host: w1, w3 [I, D], w2 [D, I].
struct HostShared {
  HostW w1, w3, w2;
};

// The CPU twin: CpuOps::moe's routed loop (experts ascending; y += d, d = w2 . h), then the
// shared expert. F32: d = w2 . h with y += d * weight (as the twin always did); Bf16: W, x and
// weight * h rounded to bf16; Model: x as given (the caller's FP8 input), weight * h through the
// FP8 round trip, d and the shared expert's output rounded to bf16, y rounded to bf16 at the end
// when there is a shared expert (CpuOps::moe).
std::vector<float> cpu_moe(const HostW& w1, const HostW& w3, const HostW& w2, int E, const std::vector<float>& x,
                           int64_t n, const Routing& rt, int k, Twin twin = Twin::F32,
                           const HostShared* sh = nullptr) {
  const int64_t D = w1.cols, I = w1.rows / E;
  const bool bf = twin == Twin::Bf16, model = twin == Twin::Model;
  std::vector<float> dslot(static_cast<size_t>(n * k * D)), W1(static_cast<size_t>(I * D)), W3(W1.size()),
      W2(W1.size());
  auto load = [&](const HostW& w, int64_t r0, int64_t rows, int64_t cols, std::vector<float>& out) {
    pool().parallel_for(rows, 8, [&](int64_t b, int64_t f) { w.deq(r0 + b, f - b, out.data() + b * cols); });
    if (bf) to_bf16(out);
  };
  auto expert = [&](const HostW& a, const HostW& b, const HostW& c, int64_t e, std::vector<float> xs,
                    const std::vector<float>& wt, std::vector<float>& d) {  // wt empty: weight 1, as CPU's shared
    const int64_t m = static_cast<int64_t>(xs.size()) / D;
    load(a, e * I, I, D, W1);
    load(b, e * I, I, D, W3);
    load(c, e * D, D, I, W2);
    if (bf) to_bf16(xs);
    std::vector<float> g(static_cast<size_t>(m * I)), u(g.size()), h(g.size());
    d.assign(static_cast<size_t>(m * D), 0.0f);
    cpu::matmul(pool(), W1.data(), I, D, xs.data(), m, g.data());
    cpu::matmul(pool(), W3.data(), I, D, xs.data(), m, u.data());
    cpu::swiglu_clamp(g.data(), u.data(), m * I, kLimit, h.data());
    if (twin != Twin::F32 && !wt.empty())
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < I; ++j) h[static_cast<size_t>(i * I + j)] *= wt[static_cast<size_t>(i)];
    if (bf) to_bf16(h);
    if (model) act_quant(h, I);
    cpu::matmul(pool(), W2.data(), D, I, h.data(), m, d.data());
    if (model) to_bf16(d);
  };
  for (int e = 0; e < E; ++e) {
    std::vector<int64_t> pairs;
    for (int64_t i = 0; i < n * k; ++i)
      if (rt.idx[static_cast<size_t>(i)] == e) pairs.push_back(i);
    if (pairs.empty()) continue;
    const int64_t m = static_cast<int64_t>(pairs.size());
    std::vector<float> xs(static_cast<size_t>(m * D)), wt(static_cast<size_t>(m)), d;
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(x.begin() + pairs[i] / k * D, D, xs.begin() + i * D);
      wt[static_cast<size_t>(i)] = rt.wt[static_cast<size_t>(pairs[i])];
    }
    expert(w1, w3, w2, e, std::move(xs), wt, d);
    for (int64_t i = 0; i < m; ++i) std::copy_n(d.begin() + i * D, D, dslot.begin() + pairs[i] * D);
  }
  std::vector<float> y(static_cast<size_t>(n * D), 0.0f);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int> order(static_cast<size_t>(k));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return rt.idx[t * k + a] < rt.idx[t * k + b]; });
    for (int j : order)
      for (int64_t c = 0; c < D; ++c) {
        const float v = dslot[static_cast<size_t>((t * k + j) * D + c)];
        y[static_cast<size_t>(t * D + c)] += twin == Twin::F32 ? v * rt.wt[t * k + j] : v;
      }
  }
  if (sh) {
    std::vector<float> d;
    expert(sh->w1, sh->w3, sh->w2, 0, x, {}, d);
    for (size_t i = 0; i < y.size(); ++i) y[i] += d[i];
    if (model) to_bf16(y);
  }
  return y;
}

// One problem: weights on host and device (and optionally a shared expert of kind `sk`), and
// the x scale that puts w1 . x near N(0, 4^2) (so that the clamp at 10 is hit now and then).
struct Problem {
  int E, k;
  int64_t D, I;
  HostW w1, w3, w2;
  hc::DeviceWeight d1, d3, d2;
  std::unique_ptr<HostShared> sh;
  hc::DeviceWeight s1, s3, s2;
  float xscale = 1.0f;
  // dk: the down projection's kind when it differs (the q2 mix: IQ2_XXS gate/up, Q2_K down).
  Problem(hc::DeviceContext& c, const Kind& kd, int E_, int k_, int64_t D_, int64_t I_, uint64_t stream,
          const Kind* sk = nullptr, const Kind* dk = nullptr)
      : E(E_), k(k_), D(D_), I(I_), w1(make_w(kd, E_ * I_, D_, stream)), w3(make_w(kd, E_ * I_, D_, stream + 1)),
        w2(make_w(dk ? *dk : kd, E_ * D_, I_, stream + 2)), d1(upload_w(c, w1)), d3(upload_w(c, w3)), d2(upload_w(c, w2)) {
    if (sk) {
      sh = std::make_unique<HostShared>(HostShared{make_w(*sk, I_, D_, stream + 3), make_w(*sk, I_, D_, stream + 4),
                                                   make_w(*sk, D_, I_, stream + 5)});
      s1 = upload_w(c, sh->w1), s3 = upload_w(c, sh->w3), s2 = upload_w(c, sh->w2);
    }
    // 64 rows spread over every expert: FP8_B128's random block scales span 2^12, so rows of one
    // block alone can set x far too large for the others (g clamped almost everywhere, and the
    // few unclamped g small sums of large terms, whose f32 rounding then exceeds the F32 twin's
    // 1e-5).
    const int64_t nr = std::min<int64_t>(64, w1.rows), stride = w1.rows / nr;
    std::vector<float> s(static_cast<size_t>(nr * D));
    for (int64_t i = 0; i < nr; ++i) w1.deq(i * stride, 1, s.data() + i * D);
    double ss = 0;
    for (float v : s) ss += static_cast<double>(v) * v;
    const double rms = std::sqrt(ss / static_cast<double>(s.size()));
    xscale = rms > 0 ? static_cast<float>(4.0 / (rms * std::sqrt(static_cast<double>(D) / 3.0))) : 1.0f;
  }
  // model: the FP8 act-quant round trip of each row, as CpuOps::moe / CudaOps::moe feed the experts.
  std::vector<float> input(int64_t n, uint64_t stream, bool model = false) const {
    std::vector<float> v = randv(static_cast<size_t>(n * D), stream, xscale);
    if (model) act_quant(v, D);
    return v;
  }
  std::vector<float> twin(const std::vector<float>& x, int64_t n, const Routing& rt, Twin t) const {
    return cpu_moe(w1, w3, w2, E, x, n, rt, k, t, sh.get());
  }
};

// Device buffers of one call.
struct Bufs {
  Dev<float> x, wt, y;
  Dev<int32_t> idx;
  Dev<uint8_t> ws;
  Bufs(hc::DeviceContext& c, const Problem& p, const std::vector<float>& xh, int64_t n, const Routing& rt)
      : x(c, xh), wt(c, rt.wt), y(c, static_cast<size_t>(n * p.D)), idx(c, rt.idx),
        ws(c, hc::moe_experts_workspace_bytes(n, p.k, p.D, p.I, p.E)) {
    ws.poison();
  }
  void call(hc::DeviceContext& c, const Problem& p, int64_t n, hc::GemmMode mode, bool model = false,
            const hc::MoeTuning& tune = {}) {
    const hc::MoeShared sh{p.s1.view, p.s3.view, p.s2.view};
    hc::moe_experts(c, p.d1.view, p.d3.view, p.d2.view, p.E, x.p(), n, idx.p(), wt.p(), p.k, kLimit, mode, ws.p(),
                    y.p(), p.sh ? &sh : nullptr, model, tune);
  }
  std::vector<float> run(hc::DeviceContext& c, const Problem& p, int64_t n, hc::GemmMode mode, bool model = false,
                         const hc::MoeTuning& tune = {}) {
    y.poison();
    call(c, p, n, mode, model, tune);
    return y.get();
  }
};

// The grouped decode off: every token count on the per-slot kernels.
const hc::MoeTuning kPerSlot{hc::kMoeDecodeMaxTokens + 1};

int64_t bit_diff(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += f32_to_bits(a[i]) != f32_to_bits(b[i]);
  return bad;
}

// Weights whose values bf16 holds exactly: the tensor-core path then multiplies model-numerics
// inputs (FP8 x and h) exactly.
bool bf16_exact(const Kind& k) {
  return k.type == hc::WType::FP8_B128 || k.type == hc::WType::MXFP4 || k.type == hc::WType::BF16;
}

// Checks n tokens of one problem: n <= 8 in decode (f32), larger n in F32 and Bf16 modes, each
// against its twin, and the same call twice for bit-identical results. model: also the
// model-numerics mode (decode; prefill on tensor cores when the weights are bf16-exact, else F32).
void check_problem(hc::DeviceContext& c, const Problem& p, const std::string& type, int64_t n, uint64_t stream,
                   bool skewed = false, bool model = false, bool exact = false) {
  const Routing rt = make_routing(n, p.k, p.E, stream, skewed);
  const std::vector<float> x = p.input(n, stream + 1);
  Bufs r(c, p, x, n, rt);
  const std::string shape = "E" + std::to_string(p.E) + " k" + std::to_string(p.k) + " " + dims({p.D, p.I}) +
                            " n=" + std::to_string(n) + (skewed ? " skewed" : "") + (p.sh ? " +shared" : "");
  const bool decode = n <= hc::kMoeDecodeMaxTokens;  // (past kMatvecMaxCols: in chunks of it)
  const std::string dp = decode ? "moe-decode" : "moe-prefill";
  for (hc::GemmMode m : {hc::GemmMode::F32, hc::GemmMode::Bf16}) {
    if (decode && m == hc::GemmMode::Bf16) continue;  // decode ignores the mode
    const bool bf = m == hc::GemmMode::Bf16;
    const std::vector<float> got = r.run(c, p, n, m);
    check(decode ? dp : dp + (bf ? "-bf16" : "-f32"), type, shape, got, p.twin(x, n, rt, bf ? Twin::Bf16 : Twin::F32),
          bf ? 1e-3 : 1e-5);
    if (n == 5 || n == 33 || skewed) check_exact("moe-repeat", type, shape + (bf ? " bf16" : ""),
                                                 bit_diff(got, r.run(c, p, n, m)));
  }
  if (!model) return;
  const std::vector<float> xq = p.input(n, stream + 1, true);
  r.x.put(xq);
  const hc::GemmMode m = exact ? hc::GemmMode::Bf16 : hc::GemmMode::F32;
  const std::vector<float> got = r.run(c, p, n, m, true);
  check(dp + "-model", type, shape + (decode ? "" : exact ? " bf16" : " f32"), got, p.twin(xq, n, rt, Twin::Model),
        1e-2);
  check_exact("moe-repeat", type, shape + " model", bit_diff(got, r.run(c, p, n, m, true)));
}

std::vector<Kind> all_kinds() {
  std::vector<Kind> v;
  for (hc::WType t : kAllTypes) v.push_back({t});
  const GgmlType g[] = {GgmlType::Q4_0,    GgmlType::Q4_1,   GgmlType::Q5_0,   GgmlType::Q5_1,   GgmlType::Q8_0,
                        GgmlType::MXFP4,   GgmlType::Q2_K,   GgmlType::Q3_K,   GgmlType::Q4_K,   GgmlType::Q5_K,
                        GgmlType::Q6_K,    GgmlType::Q8_K,   GgmlType::IQ2_XXS, GgmlType::IQ2_XS, GgmlType::IQ3_S,
                        GgmlType::IQ1_S,   GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q4_0_ROCMFP4,
                        GgmlType::Q8_0_ROCMFPX};
  for (GgmlType t : g) v.push_back({hc::WType::GGML_BLOCK, t});
  return v;
}

}  // namespace

// Every weight type: D 256, I 128 (256 for 256-element blocks), 16 experts, k 4; model
// numerics at n = 1, 5 (decode) and 33 (prefill).
TEST_F(BackendOps, MoeExpertsAllTypes) {
  uint64_t stream = 40000;
  for (const Kind& kd : all_kinds()) {
    const Problem p(ctx(), kd, 16, 4, 256, std::max<int64_t>(128, kd.block()), stream += 10);
    for (int64_t n : {1, 2, 5, 8, 9, 33, 200})
      check_problem(ctx(), p, kd.name(), n, stream + n, false, n == 1 || n == 5 || n == 33, bf16_exact(kd));
  }
}

// Many tokens on one expert, the upper half of the experts without any.
TEST_F(BackendOps, MoeExpertsSkewedRouting) {
  const Kind kinds[] = {{hc::WType::MXFP4}, {hc::WType::FP8_B128}, {hc::WType::GGML_BLOCK, GgmlType::Q4_K}};
  for (const Kind& kd : kinds) {
    const Problem p(ctx(), kd, 16, 4, 256, 256, 41000);
    for (int64_t n : {6, 40, 300}) check_problem(ctx(), p, kd.name(), n, 41100 + n, true, true, bf16_exact(kd));
  }
}

// The shared expert next to the routed ones: the Flash mix (MXFP4 routed, Q8_0 shared), FP8 with
// FP8, and GGUF blocks on either side (the shared expert then goes through cuda::matmul, the
// routed decode through the staged kernels); reference and model numerics, decode and prefill.
TEST_F(BackendOps, MoeExpertsShared) {
  const Kind mx{hc::WType::MXFP4}, q8{hc::WType::Q8_0}, fp8{hc::WType::FP8_B128},
      q4k{hc::WType::GGML_BLOCK, GgmlType::Q4_K}, iq2{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS},
      q2k{hc::WType::GGML_BLOCK, GgmlType::Q2_K};
  // {iq2, q8}: the shared expert's gate/up inside the IQ2_XXS tensor-core launch; {q2k, q8}: its
  // down projection inside the Q2_K one.
  const std::pair<Kind, Kind> mixes[] = {{mx, q8}, {fp8, fp8}, {mx, q4k}, {q4k, q8}, {iq2, q8}, {q2k, q8}};
  uint64_t stream = 45000;
  for (const auto& [rk, sk] : mixes) {
    const Problem p(ctx(), rk, 16, 4, 256, 256, stream += 10, &sk);
    for (int64_t n : {1, 3, 8, 20, 40})
      check_problem(ctx(), p, rk.name() + "+" + sk.name(), n, stream + n, false, true, bf16_exact(rk) && bf16_exact(sk));
  }
}

// The q2 mix (IQ2_XXS gate/up, Q2_K down, a Q8_0 shared expert or none): the per-slot kernels
// (n = 1) and the grouped decode (2..32 tokens, items of up to 4 tokens of one expert; skewed
// routing puts every token on expert 3) against the twins in reference and model numerics, and
// the grouped result per token equal to the per-slot path's in model numerics up to the
// combine (same rounding points; the sums of a token's own inputs in another order).
TEST_F(BackendOps, MoeExpertsQ2MixGrouped) {
  const Kind iq2{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS}, q2k{hc::WType::GGML_BLOCK, GgmlType::Q2_K},
      q8{hc::WType::Q8_0};
  uint64_t stream = 47000;
  for (bool with_shared : {true, false}) {
    const Problem p(ctx(), iq2, 16, 4, 512, 256, stream += 10, with_shared ? &q8 : nullptr, &q2k);
    const std::string name = std::string("IQ2_XXS+Q2_K") + (with_shared ? "+Q8_0" : "");
    for (int64_t n : {1, 2, 3, 4, 7, 8, 9, 16, 31, 32})
      for (bool skewed : {false, true}) {
        if (skewed && n < 7) continue;
        check_problem(ctx(), p, name, n, stream + n, skewed, true, false);
      }
    // The grouped path against the per-slot one (forced) on the same inputs, model numerics.
    for (int64_t n : {2, 8, 32}) {
      const Routing rt = make_routing(n, p.k, p.E, stream + 100 + n);
      Bufs r(ctx(), p, p.input(n, stream + 200 + n, true), n, rt);
      for (bool model : {false, true}) {
        const std::vector<float> g = r.run(ctx(), p, n, hc::GemmMode::F32, model);
        const std::vector<float> s = r.run(ctx(), p, n, hc::GemmMode::F32, model, kPerSlot);
        check("moe-grouped-vs-slots", name, "n=" + std::to_string(n) + (model ? " model" : ""), g, s,
              model ? 1e-2 : 1e-5);
      }
    }
  }
}

// DeepSeek-V4-Flash shapes: D 4096, I 2048, 256 experts, k 6 (MXFP4 with a Q8_0 shared expert
// and FP8_B128 checked at n = 1 and 512, Q8_0, Q2_K and IQ2_XXS (the q2 mix's down and gate/up,
// with a Q8_0 shared expert) at n = 1; model numerics at n = 1). Timings are printed, not asserted (events, median of 20 after a warm-up): decode (n = 1
// and 8; 16 and 32 in chunks of 8) as GB/s of the weight bytes of the distinct experts the
// routing picks (and the shared one), n = 512 in ms per mode.
TEST_F(BackendOps, MoeExpertsFlash) {
  const Kind kinds[] = {{hc::WType::MXFP4}, {hc::WType::FP8_B128}, {hc::WType::Q8_0},
                        {hc::WType::GGML_BLOCK, GgmlType::Q2_K}, {hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS}};
  const Kind q8{hc::WType::Q8_0};
  for (const Kind& kd : kinds) {
    const bool full = kd.type == hc::WType::MXFP4 || kd.type == hc::WType::FP8_B128;  // prefill checked too
    const bool q8_shared = kd.type == hc::WType::MXFP4 || kd.ggml == GgmlType::IQ2_XXS || kd.ggml == GgmlType::Q2_K;
    const Problem p(ctx(), kd, 256, 6, 4096, 2048, 42000 + static_cast<int>(kd.type) * 10, q8_shared ? &q8 : nullptr);
    const std::string name = kd.name() + (p.sh ? "+Q8_0" : "");
    const double per_expert = static_cast<double>(p.w1.bytes_per_expert(p.E) * 2 + p.w2.bytes_per_expert(p.E));
    const double shared = p.sh ? static_cast<double>(p.sh->w1.bytes.size() * 2 + p.sh->w2.bytes.size()) : 0.0;
    for (int64_t n : {1, 8, 16, 32, 512}) {
      const bool decode = n <= hc::kMoeDecodeMaxTokens;
      if (n == 1 || (n == 512 && full)) check_problem(ctx(), p, name, n, 42500 + n, false, n == 1, false);
      const Routing rt = make_routing(n, p.k, p.E, 42600 + n);
      const double routed = per_expert * static_cast<double>(std::set<int32_t>(rt.idx.begin(), rt.idx.end()).size());
      Bufs r(ctx(), p, p.input(n, 42700), n, rt);
      for (hc::GemmMode m : {hc::GemmMode::F32, hc::GemmMode::Bf16}) {
        if (decode && m == hc::GemmMode::Bf16) continue;  // decode ignores the mode
        const double ms = event_median_ms(ctx(), [&] {
          hc::moe_experts(ctx(), p.d1.view, p.d3.view, p.d2.view, p.E, r.x.p(), n, r.idx.p(), r.wt.p(), p.k, kLimit, m,
                          r.ws.p(), r.y.p());
        });
        if (decode)
          std::printf("[moe-timing] %-14s n=%-4lld routed          %6.1f us  %5.0f GB/s of %.1f MB\n", name.c_str(),
                      static_cast<long long>(n), ms * 1e3, routed / (ms * 1e-3) / 1e9, routed / 1e6);
        else
          std::printf("[moe-timing] %-14s n=%-4lld %s %.3f ms\n", name.c_str(), static_cast<long long>(n),
                      m == hc::GemmMode::F32 ? "f32 " : "bf16", ms);
      }
      if (p.sh) {  // routed + shared, reference and model numerics
        for (bool model : {false, true}) {
          const hc::GemmMode m = decode ? hc::GemmMode::F32 : hc::GemmMode::Bf16;
          const double ms = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, m, model); });
          if (decode)
            std::printf("[moe-timing] %-14s n=%-4lld +shared %-9s %5.1f us  %5.0f GB/s of %.1f MB\n", name.c_str(),
                        static_cast<long long>(n), model ? "model" : "reference", ms * 1e3,
                        (routed + shared) / (ms * 1e-3) / 1e9,
                        (routed + shared) / 1e6);
          else
            std::printf("[moe-timing] %-14s n=%-4lld +shared bf16 %-9s %.3f ms\n", name.c_str(),
                        static_cast<long long>(n), model ? "model" : "reference", ms);
        }
      }
    }
  }
}

// The IQ2_XXS gate/up on int8 tensor cores (MoeTuning::int8_gate_up / int8_down; per slot at n < 8, grouped in
// items of up to 4 tokens from 8), taken where x is an FP8 round trip: in model numerics
// against the twin and the bf16 body; in reference numerics
// (f32 h, no FP8 rounding of h to hide a last-bit difference) against the F32 twin and the bf16
// body, close but not bit for bit (its rounding points differ: that shows it ran). Inputs that are
// not FP8 round trips (gate/up: raw f32 and FP8 scaled below the quanta a normal float holds;
// down: reference numerics' h) fall back to the bf16 bodies, bit for bit.
TEST_F(BackendOps, MoeExpertsQ2MixInt8) {
  const Kind iq2{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS}, q2k{hc::WType::GGML_BLOCK, GgmlType::Q2_K},
      q8{hc::WType::Q8_0};
  uint64_t stream = 53000;
  for (bool with_shared : {true, false}) {
    const Problem p(ctx(), iq2, 16, 4, 512, 256, stream += 10, with_shared ? &q8 : nullptr, &q2k);
    const std::string name = std::string("IQ2_XXS+Q2_K") + (with_shared ? "+Q8_0" : "");
    for (int64_t n : {1, 3, 7, 8, 20}) {
      hc::MoeTuning s8 = n < 8 ? kPerSlot : hc::MoeTuning{}, bf = s8;
      bf.int8_gate_up = bf.int8_down = false;
      const Routing rt = make_routing(n, p.k, p.E, stream + n);
      const std::vector<float> xq = p.input(n, stream + 20 + n, true), x = p.input(n, stream + 20 + n);
      Bufs r(ctx(), p, xq, n, rt);
      const std::string shape = "E16 k4 512x256 n=" + std::to_string(n);
      auto run = [&](bool model, const hc::MoeTuning& t) { return r.run(ctx(), p, n, hc::GemmMode::F32, model, t); };
      const std::vector<float> got = run(true, s8);
      check("moe-int8-model", name, shape, got, p.twin(xq, n, rt, Twin::Model), 1e-2);
      check("moe-int8-vs-bf16-model", name, shape, got, run(true, bf), 1e-2);
      check_exact("moe-repeat", name, shape + " int8", bit_diff(got, run(true, s8)));
      const std::vector<float> ref = run(false, s8), ref_bf = run(false, bf);
      check("moe-int8", name, shape, ref, p.twin(xq, n, rt, Twin::F32), 1e-5);
      check("moe-int8-vs-bf16", name, shape, ref, ref_bf, 1e-5);
      EXPECT_GT(bit_diff(ref, ref_bf), 0) << name << " " << shape << ": the int8 body did not run";
      // Fallbacks, one body at a time (the other off): gate/up in model numerics on inputs that
      // are not FP8 round trips; down in reference numerics, whose h is not FP8-rounded.
      hc::MoeTuning gu = bf, dn = bf;
      gu.int8_gate_up = true;
      dn.int8_down = true;
      std::vector<float> tiny = xq;
      for (float& v : tiny) v = std::ldexp(v, -110);
      const std::vector<float>* inputs[] = {&x, &tiny};
      for (const std::vector<float>* in : inputs) {
        r.x.put(*in);
        check_exact("moe-int8-fallback", name, shape + (in == &x ? " raw x" : " x 2^-110") + " gate/up",
                    bit_diff(run(true, gu), run(true, bf)));
      }
      r.x.put(x);
      check_exact("moe-int8-fallback", name, shape + " raw x down", bit_diff(run(false, dn), run(false, bf)));
    }
  }
}

// The q2 mix at Flash shapes (IQ2_XXS gate/up, Q2_K down, Q8_0 shared; model numerics): the
// grouped decode against the per-slot kernels, timings printed (not asserted), results checked.
TEST_F(BackendOps, MoeExpertsQ2MixFlashTiming) {
  const Kind iq2{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS}, q2k{hc::WType::GGML_BLOCK, GgmlType::Q2_K},
      q8{hc::WType::Q8_0};
  const Problem p(ctx(), iq2, 256, 6, 4096, 2048, 48000, &q8, &q2k);
  for (int64_t n : {2, 4, 8, 16, 32}) {
    const Routing rt = make_routing(n, p.k, p.E, 48100 + n);
    Bufs r(ctx(), p, p.input(n, 48200 + n, true), n, rt);
    const double g = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, hc::GemmMode::F32, true); });
    const double s =
        event_median_ms(ctx(), [&] { r.call(ctx(), p, n, hc::GemmMode::F32, true, kPerSlot); });
    std::printf("[moe-timing] q2 mix+Q8_0 n=%-3lld model: grouped %7.1f us, per-slot %7.1f us\n",
                static_cast<long long>(n), g * 1e3, s * 1e3);
    if (n == 8 || n == 32)
      check("moe-decode-model", "IQ2_XXS+Q2_K+Q8_0", "Flash n=" + std::to_string(n),
            r.run(ctx(), p, n, hc::GemmMode::F32, true), p.twin(p.input(n, 48200 + n, true), n, rt, Twin::Model), 1e-2);
  }
  // The gate/up on int8 tensor cores against the bf16 body (MoeTuning::int8_gate_up / int8_down): per slot below
  // 8 tokens, grouped from 8.
  for (int64_t n : {1, 2, 4, 8, 16, 32}) {
    hc::MoeTuning s8 = n < 8 ? kPerSlot : hc::MoeTuning{}, gu = s8, bf = s8;
    gu.int8_down = false;
    bf.int8_gate_up = bf.int8_down = false;
    const Routing rt = make_routing(n, p.k, p.E, 48300 + n);
    const std::vector<float> xq = p.input(n, 48400 + n, true);
    Bufs r(ctx(), p, xq, n, rt);
    const double i8 = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, hc::GemmMode::F32, true, s8); });
    const double g8 = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, hc::GemmMode::F32, true, gu); });
    const double b = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, hc::GemmMode::F32, true, bf); });
    std::printf("[moe-timing] q2 mix+Q8_0 n=%-3lld model %s: int8 both %7.1f us, int8 gate/up only %7.1f us, bf16 %7.1f us\n",
                static_cast<long long>(n), n < 8 ? "per-slot" : "grouped", i8 * 1e3, g8 * 1e3, b * 1e3);
    check("moe-decode-model", "IQ2_XXS+Q2_K+Q8_0", "Flash n=" + std::to_string(n) + " int8",
          r.run(ctx(), p, n, hc::GemmMode::F32, true, s8), p.twin(xq, n, rt, Twin::Model), 1e-2);
  }
}

// The q2 mix at Flash shapes with every K-split of its tensor-core kernels (MoeTuning; 0 = the
// rule), gate/up and down each on its own: per-slot (n = 1) and grouped (n = 8, 32) checked
// against the twins (n = 1 also in reference numerics, three terms); timings printed (not
// asserted), model numerics, n = 1, 8, 16, 32.
TEST_F(BackendOps, MoeExpertsQ2MixSplits) {
  const Kind iq2{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS}, q2k{hc::WType::GGML_BLOCK, GgmlType::Q2_K},
      q8{hc::WType::Q8_0};
  const Problem p(ctx(), iq2, 256, 6, 4096, 2048, 49000, &q8, &q2k);
  for (int64_t n : {1, 8, 16, 32}) {
    const Routing rt = make_routing(n, p.k, p.E, 49100 + n);
    const std::vector<float> x = p.input(n, 49200 + n), xq = p.input(n, 49200 + n, true);
    const bool checked = n != 16;
    const std::vector<float> ref = checked && n == 1 ? p.twin(x, n, rt, Twin::F32) : std::vector<float>{};
    const std::vector<float> mod = checked ? p.twin(xq, n, rt, Twin::Model) : std::vector<float>{};
    Bufs r(ctx(), p, xq, n, rt);
    for (int which = 0; which < 2; ++which)
      for (int ks : {0, 1, 2, 4, 8}) {
        if (which == 1 && ks == 0) continue;  // the rule: timed in the first sweep
        hc::MoeTuning t;
        (which == 0 ? t.gate_up_ksplit : t.down_ksplit) = ks;
        const std::string cfg = std::string(which == 0 ? "gate/up" : "down") + " ks=" + std::to_string(ks);
        const double ms = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, hc::GemmMode::F32, true, t); });
        std::printf("[moe-timing] q2 mix+Q8_0 n=%-3lld model %-12s %7.1f us\n", static_cast<long long>(n),
                    cfg.c_str(), ms * 1e3);
        if (!checked) continue;
        const std::string shape = "Flash n=" + std::to_string(n) + " " + cfg;
        check("moe-split-model", "IQ2_XXS+Q2_K+Q8_0", shape, r.run(ctx(), p, n, hc::GemmMode::F32, true, t), mod,
              1e-2);
        if (n == 1) {
          r.x.put(x);
          check("moe-split", "IQ2_XXS+Q2_K+Q8_0", shape, r.run(ctx(), p, n, hc::GemmMode::F32, false, t), ref, 1e-5);
          r.x.put(xq);
        }
      }
  }
  const Routing rt = make_routing(1, p.k, p.E, 49300);
  Bufs r(ctx(), p, p.input(1, 49301, true), 1, rt);
  hc::MoeTuning bad;
  bad.down_ksplit = 3;
  EXPECT_ERROR(r.call(ctx(), p, 1, hc::GemmMode::F32, true, bad), "K-split must be 1, 2, 4 or 8");
}

// Prefill of the q2 mix in model numerics: IQ2_XXS gate/up and Q2_K down on the grouped
// tensor-core bodies with items of up to 16 tokens (MoeTuning::grouped_prefill) against the
// twin and against the generic
// sorted-path kernel, at Flash widths with 16 experts (24 pairs an expert on average: items of 16
// and 8 tokens; skewed: half the experts, one of them on every token) and with 256 experts at
// n = 512 (timings printed, not asserted; the two paths against each other).
TEST_F(BackendOps, MoeExpertsQ2MixPrefill) {
  const Kind iq2{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS}, q2k{hc::WType::GGML_BLOCK, GgmlType::Q2_K},
      q8{hc::WType::Q8_0};
  hc::MoeTuning generic;
  generic.grouped_prefill = false;
  {
    const Problem p(ctx(), iq2, 16, 6, 4096, 2048, 52000, &q8, &q2k);
    for (bool skewed : {false, true}) {
      const int64_t n = 64;
      const Routing rt = make_routing(n, p.k, p.E, 52100 + skewed, skewed);
      const std::vector<float> xq = p.input(n, 52200 + skewed, true);
      Bufs r(ctx(), p, xq, n, rt);
      const std::string shape = "E16 Flash n=64" + std::string(skewed ? " skewed" : "");
      const std::vector<float> got = r.run(ctx(), p, n, hc::GemmMode::F32, true);
      check("moe-prefill-grouped-model", "IQ2_XXS+Q2_K+Q8_0", shape, got, p.twin(xq, n, rt, Twin::Model), 1e-2);
      check("moe-prefill-grouped-vs-generic", "IQ2_XXS+Q2_K+Q8_0", shape, got,
            r.run(ctx(), p, n, hc::GemmMode::F32, true, generic), 1e-2);
      check_exact("moe-repeat", "IQ2_XXS+Q2_K+Q8_0", shape, bit_diff(got, r.run(ctx(), p, n, hc::GemmMode::F32, true)));
    }
  }
  const Problem p(ctx(), iq2, 256, 6, 4096, 2048, 52300, &q8, &q2k);
  const int64_t n = 512;
  const Routing rt = make_routing(n, p.k, p.E, 52301);
  Bufs r(ctx(), p, p.input(n, 52302, true), n, rt);
  for (hc::GemmMode m : {hc::GemmMode::F32, hc::GemmMode::Bf16}) {
    const bool bf = m == hc::GemmMode::Bf16;
    const double g = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, m, true); });
    const double o = event_median_ms(ctx(), [&] { r.call(ctx(), p, n, m, true, generic); });
    std::printf("[moe-timing] q2 mix+Q8_0 n=512 model %s: grouped %8.1f us, generic %8.1f us\n",
                bf ? "bf16" : "f32", g * 1e3, o * 1e3);
    if (bf)
      for (int ks : {2, 4}) {  // the grouped bodies' K-splits (the rule: 1)
        hc::MoeTuning t;
        t.gate_up_ksplit = t.down_ksplit = ks;
        std::printf("[moe-timing] q2 mix+Q8_0 n=512 model bf16: grouped ks=%d %8.1f us\n", ks,
                    1e3 * event_median_ms(ctx(), [&] { r.call(ctx(), p, n, m, true, t); }));
      }
    check("moe-prefill-grouped-vs-generic", "IQ2_XXS+Q2_K+Q8_0", std::string("Flash n=512 ") + (bf ? "bf16" : "f32"),
          r.run(ctx(), p, n, m, true), r.run(ctx(), p, n, m, true, generic), 1e-2);
  }
}

// The call captured once in a CUDA graph and replayed with new routing and input: the routing
// is read on the device at replay time.
TEST_F(BackendOps, MoeExpertsGraphReplay) {
  // MXFP4 (the native decode kernels), IQ2_XXS and Q2_K (their tensor-core gate/up and down).
  for (const Kind& kd : {Kind{hc::WType::MXFP4}, Kind{hc::WType::GGML_BLOCK, GgmlType::IQ2_XXS},
                         Kind{hc::WType::GGML_BLOCK, GgmlType::Q2_K}}) {
    const Problem p(ctx(), kd, 16, 4, 256, std::max<int64_t>(128, kd.block()), 43000);
    for (int64_t n : {5, 33}) {
      Bufs r(ctx(), p, p.input(n, 43100), n, make_routing(n, p.k, p.E, 43200));
      r.run(ctx(), p, n, hc::GemmMode::F32);  // first use sets the kernels' attributes
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      HS_CUDA_CHECK(cudaStreamBeginCapture(ctx().stream(), cudaStreamCaptureModeGlobal));
      r.call(ctx(), p, n, hc::GemmMode::F32);
      HS_CUDA_CHECK(cudaStreamEndCapture(ctx().stream(), &graph));
      HS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
      for (int rep = 0; rep < 2; ++rep) {
        const Routing rt = make_routing(n, p.k, p.E, 43300 + rep, rep == 1);
        const std::vector<float> x = p.input(n, 43400 + rep);
        r.x.put(x);
        r.idx.put(rt.idx);
        r.wt.put(rt.wt);
        r.y.poison();
        HS_CUDA_CHECK(cudaGraphLaunch(exec, ctx().stream()));
        check("moe-graph", kd.name(), "n=" + std::to_string(n) + " replay " + std::to_string(rep), r.y.get(),
              cpu_moe(p.w1, p.w3, p.w2, p.E, x, n, rt, p.k), 1e-5);
      }
      HS_CUDA_CHECK(cudaGraphExecDestroy(exec));
      HS_CUDA_CHECK(cudaGraphDestroy(graph));
    }
  }
}

TEST_F(BackendOps, MoeExpertsErrors) {
  const Problem p(ctx(), Kind{hc::WType::Q8_0}, 16, 4, 256, 128, 44000);
  const Routing rt = make_routing(3, 4, 16, 44001);
  Bufs r(ctx(), p, p.input(3, 44002), 3, rt);
  auto call = [&](const hc::WeightView& w1, const hc::WeightView& w3, const hc::WeightView& w2, int E, int k) {
    hc::moe_experts(ctx(), w1, w3, w2, E, r.x.p(), 3, r.idx.p(), r.wt.p(), k, kLimit, hc::GemmMode::Auto, r.ws.p(),
                    r.y.p());
  };
  EXPECT_THROW(call(p.d1.view, p.d3.view, p.d2.view, 16, 33), Error);     // k > 32
  EXPECT_THROW(call(p.d1.view, p.d3.view, p.d2.view, 2048, 4), Error);    // n_experts > 1024
  EXPECT_THROW(call(p.d1.view, p.d3.view, p.d2.view, 12, 4), Error);      // rows do not split into experts
  EXPECT_THROW(call(p.d1.view, p.d2.view, p.d2.view, 16, 4), Error);      // w3 of the wrong shape
  EXPECT_THROW(call(p.d1.view, p.d3.view, p.d1.view, 16, 4), Error);      // w2 of the wrong shape
  const Problem q(ctx(), Kind{hc::WType::BF16}, 16, 4, 256, 128, 44100);
  EXPECT_THROW(call(p.d1.view, q.d3.view, p.d2.view, 16, 4), Error);      // w1 and w3 types differ
  const Problem f(ctx(), Kind{hc::WType::FP8_B128}, 4, 2, 256, 64, 44200);
  EXPECT_THROW(call(f.d1.view, f.d3.view, f.d2.view, 4, 2), Error);       // FP8 experts off 128-row blocks
  EXPECT_THROW(hc::moe_experts(ctx(), p.d1.view, p.d3.view, p.d2.view, 16, r.x.p(), 3, r.idx.p(), r.wt.p(), 4, kLimit,
                               hc::GemmMode::Auto, nullptr, r.y.p()),
               Error);  // no workspace
  call(p.d1.view, p.d3.view, p.d2.view, 16, 4);  // and the good call still works
  check("moe-after-errors", "Q8_0", "n=3", r.y.get(), cpu_moe(p.w1, p.w3, p.w2, 16, r.x.get(), 3, rt, 4), 1e-5);
}

#else  // !HS_HAVE_CUDA

TEST(BackendOps, Skipped) { GTEST_SKIP() << "built without CUDA (HS_CUDA=OFF)"; }

#endif
