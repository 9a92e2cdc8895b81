// Batch-1 matvec bandwidth on the GPU, per weight type, at DeepSeek-V4-Flash shapes, against a
// measured device-to-device copy. Not run by CI (it needs a GPU); see docs/performance-kernels.md.
//
//   bench_matvec_cuda [--reps N] [--device D] [--quick] [--only TYPE] [--shape NAME] [--variants]
//                     [--gguf [--quants DIR]] [--cols]
//
// --variants also times the batch-1 kernel with 1, 2 and 4 rows per warp (graph replay).
// --cols times n = 2, 4, 8, 16 and 32 columns on every shape (else 2..8 on wq_b only), and for
// Q8_0, FP8_B128, F16 and BF16 both kernels: the f32 one ("f32"; past 8 columns the tiled GEMM, "tiled")
// and the tensor-core one ("mma", matvec_mma.cu), at n = 1 too.
// --gguf times every GGUF block type instead (upload_gguf_weight: the generic GGML_BLOCK
// kernels of matvec_ggml.cu; Q8_0 and MXFP4 both repacked and as blocks, "/gen"), batch 1, at
// the expert shapes and wq_b. Weights tile the valid blocks of the quant fixtures in DIR
// (default tests/data/quants, relative to the repository root).
//
// Each configuration rotates over enough copies of the weight that their total is well above
// the L2 size (so the reads come from HBM), is warmed up, and is timed with CUDA events over
// `reps` repetitions of one pass over the copies; the median time per launch is reported, for
// the pass replayed from a CUDA graph (GPU time, as a captured decode step sees it) and for
// the same launches issued one by one from the host (adds host launch overhead).
// Bytes per launch = weight data + scales + x + y. Copy bandwidth counts bytes read + written.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "kernels/cuda/device_context.h"
#include "kernels/cuda/ops_cuda.h"

namespace hc = hs::cuda;

namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// kind 0: random bytes; 1: e4m3 bytes without NaN; 2: e8m0 bytes in [lo, lo+span); 3: f32 in
// [-1,1); 4: bf16 in [-1,1); 5: f16 in [-1,1) ; 6: f16 Q8_0 scales (small); 7: f32 in [-1,1)
// that are bf16 values (model numerics' FP8-quantised inputs are).
__global__ void fill_kernel(uint8_t* p, int64_t n_bytes, uint64_t seed, int kind, int lo, int span) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x100000001b3ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * 0x1p-24f * 2.0f - 1.0f;
    switch (kind) {
      case 0:
      case 1:
      case 2: {
        if (i >= n_bytes) return;
        uint8_t b = static_cast<uint8_t>(h);
        if (kind == 1 && (b & 0x7f) == 0x7f) b ^= 1;
        if (kind == 2) b = static_cast<uint8_t>(lo + static_cast<int>(h % static_cast<uint64_t>(span)));
        p[i] = b;
        break;
      }
      case 3:
      case 7:
        if (i >= n_bytes / 4) return;
        reinterpret_cast<float*>(p)[i] = kind == 7 ? __uint_as_float(__float_as_uint(u) & 0xffff0000u) : u;
        break;
      case 4:
        if (i >= n_bytes / 2) return;
        reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(__float_as_uint(u) >> 16);
        break;
      default:
        if (i >= n_bytes / 2) return;
        reinterpret_cast<__half*>(p)[i] = __float2half(kind == 6 ? u * 0.01f : u);
        break;
    }
  }
}

void fill(hc::DeviceContext& ctx, void* p, int64_t bytes, uint64_t seed, int kind, int lo = 0, int span = 1) {
  fill_kernel<<<4096, 256, 0, ctx.stream()>>>(static_cast<uint8_t*>(p), bytes, seed, kind, lo, span);
  HS_CUDA_CHECK_LAUNCH();
}

struct Weight {
  hc::DeviceBuffer data, scales;
  hc::WeightView view;
};

Weight make_weight(hc::DeviceContext& ctx, hc::WType t, int64_t rows, int64_t cols, uint64_t seed) {
  Weight w;
  w.view.type = t;
  w.view.rows = rows;
  w.view.cols = cols;
  w.data = ctx.alloc(static_cast<size_t>(w.view.data_bytes()));
  const int64_t sb = w.view.scale_bytes();
  if (sb > 0) w.scales = ctx.alloc(static_cast<size_t>(sb));
  const int64_t db = w.view.data_bytes();
  switch (t) {
    case hc::WType::F32: fill(ctx, w.data.data(), db, seed, 3); break;
    case hc::WType::BF16: fill(ctx, w.data.data(), db, seed, 4); break;
    case hc::WType::F16: fill(ctx, w.data.data(), db, seed, 5); break;
    case hc::WType::Q8_0:
      fill(ctx, w.data.data(), db, seed, 0);
      fill(ctx, w.scales.data(), sb, seed + 1, 6);
      break;
    case hc::WType::FP8_B128:
      fill(ctx, w.data.data(), db, seed, 1);
      fill(ctx, w.scales.data(), sb, seed + 1, 2, 118, 13);
      break;
    case hc::WType::MXFP4:
      fill(ctx, w.data.data(), db, seed, 0);
      fill(ctx, w.scales.data(), sb, seed + 1, 2, 110, 26);
      break;
    case hc::WType::GGML_BLOCK: break;  // --gguf uploads real blocks (bench_gguf)
  }
  w.view.data = w.data.data();
  w.view.scales = sb > 0 ? w.scales.data() : nullptr;
  return w;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Timer {
  cudaEvent_t a{}, b{};
  Timer() {
    HS_CUDA_CHECK(cudaEventCreate(&a));
    HS_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
};

// Median milliseconds of fn() over reps (after `warm` untimed calls), timed on ctx's stream.
template <typename F>
float time_ms(hc::DeviceContext& ctx, int warm, int reps, F&& fn) {
  Timer t;
  for (int i = 0; i < warm; ++i) fn();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    HS_CUDA_CHECK(cudaEventRecord(t.a, ctx.stream()));
    fn();
    HS_CUDA_CHECK(cudaEventRecord(t.b, ctx.stream()));
    HS_CUDA_CHECK(cudaEventSynchronize(t.b));
    float x = 0;
    HS_CUDA_CHECK(cudaEventElapsedTime(&x, t.a, t.b));
    ms.push_back(x);
  }
  return median(ms);
}

// Per-launch milliseconds of pass() (one launch per weight copy, `copies` of them) replayed from
// a CUDA graph (what a captured decode step sees: no host launch overhead between kernels).
template <typename F>
double graph_ms_per_launch(hc::DeviceContext& ctx, int reps, int copies, F&& pass) {
  pass();  // first use outside the capture (kernel attributes, occupancy cache)
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  HS_CUDA_CHECK(cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeRelaxed));
  pass();
  HS_CUDA_CHECK(cudaStreamEndCapture(ctx.stream(), &graph));
  HS_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  const double per = time_ms(ctx, 2, reps, [&] { HS_CUDA_CHECK(cudaGraphLaunch(exec, ctx.stream())); }) / copies;
  HS_CUDA_CHECK(cudaGraphExecDestroy(exec));
  HS_CUDA_CHECK(cudaGraphDestroy(graph));
  return per;
}

// --gguf: batch-1 matvec of every GGUF block type, weights tiled from the quant fixtures.
void bench_gguf(hc::DeviceContext& ctx, int reps, double copy_gbs, const std::string& quants, const std::string& only,
                const std::string& shape_filter) {
  struct Shape {
    int64_t out, in;
    const char* what;
  };
  const Shape shapes[] = {{2048, 4096, "w1/w3 (expert)"}, {4096, 2048, "w2 (expert)"}, {32768, 1024, "wq_b"}};
  const hs::GgmlType types[] = {
      hs::GgmlType::Q8_0,    hs::GgmlType::MXFP4,  hs::GgmlType::Q4_0,         hs::GgmlType::Q4_1,
      hs::GgmlType::Q5_0,    hs::GgmlType::Q5_1,   hs::GgmlType::IQ4_NL,       hs::GgmlType::Q2_K,
      hs::GgmlType::Q3_K,    hs::GgmlType::Q4_K,   hs::GgmlType::Q5_K,         hs::GgmlType::Q6_K,
      hs::GgmlType::Q8_K,    hs::GgmlType::IQ2_XXS, hs::GgmlType::IQ2_XS,      hs::GgmlType::IQ2_S,
      hs::GgmlType::IQ3_XXS, hs::GgmlType::IQ3_S,  hs::GgmlType::IQ1_S,        hs::GgmlType::IQ1_M,
      hs::GgmlType::IQ4_XS,  hs::GgmlType::Q4_0_ROCMFP4, hs::GgmlType::Q4_0_ROCMFP4_FAST,
      hs::GgmlType::Q6_0_ROCMFPX, hs::GgmlType::Q8_0_ROCMFPX, hs::GgmlType::Q3_0_ROCMFPX, hs::GgmlType::Q2_0_ROCMFP2};
  const size_t rotate_bytes = size_t{512} << 20;  // > 8x the L2
  std::printf("| type | path | shape (out x in) | tensor | MB/launch | us/launch (graph) | GB/s | %% of copy |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  hc::DeviceBuffer x, y;
  for (hs::GgmlType t : types) {
    const std::string name = hs::ggml_type_name(t);
    if (!only.empty() && only != name) continue;
    std::ifstream f(quants + "/" + name + ".bin", std::ios::binary);
    const std::vector<uint8_t> blocks((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    HS_CHECK(!blocks.empty(), "no fixture ", quants, "/", name, ".bin (--quants DIR)");
    for (const bool keep : {false, true}) {
      if (!keep && t != hs::GgmlType::Q8_0 && t != hs::GgmlType::MXFP4) continue;  // only these have a fast path
      for (const Shape& s : shapes) {
        if (!shape_filter.empty() && shape_filter != s.what) continue;
        const int64_t wbytes = hs::ggml_row_bytes(t, s.in) * s.out;
        std::vector<uint8_t> host(static_cast<size_t>(wbytes));
        for (size_t i = 0; i < host.size(); i += blocks.size())
          std::memcpy(host.data() + i, blocks.data(), std::min(blocks.size(), host.size() - i));
        const int copies = static_cast<int>(std::clamp<size_t>((rotate_bytes + wbytes - 1) / wbytes, 1, 128));
        std::vector<hc::DeviceWeight> ws;
        ws.push_back(hc::upload_gguf_weight(ctx, t, host.data(), s.out, s.in, keep));
        for (int c = 1; c < copies; ++c) {  // device copies of the first (the same bytes, other addresses)
          hc::DeviceWeight w;
          w.view = ws[0].view;
          w.data = ctx.alloc(ws[0].data.bytes());
          ctx.copy(w.data.data(), ws[0].data.data(), ws[0].data.bytes());
          w.view.data = w.data.data();
          if (ws[0].scales.bytes() > 0) {
            w.scales = ctx.alloc(ws[0].scales.bytes());
            ctx.copy(w.scales.data(), ws[0].scales.data(), ws[0].scales.bytes());
            w.view.scales = w.scales.data();
          }
          ws.push_back(std::move(w));
        }
        x = ctx.alloc(static_cast<size_t>(s.in) * 4);
        y = ctx.alloc(static_cast<size_t>(s.out) * 4);
        fill(ctx, x.data(), s.in * 4, 77, 3);
        const double per = graph_ms_per_launch(ctx, reps, copies, [&] {
          for (const auto& w : ws) hc::matmul(ctx, w.view, x.as<float>(), 1, y.as<float>());
        });
        const double bytes = static_cast<double>(wbytes) + 4.0 * (s.in + s.out);
        const double gbs = bytes / (per * 1e-3) / 1e9;
        std::printf("| %s | %s | %lldx%lld | %s | %.2f | %.2f | %.0f | %.0f%% |\n", name.c_str(),
                    keep || (t != hs::GgmlType::Q8_0 && t != hs::GgmlType::MXFP4) ? "generic" : "fast",
                    static_cast<long long>(s.out), static_cast<long long>(s.in), s.what, bytes / 1e6, per * 1e3, gbs,
                    100.0 * gbs / copy_gbs);
        std::fflush(stdout);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 30, device = 0;
  bool quick = false;
  std::string only, shape_filter;
  bool variants = false, gguf = false, cols = false;
  std::string quants = "tests/data/quants";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--device") && i + 1 < argc) device = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) shape_filter = argv[++i];
    else if (!std::strcmp(argv[i], "--variants")) variants = true;
    else if (!std::strcmp(argv[i], "--gguf")) gguf = true;
    else if (!std::strcmp(argv[i], "--cols")) cols = true;
    else if (!std::strcmp(argv[i], "--quants") && i + 1 < argc) quants = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--device D] [--quick] [--only TYPE] [--shape NAME] [--variants] [--gguf "
                   "[--quants DIR]] [--cols]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    if (hc::device_count() == 0) {
      std::printf("no CUDA device: nothing to measure\n");
      return 0;
    }
    hc::DeviceContext ctx(device);
    hc::DeviceGuard guard(device);
    std::printf("device: %s, L2 %d MiB\n", ctx.describe().c_str(), ctx.props().l2CacheSize >> 20);

    // Copy bandwidth: 1 GiB device-to-device, bytes read + written.
    const double copy_gbs = hc::measure_copy_gbs(ctx, size_t{1} << 30, reps);
    std::printf("device-to-device copy: %.1f GB/s (read + write, 1 GiB, median of %d)\n\n", copy_gbs, reps);
    if (gguf) {
      bench_gguf(ctx, reps, copy_gbs, quants, only, shape_filter);
      return 0;
    }

    struct Shape {
      int64_t out, in;
      const char* what;
    };
    const std::vector<Shape> shapes = {
        {1024, 4096, "wq_a"},          {512, 4096, "wkv"},     {32768, 1024, "wq_b"},   {4096, 8192, "wo_b"},
        {2048, 4096, "w1/w3 (expert)"}, {4096, 2048, "w2 (expert)"}, {256, 4096, "gate"}, {8192, 1024, "idx wq_b"},
        {129280, 4096, "lm_head"},
    };
    const hc::WType types[] = {hc::WType::F32,  hc::WType::F16,      hc::WType::BF16,
                               hc::WType::Q8_0, hc::WType::FP8_B128, hc::WType::MXFP4};
    const size_t rotate_bytes = size_t{512} << 20;  // > 8x the L2
    std::printf("| type | shape (out x in) | tensor | n | MB/launch | us/launch (graph) | GB/s | %% of copy |"
                " us/launch (host launches) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    uint64_t seed = 10;
    std::vector<std::pair<std::string, std::vector<double>>> summary;
    std::vector<std::string> variant_rows;
    for (hc::WType t : types) {
      if (!only.empty() && only != hc::wtype_name(t)) continue;
      std::vector<double> pcts;
      for (const Shape& s : shapes) {
        if (quick && s.out > 40000) continue;
        if (!shape_filter.empty() && shape_filter != s.what) continue;
        hc::WeightView probe;
        probe.type = t;
        probe.rows = s.out;
        probe.cols = s.in;
        const size_t wbytes = static_cast<size_t>(probe.data_bytes() + probe.scale_bytes());
        const int copies = static_cast<int>(std::clamp<size_t>((rotate_bytes + wbytes - 1) / wbytes, 1, 128));
        std::vector<Weight> ws;
        for (int c = 0; c < copies; ++c) ws.push_back(make_weight(ctx, t, s.out, s.in, ++seed));
        const int nmax = 32;
        hc::DeviceBuffer x = ctx.alloc(static_cast<size_t>(nmax * s.in) * 4), y = ctx.alloc(static_cast<size_t>(nmax * s.out) * 4);
        fill(ctx, x.data(), nmax * s.in * 4, ++seed, 3);
        hc::DeviceBuffer xh = ctx.alloc(static_cast<size_t>(nmax * s.in) * 4);
        fill(ctx, xh.data(), nmax * s.in * 4, ++seed, 7);
        for (int n : {1, 2, 4, 8, 16, 32}) {
          if (n > 1 && !cols && (quick || s.out != 32768 || n > 8)) continue;  // multi-column scaling on one shape only
          // kAuto: matmul (the default kernel); kTiled: matmul's tiled path (GemmMode::Bf16); else
          // matvec_variant with that many rows per warp.
          constexpr int kAuto = -100, kTiled = -101;
          auto pass_with = [&](int rpw, const hc::DeviceBuffer& xb) {
            for (int c = 0; c < copies; ++c) {
              const hc::WeightView& v = ws[static_cast<size_t>(c)].view;
              if (rpw == kAuto) hc::matmul(ctx, v, xb.as<float>(), n, y.as<float>());
              else if (rpw == kTiled) hc::matmul(ctx, v, xb.as<float>(), n, y.as<float>(), hc::GemmMode::Bf16);
              else hc::matvec_variant(ctx, v, xb.as<float>(), n, y.as<float>(), rpw);
            }
          };
          auto graph_per = [&](int rpw, const hc::DeviceBuffer& xb) {
            return graph_ms_per_launch(ctx, reps, copies, [&] { pass_with(rpw, xb); });
          };
          const double stream_per = time_ms(ctx, 2, reps, [&] { pass_with(kAuto, x); }) / copies;
          const double per = graph_per(kAuto, x);
          if (variants && n == 1) {
            char line[256];
            std::snprintf(line, sizeof line, "| %s | %s | %.2f | %.2f | %.2f | %.2f |", hc::wtype_name(t), s.what, per * 1e3,
                          graph_per(1, x) * 1e3, graph_per(2, x) * 1e3, graph_per(4, x) * 1e3);
            variant_rows.emplace_back(line);
          }
          const double bytes = static_cast<double>(wbytes) + 4.0 * n * (s.in + s.out);
          const double gbs = bytes / (per * 1e-3) / 1e9;
          if (n == 1) pcts.push_back(100.0 * gbs / copy_gbs);
          std::printf("| %s | %lldx%lld | %s | %d | %.2f | %.2f | %.0f | %.0f%% | %.2f |\n", hc::wtype_name(t),
                      static_cast<long long>(s.out), static_cast<long long>(s.in), s.what, n, bytes / 1e6,
                      per * 1e3, gbs, 100.0 * gbs / copy_gbs, stream_per * 1e3);
          const bool mma_type = t != hc::WType::F32 && t != hc::WType::MXFP4;
          if (cols && mma_type) {  // x of bf16 values (one mma term) and of f32 ones (three)
            const bool wide = n > hc::kMatvecMaxCols;  // past the f32 kernel: the tiled GEMM instead
            const double f32 = graph_per(wide ? kTiled : 4, x), mma = graph_per(hc::kMatvecTensorCores, xh),
                         mma3 = graph_per(hc::kMatvecTensorCores, x);
            std::printf("|   %s kernels | | %s | %d | | %s %.2f / mma %.2f (f32 x: %.2f) | %.0f / %.0f | | |\n",
                        hc::wtype_name(t), s.what, n, wide ? "tiled" : "f32", f32 * 1e3, mma * 1e3, mma3 * 1e3, bytes / (f32 * 1e-3) / 1e9,
                        bytes / (mma * 1e-3) / 1e9);
          }
          std::fflush(stdout);
        }
      }
      summary.emplace_back(hc::wtype_name(t), pcts);
    }
    if (!variant_rows.empty()) {
      std::printf("\nbatch-1 us/launch (graph) by rows per warp:\n\n| type | tensor | default | R=1 | R=2 | R=4 |\n"
                  "|---|---|---|---|---|---|\n");
      for (const auto& l : variant_rows) std::printf("%s\n", l.c_str());
    }
    std::printf("\nsummary (batch 1, %% of copy bandwidth over the shapes above): \n");
    for (auto& [name, v] : summary) {
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      std::printf("  %-9s min %3.0f%%  median %3.0f%%  max %3.0f%%\n", name.c_str(), v.front(), v[v.size() / 2], v.back());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_matvec_cuda: %s\n", e.what());
    return 1;
  }
  return 0;
}
