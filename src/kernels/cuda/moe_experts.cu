// Routed MoE experts with every data-dependent decision on the device (moe_cuda.h).
//
// Decode (n <= 8), native weight types (moe_fast_decode.cuh): one launch streams every gate/up
// matrix (the routed slots and the shared expert, which may have another type: one block per
// slot and row block, K split over the block's warps, 16-byte loads two groups deep) and writes
// h = weight * swiglu_clamp(g, u) to [t, rank, :] (rank = the slot's place in ascending expert
// order) with the experts in that order; one launch streams every down matrix (one segment per
// slot or shared expert) into per-segment rows, and a small kernel adds each token's segments
// in ascending expert id, then the shared one (model numerics: each rounded to bf16, the FP8
// round trip of h in between). MXFP4 runs on tensor cores with exactly dequantised bf16 weights
// and the input split into three bf16 terms (f32-exact); the other types in f32.
// Decode with GGUF blocks (the older scheme, moe_experts_decode.cuh): two f32 weight-streaming
// kernels (matvec.cu's scheme); IQ2_XXS gate/up (the q2 mix's) instead runs on tensor cores with
// a Q8_0 shared expert in the same launch (moe_iq2_decode.cuh), and so does Q2_K down
// (moe_q2k_decode.cuh, its segments added by fast_combine_kernel); where their inputs are FP8
// round trips (model numerics) both run on int8 tensor cores (moe_iq2_s8.cuh, moe_q2k_s8.cuh:
// exact int32 sums of int8 weights and three int8 digits per input), per slot and grouped
// (MoeTuning::int8_gate_up / int8_down). Gate/up: row groups
// per (token, slot); a warp owns R rows of the slot's expert in w1 and the same rows in w3 (2R
// streams, a 16-byte chunk per lane per step, the next step in flight; x in shared memory,
// swizzled); split-K partials are combined in a fixed order and h = weight * swiglu_clamp(g, u)
// goes to [t, rank, :], rank = the slot's place in ascending expert order. Down: row groups per
// token over a virtual input row, the token's k h vectors in that order (segment s reads expert
// seg_e[s] of w2), so the sum over slots is one dot product in a fixed order. GGUF blocks: the
// same, each step's bytes staged per warp in shared memory, decoded by quant_decode.cuh. Model
// numerics: the gate/up kernel also lists each token's experts in ascending order, the down
// kernel then runs one slot per row group (expert of that list against its h row) and a last
// kernel adds the slot rows, each rounded to bf16, in that order. The shared expert is one more
// slot (expert 0 of its own weights, weight 1), its down projection added to y in the epilogue.
//
// Prefill (n > 8): a one-block counting sort groups the (token, slot) pairs by expert into items
// of <= 16 tokens. A persistent kernel walks (item, row tile) units; a warp owns two 16-row
// fragments (gate/up: the same rows of w1 and w3, SwiGLU in registers; down: 32 rows of w2) and
// streams their chunks into registers (next K-step in flight; GGUF blocks staged per warp).
// Bf16: lane (g, c) decodes chunks 2c, 2c+1 of rows g, g+8; MMA step (h, p) of mma.sync
// m16n8k16 (f32 accumulate) takes elements (2c+h)*E + 4p..+3, and the token panel in shared
// memory is stored in that permuted K order (one permutation of K for A and B leaves the product
// unchanged). F32: one row per lane, f32 FMA in K order. A last kernel sums each token's slot
// rows in ascending expert id. Every output depends only on its own token and weights (no float
// atomics): the unordered placement within an expert's bucket changes no bit. IQ2_XXS gate/up
// and Q2_K down in model numerics instead run the grouped decode's tensor-core bodies on the
// same items and layout (moe_grouped_decode.cuh, iq2_gate_up_prefill / q2k_down_prefill).

#include "kernels/cuda/moe_experts_common.cuh"
#include "kernels/cuda/moe_experts_decode.cuh"
#include "kernels/cuda/moe_fast_decode.cuh"
#include "kernels/cuda/moe_grouped_decode.cuh"
#include "kernels/cuda/moe_iq2_decode.cuh"
#include "kernels/cuda/moe_q2k_decode.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

// ---------------------------------------------------------------------------------------
// Prefill

struct PfArgs {
  const uint8_t *wa, *wb, *sa, *sb, *wa_end, *wb_end;
  const float* x;  // gate/up: x [n, D] (token = perm / k); down: h [n*k, I] by sorted position
  const int *perm, *n_items;
  const float* weight;
  const int4* items;
  float* out;          // gate/up: h [n*k, I]; down: d [n*k, D], by sorted position
  int64_t rows, cols;  // per expert
  int k, n_rt;
  float limit;
};

// One warp's weight rows in a work unit: fragment f (its matrix), row rr (0..15) of it.
struct PfUnit {
  const uint8_t* w[2];
  const uint8_t* end[2];
  ScaleRef sr[2];
  int64_t e_row0, r0, rows;
  bool gu;
  __device__ int64_t grow(int f, int rr) const { return e_row0 + min64(r0 + (gu ? 0 : 16 * f) + rr, rows - 1); }
};

// Lane item i (0..7) of a K-step (8 chunks of E elements per row): fragment f, row rr, chunk
// ch. Bf16 (MMA fragments): chunks 2c, 2c+1 of rows g, g+8 of both fragments, i = 4f + 2r + h;
// F32: all 8 chunks of row (lane >> 4, lane & 15).
template <bool BF>
__device__ __forceinline__ void item_of(int i, int& f, int& rr, int& ch) {
  const int lane = threadIdx.x & 31;
  f = BF ? i >> 2 : lane >> 4;
  rr = BF ? (lane >> 2) + 8 * ((i >> 1) & 1) : lane & 15;
  ch = BF ? 2 * (lane & 3) + (i & 1) : i;
}

template <WType T>
struct NativeSrc {
  using Tr = WTraits<T>;
  static constexpr WType kType = T;
  static constexpr bool kGgml = false;
  static constexpr int E = Tr::E, TK = 8 * E, kTables = 0;
  __host__ __device__ static constexpr size_t pf_smem() { return 0; }
  uint4 cur[8], nxt[8];
  float csc[8], nsc[8];
  int64_t rb, C;
  __device__ void init(uint8_t*, const PfArgs& a) { rb = row_bytes<T>(a.cols), C = a.cols / E; }
  template <bool BF>
  __device__ void fetch(const PfUnit& u, int64_t ks) {
    HS_UNROLL for (int i = 0; i < 8; ++i) {
      int f, rr, ch;
      item_of<BF>(i, f, rr, ch);
      const int64_t row = u.grow(f, rr), cg = ks * 8 + ch;
      const uint8_t* p = u.w[f] + row * rb + cg * 16;
      const bool ok = cg < C;  // a partial last K-step reads zeros
      nxt[i] = !ok ? make_uint4(0, 0, 0, 0) : BF ? ld_stream16(p) : __ldg(reinterpret_cast<const uint4*>(p));
      nsc[i] = !ok ? 0.f : Tr::kScaled ? u.sr[f].get(T, row, cg) : 1.0f;
    }
  }
  template <bool BF> __device__ void begin(const PfUnit& u) { fetch<BF>(u, 0); }
  template <bool BF>
  __device__ void step(const PfUnit& u, int64_t ks, int64_t nks) {
    HS_UNROLL for (int i = 0; i < 8; ++i) cur[i] = nxt[i], csc[i] = nsc[i];
    if (ks + 1 < nks) fetch<BF>(u, ks + 1);
  }
  template <bool BF> __device__ void prepare(const PfUnit&, int, int) {}
  __device__ void get(int i, int, int p, float (&w)[4]) const {
    Tr::part(cur[i], p, w);
    HS_UNROLL for (int q = 0; q < 4; ++q) w[q] *= csc[i];
  }
  __device__ void end_step() {}
};

// GGUF blocks: a K-step is 256 elements; the warp stages the step's bytes of its 32 rows in
// shared memory (cp.async) and decodes 32-element units from there. Two staging buffers: the
// next step's bytes are in flight while this one is decoded (with one buffer, each warp waited
// for its own loads before every step, and the kernel ran at ~20 % of the bandwidth).
template <GgmlType T>
struct GgmlSrc {
  using Tr = QTraits<T>;
  static constexpr GgmlType kType = T;
  static constexpr bool kGgml = true;
  static constexpr int E = 32, TK = 256, kTables = QTableLayout<T>::kBytes;
  static constexpr int kStepBytes = TK / Tr::kBlk * Tr::kBytes, kRowChunks = (kStepBytes + 30) / 16;
  static constexpr int kRowStage = kRowChunks * 16 + 16, kWarpStage = 32 * kRowStage;
  __host__ __device__ static constexpr size_t pf_smem() { return kTables + size_t{kWarps} * 2 * kWarpStage; }
  QTabs tabs;
  uint8_t* stage;  // this warp's two buffers
  const uint8_t* cur;  // the buffer of step ks_
  int64_t rb, cols, ks_;
  float v[2][32];
  __device__ void init(uint8_t* smem, const PfArgs& a) {
    tabs = stage_tables<T>(smem);  // published by the first barrier of the work loop
    stage = smem + kTables + (threadIdx.x >> 5) * 2 * kWarpStage;
    rb = a.cols / Tr::kBlk * Tr::kBytes;
    cols = a.cols;
  }
  // Queues the bytes of step ks of the unit's 32 rows into buffer buf, as one cp.async group.
  __device__ void issue(const PfUnit& u, int64_t ks, int buf) {
    const int64_t lo = ks * kStepBytes, hi = min64(rb, lo + kStepBytes);
    uint8_t* st = stage + buf * kWarpStage;
    for (int j = threadIdx.x & 31; j < 32 * kRowChunks; j += 32) {
      const int row = j / kRowChunks, f = row >> 4;
      const uint8_t* base = u.w[f] + u.grow(f, row & 15) * rb;
      const uint8_t* p = reinterpret_cast<const uint8_t*>(
          (reinterpret_cast<uintptr_t>(base + lo) & ~uintptr_t{15}) + 16 * (j % kRowChunks));
      if (p < base + hi) cp_async16(st + row * kRowStage + (j % kRowChunks) * 16, p, u.end[f]);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  }
  template <bool BF> __device__ void begin(const PfUnit& u) { issue(u, 0, 0); }
  template <bool BF>
  __device__ void step(const PfUnit& u, int64_t ks, int64_t nks) {
    if (ks + 1 < nks) {
      issue(u, ks + 1, static_cast<int>((ks + 1) & 1));  // its buffer was released by end_step
      asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
    __syncwarp();
    ks_ = ks;
    cur = stage + (ks & 1) * kWarpStage;
  }
  template <bool BF>
  __device__ void prepare(const PfUnit& u, int i, int s) {  // item i -> v[s]
    int f, rr, ch;
    item_of<BF>(i, f, rr, ch);
    if (ks_ * TK + ch * 32 >= cols) {  // past the input width: zeros
      HS_UNROLL for (int e = 0; e < 32; ++e) v[s][e] = 0.f;
      return;
    }
    const int head = static_cast<int>(reinterpret_cast<uintptr_t>(u.w[f] + u.grow(f, rr) * rb + ks_ * kStepBytes) & 15);
    QDecode<T>::unit(BlockIn{reinterpret_cast<const uint32_t*>(cur + (f * 16 + rr) * kRowStage),
                             head + ch * 32 / Tr::kBlk * Tr::kBytes},
                     ch * 32 % Tr::kBlk / 32, tabs, v[s]);
  }
  __device__ void get(int, int s, int p, float (&w)[4]) const {
    HS_UNROLL for (int q = 0; q < 4; ++q) w[q] = v[s][4 * p + q];
  }
  __device__ void end_step() { __syncwarp(); }  // every lane is done with this step's buffer
};

template <bool BF>
__host__ __device__ constexpr int panel_k() { return BF ? 1024 : 512; }

// Token panel: kTok rows of KP input elements from k0 (zeros past cols or past the item's
// tokens). Bf16: each K-step of TK stored in the fragments' permuted order; F32: K order.
template <int E, int TK, bool BF>
__device__ __forceinline__ void stage_panel(uint8_t* xp, const float* const* srow, int64_t k0, int64_t cols) {
  constexpr int KP = panel_k<BF>(), XS = KP + 16, N4 = KP / 4, kTotal = kTok * N4;
  for (int i0 = threadIdx.x; i0 < kTotal; i0 += 8 * kThreads) {  // 8 loads per thread in flight
    float4 v[8];
    HS_UNROLL for (int u = 0; u < 8; ++u) {
      const int i = i0 + u * kThreads;
      const float* sr = i < kTotal ? srow[i / N4] : nullptr;
      const int64_t kk = k0 + 4 * (i % N4);
      v[u] = sr && kk < cols ? *reinterpret_cast<const float4*>(sr + kk) : float4{};
    }
    HS_UNROLL for (int u = 0; u < 8; ++u) {
      const int i = i0 + u * kThreads, tok = i / N4, a = 4 * (i % N4), ka = a % TK, ch = ka / E;
      if (i >= kTotal) break;
      if constexpr (BF) {
        const int slot = a - ka + (((ch & 1) * (E / 4) + ka % E / 4) * 4 + (ch >> 1)) * 4;
        *reinterpret_cast<uint2*>(xp + (tok * XS + slot) * 2) =
            make_uint2(pack_bf16(v[u].x, v[u].y), pack_bf16(v[u].z, v[u].w));
      } else {
        *reinterpret_cast<float4*>(xp + (tok * XS + a) * 4) = v[u];
      }
    }
  }
}

template <class Src, bool GU, bool BF>
__global__ void __launch_bounds__(kThreads, 1) pf_kernel(PfArgs a) {
  pdl_enter();
  constexpr int E = Src::E, TK = Src::TK, XS = panel_k<BF>() + 16, KSP = panel_k<BF>() / TK;
  constexpr int kItemUnroll = Src::kGgml ? 1 : 8;  // native chunks live in register arrays
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ const float* srow[kTok];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  Src src;
  src.init(smem, a);
  uint8_t* xp = smem + Src::pf_smem();
  const int64_t nks = (a.cols + TK - 1) / TK, total = static_cast<int64_t>(*a.n_items) * a.n_rt;
  for (int64_t wu = blockIdx.x; wu < total; wu += gridDim.x) {
    const int4 it = a.items[wu / a.n_rt];
    const int64_t p0 = it.y;
    const int m = it.z;
    __syncthreads();  // the previous unit no longer reads srow or the panel
    if (static_cast<int>(threadIdx.x) < kTok) {
      const int i = threadIdx.x;
      srow[i] = i >= m ? nullptr : a.x + (GU ? static_cast<int64_t>(a.perm[p0 + i] / a.k) : p0 + i) * a.cols;
    }
    const PfUnit u{{a.wa, GU ? a.wb : a.wa},
                   {a.wa_end, GU ? a.wb_end : a.wa_end},
                   {{a.sa, a.cols}, {GU ? a.sb : a.sa, a.cols}},
                   it.x * a.rows,
                   (wu % a.n_rt) * (GU ? 128 : 256) + warp * (GU ? 16 : 32),
                   a.rows,
                   GU};
    float accb[2][2][4], accf[kTok];  // Bf16: [fragment][n tile][C fragment]; F32: [token]
    HS_UNROLL for (int i = 0; i < 16; ++i) (&accb[0][0][0])[i] = accf[i] = 0.f;
    src.template begin<BF>(u);
    for (int64_t ks = 0; ks < nks; ++ks) {
      const int kl = static_cast<int>(ks % KSP);
      if (kl == 0) {
        __syncthreads();
        stage_panel<E, TK, BF>(xp, srow, ks * TK, a.cols);
        __syncthreads();
      }
      src.template step<BF>(u, ks, nks);
      if constexpr (BF) {
        HS_UNROLL for (int f = 0; f < 2; ++f)
#pragma unroll((kItemUnroll + 3) / 4)  // GGUF: one inlined decoder per row (compile time)
        for (int h = 0; h < 2; ++h) {
          const int i0 = 4 * f + h, i1 = i0 + 2;  // rows g and g + 8
          src.template prepare<BF>(u, i0, 0);
          src.template prepare<BF>(u, i1, 1);
          HS_UNROLL for (int p = 0; p < E / 4; ++p) {
            float w0[4], w1[4];
            src.get(i0, 0, p, w0);
            src.get(i1, 1, p, w1);
            const int slot = kl * TK + ((h * (E / 4) + p) * 4 + c) * 4;
            const uint32_t a0 = pack_bf16(w0[0], w0[1]), a1 = pack_bf16(w1[0], w1[1]);
            const uint32_t a2 = pack_bf16(w0[2], w0[3]), a3 = pack_bf16(w1[2], w1[3]);
            HS_UNROLL for (int nf = 0; nf < 2; ++nf) {
              const uint2 b = *reinterpret_cast<const uint2*>(xp + ((g + 8 * nf) * XS + slot) * 2);
              mma_bf16(accb[f][nf], a0, a1, a2, a3, b.x, b.y);
            }
          }
        }
      } else {
#pragma unroll(kItemUnroll)
        for (int i = 0; i < 8; ++i) {
          src.template prepare<BF>(u, i, 0);
          HS_UNROLL for (int p = 0; p < E / 4; ++p) {
            float w[4];
            src.get(i, 0, p, w);
            const int kx = kl * TK + i * E + 4 * p;
            HS_UNROLL for (int tok = 0; tok < kTok; ++tok)
              accf[tok] = fma4(w, *reinterpret_cast<const float4*>(xp + (tok * XS + kx) * 4), accf[tok]);
          }
        }
      }
      src.end_step();
    }
    auto put = [&](int64_t row, int tok, float v) {
      if (tok < m && row < a.rows) a.out[(p0 + tok) * a.rows + row] = v;
    };
    auto wgt = [&](int tok) { return tok < m ? a.weight[a.perm[p0 + tok]] : 0.f; };
    if constexpr (BF) {
      HS_UNROLL for (int nf = 0; nf < 2; ++nf) HS_UNROLL for (int i = 0; i < 4; ++i) {
        const int tok = nf * 8 + 2 * c + (i & 1);
        const int64_t row = u.r0 + g + 8 * (i >> 1);
        if (GU) put(row, tok, wgt(tok) * swiglu(accb[0][nf][i], accb[1][nf][i], a.limit));
        else put(row, tok, accb[0][nf][i]), put(row + 16, tok, accb[1][nf][i]);
      }
    } else {
      HS_UNROLL for (int tok = 0; tok < kTok; ++tok) {  // gate/up: lanes 16..31 hold the w3 rows
        const float up = __shfl_down_sync(kFullMask, accf[tok], 16);
        if (!GU) put(u.r0 + lane, tok, accf[tok]);
        else if (lane < 16) put(u.r0 + lane, tok, wgt(tok) * swiglu(accf[tok], up, a.limit));
      }
    }
  }
}

// y[t, :] = sum of the token's slot rows of d in ascending expert id (round: each row rounded
// to bf16 first, model numerics).
__global__ void __launch_bounds__(kThreads) moe_reduce_kernel(const float* d, const int* pos_of, const int32_t* idx,
                                                              int k, int E, int64_t D, bool round, float* y) {
  pdl_enter();
  __shared__ int order[kMoeMaxK];
  const int64_t t = blockIdx.x;
  if (static_cast<int>(threadIdx.x) < k)
    order[slot_rank(idx + t * k, k, threadIdx.x, E)] = pos_of[t * k + threadIdx.x];
  __syncthreads();
  for (int64_t c = threadIdx.x; c < D / 4; c += blockDim.x) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int j = 0; j < k; ++j) {
      float4 v = reinterpret_cast<const float4*>(d + static_cast<int64_t>(order[j]) * D)[c];
      if (round) v = make_float4(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));
      s = make_float4(s.x + v.x, s.y + v.y, s.z + v.z, s.w + v.w);
    }
    reinterpret_cast<float4*>(y + t * D)[c] = s;
  }
}

// y[t, :] = sum over r < k of d[t * k + r, :] in r order (decode, the token's slot rows already
// in ascending expert id), each rounded to bf16 first when round (model numerics).
__global__ void __launch_bounds__(kThreads) slot_sum_kernel(const float* d, int k, int64_t D, bool round, float* y) {
  pdl_enter();
  const int64_t t = blockIdx.y;
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < D / 4;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int r = 0; r < k; ++r) {
      float4 v = reinterpret_cast<const float4*>(d + (t * k + r) * D)[c];
      if (round) v = make_float4(bf16_round(v.x), bf16_round(v.y), bf16_round(v.z), bf16_round(v.w));
      s = make_float4(s.x + v.x, s.y + v.y, s.z + v.z, s.w + v.w);
    }
    reinterpret_cast<float4*>(y + t * D)[c] = s;
  }
}

// ---------------------------------------------------------------------------------------
// Host side

template <class S> struct Tag { using type = S; };  // a weight source, for generic lambdas

// f(Tag<Src>{}) with the weight source of w's type.
template <class F>
void with_src(const WeightView& w, F&& f) {
  switch (w.type) {
#define HS_NATIVE(T) case WType::T: return f(Tag<NativeSrc<WType::T>>{});
    HS_NATIVE(F32) HS_NATIVE(F16) HS_NATIVE(BF16) HS_NATIVE(Q8_0) HS_NATIVE(FP8_B128) HS_NATIVE(MXFP4)
#undef HS_NATIVE
    case WType::GGML_BLOCK:
      switch (w.ggml) {
#define HS_CASE(TYPE) \
  case GgmlType::TYPE: return f(Tag<GgmlSrc<GgmlType::TYPE>>{});
        HS_GGML_BLOCK_TYPES(HS_CASE)
#undef HS_CASE
        default: break;
      }
  }
  fail("moe_experts: no CUDA decoder for ", wtype_name(w.type));
}

void check_view(const WeightView& w, const char* name, int64_t rows, int64_t cols, int64_t rows_per_expert) {
  HS_CHECK(w.data != nullptr, "moe_experts: ", name, " is empty");
  HS_CHECK(w.rows == rows && w.cols == cols, "moe_experts: ", name, " is ", w.rows, "x", w.cols, ", expected ", rows,
           "x", cols);
  const bool ggml = w.type == WType::GGML_BLOCK;
  HS_CHECK(!ggml || ggml_block_supported(w.ggml), "moe_experts: no CUDA decoder for GGUF ", name, " blocks of type ",
           ggml_type_info(static_cast<uint32_t>(w.ggml)) ? ggml_type_name(w.ggml) : "?");
  const bool scaled = w.type == WType::Q8_0 || w.type == WType::FP8_B128 || w.type == WType::MXFP4;
  HS_CHECK(!scaled || w.scales != nullptr, "moe_experts: ", wtype_name(w.type), " ", name, " without scales");
  const int64_t unit = ggml ? std::max<int64_t>(32, ggml_type_info(w.ggml).block_elems)
                       : w.type == WType::F32 ? 4
                       : w.type == WType::FP8_B128 ? 16
                       : (w.type == WType::F16 || w.type == WType::BF16) ? 8 : 32;
  HS_CHECK(cols % unit == 0, "moe_experts: ", name, " (", wtype_name(w.type),
           ") needs an input width that is a multiple of ", unit, ", got ", cols);
  HS_CHECK(w.type != WType::FP8_B128 || rows_per_expert % 128 == 0, "moe_experts: FP8_B128 ", name,
           " experts must start on 128-row scale blocks, got ", rows_per_expert, " rows per expert");
  HS_CHECK(reinterpret_cast<uintptr_t>(w.data) % 16 == 0, "moe_experts: ", name, " data must be 16-byte aligned");
}

// h: the routed rows [n * k, I] then the shared expert's [n, I]; gs/us/ds: the shared expert's
// g, u [n, I] and output [n, D] when it takes matmul; d .. n_items: the sorted path.
// (decode: d holds the per-slot rows [n * k, D] and perm the experts in ascending order [n, k]).
struct WsLayout { size_t h = 0, gs = 0, us = 0, ds = 0, d = 0, perm = 0, pos = 0, items = 0, n_items = 0, total = 0; };
// (items of kTok tokens in prefill, of kBCols in the grouped decode)
int64_t max_items(int64_t nk, int E) { return (nk + kBCols - 1) / kBCols + std::min<int64_t>(E, nk); }
WsLayout ws_layout(int64_t n, int k, int64_t D, int64_t I, int E) {
  WsLayout w;
  const int64_t nk = n * k;
  auto take = [&](int64_t b) { return std::exchange(w.total, w.total + static_cast<size_t>((b + 255) / 256 * 256)); };
  // (comma operator: left to right)
  w.h = take((nk + n) * I * 4), w.gs = take(n * I * 4), w.us = take(n * I * 4), w.ds = take(n * D * 4);
  w.d = take((nk + n) * D * 4), w.perm = take(nk * 4), w.pos = take(nk * 4), w.items = take(max_items(nk, E) * 16),
  w.n_items = take(4);
  return w;
}

template <class A>
void set_weights(A& d, const WeightView& a, const WeightView& b) {
  auto u8 = [](const void* p) { return static_cast<const uint8_t*>(p); };
  d.wa = u8(a.data), d.sa = u8(a.scales), d.wa_end = d.wa + a.data_bytes();
  d.wb = u8(b.data), d.sb = u8(b.scales), d.wb_end = d.wb + b.data_bytes();
}


// Decode launch: grid (row groups, nq), nq = n*k slots (gate/up) or n tokens (down). The
// split-K factor gives the GPU enough blocks while every lane keeps >= 2 steps.
template <class Src, int R, bool GU>
void launch_dec(DeviceContext& ctx, DecArgs a, int64_t nq) {
  constexpr int NS = GU ? 2 * R : R;
  const void* kern = reinterpret_cast<const void*>(dec_kernel<Src, R, GU>);
  size_t fixed = 0;
  int64_t unit = 32;
  if constexpr (Src::kGgml) fixed = Src::kTables + size_t{kWarps} * NS * Geo<Src::kType>::kStage;
  else unit = WTraits<Src::kType>::E;
  const size_t optin = ctx.props().sharedMemPerBlockOptin, reserve = 4096 + fixed;
  const int64_t fit = optin > reserve ? static_cast<int64_t>((optin - reserve) / (static_cast<size_t>(a.L) * 4)) : 0;
  HS_CHECK(fit >= 1, "moe_experts: an input row of ", a.L, " floats does not fit in shared memory");
  a.seg_per_piece = static_cast<int>(std::min<int64_t>(GU ? 1 : a.k, fit));
  const int64_t units = a.seg_per_piece * (a.L / unit);
  auto blocks = [&](int s) { return (a.rows + kWarps / s * R - 1) / (kWarps / s * R) * nq; };
  a.splits = 1;
  while (a.splits < kWarps && 2 * blocks(a.splits) < 3 * ctx.sm_count() && units >= 128LL * a.splits) a.splits *= 2;
  const size_t smem = fixed + static_cast<size_t>(a.seg_per_piece) * a.L * 4;
  ctx.ensure_dynamic_smem(kern, smem);
  const int64_t rpb = kWarps / a.splits * R;
  const dim3 grid(static_cast<unsigned>((a.rows + rpb - 1) / rpb), static_cast<unsigned>(nq));
  void* args[] = {&a};
  launch(ctx, kern, grid, dim3(kThreads), smem, args);
}

// Prefill launch: a persistent grid over (item, row tile) pairs; bf: tensor cores.
template <bool GU>
void launch_pf(DeviceContext& ctx, const WeightView& w, PfArgs a, GemmMode mode, int64_t max_units) {
  const bool bf = mode == GemmMode::Bf16 || (mode == GemmMode::Auto && w.type != WType::F32);
  with_src(w, [&](auto tag) {
    using Src = typename decltype(tag)::type;
    const void* kern = bf ? reinterpret_cast<const void*>(pf_kernel<Src, GU, true>)
                          : reinterpret_cast<const void*>(pf_kernel<Src, GU, false>);
    const size_t smem = Src::pf_smem() + static_cast<size_t>(kTok) * (bf ? (panel_k<true>() + 16) * 2
                                                                          : (panel_k<false>() + 16) * 4);
    HS_CHECK(smem + 1024 <= ctx.props().sharedMemPerBlockOptin, "moe_experts: prefill tile needs ", smem,
             " bytes of shared memory");
    ctx.ensure_dynamic_smem(kern, smem);
    const int64_t bps = std::max(1, ctx.blocks_per_sm(kern, kThreads, smem));
    const int64_t grid = std::max<int64_t>(1, std::min<int64_t>(bps * ctx.sm_count(), max_units));
    void* args[] = {&a};
    launch(ctx, kern, dim3(static_cast<unsigned>(grid)), dim3(kThreads), smem, args);
  });
}

// The decode path of moe_fast_decode.cuh when every matrix has a native type and the input rows
// fit in shared memory; false: nothing was launched.
bool fast_decode(DeviceContext& ctx, const WeightView& w1, const WeightView& w3, const WeightView& w2, int E,
                 const float* x, int64_t n, const int32_t* idx, const float* weight, int k, float limit,
                 uint8_t* ws, float* y, const MoeShared* shared, bool model) {
  const int64_t I = w1.rows / E, D = w1.cols, nk = n * k;
  const WType tg = w1.type, td = w2.type;
  const WType sg = shared ? shared->w1.type : tg, sd = shared ? shared->w2.type : td;
  if (!fast_native(tg) || !fast_native(td) || !fast_native(sg) || !fast_native(sd)) return false;
  const size_t optin = ctx.props().sharedMemPerBlockOptin;
  const size_t need = std::max(std::max(fast_smem(tg, D), fast_smem(sg, D)),
                               std::max(fast_smem(td, I), fast_smem(sd, I)));
  if (need + 4096 > optin) return false;
  const WsLayout L = ws_layout(n, k, D, I, E);
  float* h = reinterpret_cast<float*>(ws + L.h);
  float* d = reinterpret_cast<float*>(ws + L.d);
  int32_t* perm = reinterpret_cast<int32_t*>(ws + L.perm);
  const int nsh = shared ? static_cast<int>(n) : 0;
  auto u8 = [](const void* p) { return static_cast<const uint8_t*>(p); };
  FastArgs a{};
  a.wa[0] = u8(w1.data), a.wb[0] = u8(w3.data), a.sa[0] = u8(w1.scales), a.sb[0] = u8(w3.scales);
  if (shared)
    a.wa[1] = u8(shared->w1.data), a.wb[1] = u8(shared->w3.data), a.sa[1] = u8(shared->w1.scales),
    a.sb[1] = u8(shared->w3.scales);
  a.x = x, a.idx = idx, a.weight = weight, a.out = h, a.idx_sorted = perm, a.rows = I, a.K = D;
  a.k = k, a.E = E, a.nk = static_cast<int>(nk), a.q0 = 0, a.limit = limit;
  fast_pair<true>(ctx, a, tg, sg, static_cast<int>(nk), nsh);
  if (model) act_quant_fp8(ctx, h, nk + nsh, I);  // the FP8 round trip of the down projections' inputs
  a.wa[0] = a.wb[0] = u8(w2.data), a.sa[0] = a.sb[0] = u8(w2.scales);
  if (shared) a.wa[1] = a.wb[1] = u8(shared->w2.data), a.sa[1] = a.sb[1] = u8(shared->w2.scales);
  a.x = h, a.idx = perm, a.weight = nullptr, a.out = d, a.idx_sorted = nullptr, a.rows = D, a.K = I;
  fast_pair<false>(ctx, a, td, sd, static_cast<int>(nk), nsh);
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((D / 4 + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(n));
  launch(ctx, fast_combine_kernel, grid, kThreads, 0, d, k, nk, D, shared != nullptr, model, y);
  return true;
}

}  // namespace

size_t moe_experts_workspace_bytes(int64_t n, int k, int64_t D, int64_t I, int n_experts) {
  return ws_layout(n, k, D, I, n_experts).total;
}

void moe_experts(DeviceContext& ctx, const WeightView& w1, const WeightView& w3, const WeightView& w2, int n_experts,
                 const float* x, int64_t n, const int32_t* idx, const float* weight, int k, float limit,
                 GemmMode mode, void* workspace, float* y, const MoeShared* shared, bool model,
                 const MoeTuning& tune) {
  const int E = n_experts;
  HS_CHECK(k >= 1 && k <= kMoeMaxK, "moe_experts: k must be 1..", kMoeMaxK, ", got ", k);
  HS_CHECK(E >= 1 && E <= kMoeMaxExperts, "moe_experts: n_experts must be 1..", kMoeMaxExperts, ", got ", E);
  HS_CHECK(k <= E, "moe_experts: k = ", k, " exceeds n_experts = ", E);
  HS_CHECK(n >= 0 && n * k < (int64_t{1} << 31), "moe_experts: bad token count ", n);
  HS_CHECK(w1.rows % E == 0, "moe_experts: w1 has ", w1.rows, " rows, not a multiple of ", E, " experts");
  const int64_t I = w1.rows / E, D = w1.cols;
  check_view(w1, "w1", E * I, D, I);
  check_view(w3, "w3", E * I, D, I);
  check_view(w2, "w2", E * D, I, D);
  HS_CHECK(w1.type == w3.type && (w1.type != WType::GGML_BLOCK || w1.ggml == w3.ggml),
           "moe_experts: w1 and w3 must have one type, got ", wtype_name(w1.type), " and ", wtype_name(w3.type));
  if (shared) {
    check_view(shared->w1, "shared w1", I, D, I);
    check_view(shared->w3, "shared w3", I, D, I);
    check_view(shared->w2, "shared w2", D, I, D);
    HS_CHECK(shared->w1.type == shared->w3.type &&
                 (shared->w1.type != WType::GGML_BLOCK || shared->w1.ggml == shared->w3.ggml),
             "moe_experts: shared w1 and w3 must have one type");
  }
  for (int ks : {tune.gate_up_ksplit, tune.down_ksplit})
    HS_CHECK(ks >= 0 && ks <= kWarps && (ks & (ks - 1)) == 0, "moe_experts: a K-split must be 1, 2, 4 or 8 (0: the rule), got ",
             ks);
  if (n == 0) return;
  HS_CHECK(x && y && idx && weight, "moe_experts: null input or output");
  const bool grouped = n >= std::max<int64_t>(tune.grouped_from, 2) && n <= kMoeDecodeMaxTokens &&
                       grouped_decode_ok(ctx, w1, w2, D, I);
  if (n > kMatvecMaxCols && n <= kMoeDecodeMaxTokens && !grouped) {  // the decode kernels, kMatvecMaxCols tokens at a time
    for (int64_t t0 = 0; t0 < n; t0 += kMatvecMaxCols) {
      const int64_t m = std::min<int64_t>(kMatvecMaxCols, n - t0);
      moe_experts(ctx, w1, w3, w2, n_experts, x + t0 * D, m, idx + t0 * k, weight + t0 * k, k, limit, mode, workspace,
                  y + t0 * D, shared, model, tune);
    }
    return;
  }
  HS_CHECK(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0,
           "moe_experts: x and y must be 16-byte aligned");
  HS_CHECK(workspace && reinterpret_cast<uintptr_t>(workspace) % 256 == 0,
           "moe_experts: workspace must be non-null and 256-byte aligned");
  DeviceGuard guard(ctx.device());
  const WsLayout L = ws_layout(n, k, D, I, E);
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  auto fws = [&](size_t off) { return reinterpret_cast<float*>(ws + off); };
  float* h = fws(L.h);  // routed rows, then the shared expert's
  float* hs = h + n * k * I;
  const int64_t nk = n * k;
  if (grouped) {
    const GroupedWs gw{h, fws(L.d), fws(L.gs), fws(L.us), reinterpret_cast<int*>(ws + L.perm),
                       reinterpret_cast<int*>(ws + L.pos), reinterpret_cast<int*>(ws + L.n_items),
                       reinterpret_cast<int4*>(ws + L.items)};
    return grouped_decode(ctx, w1, w3, w2, E, x, n, idx, weight, k, limit, gw, y, shared, model, tune);
  }

  // Native weights in decode: moe_fast_decode.cuh (two streaming launches and a combine).
  if (n <= kMatvecMaxCols && fast_decode(ctx, w1, w3, w2, E, x, n, idx, weight, k, limit, ws, y, shared, model))
    return;

  // Routed experts. Decode (n <= 8): the streaming kernels; the down projection sums the slots
  // of a token as one dot product over the concatenated h rows in ascending expert id, or, under
  // model numerics, writes each slot's row (the gate/up kernel lists the experts in that order)
  // and slot_sum_kernel rounds and adds them. Prefill: the sorted path.
  const bool decode = n <= kMatvecMaxCols;
  float* d = fws(L.d);
  int* perm = reinterpret_cast<int*>(ws + L.perm);
  int* pos = reinterpret_cast<int*>(ws + L.pos);
  DecArgs ra{};
  bool shared_gate_up_done = false;  // the shared expert's h came with the routed gate/up launch
  const bool q2k_down_tc = decode && q2k_down_ok(ctx, w2, shared, I);  // (it reads the experts by rank)
  if (decode) {
    set_weights(ra, w1, w3);
    ra.x = x, ra.idx = idx, ra.weight = weight, ra.out = h, ra.rows = I, ra.L = D, ra.k = k, ra.E = E, ra.limit = limit;
    ra.idx_sorted = model || q2k_down_tc ? perm : nullptr;
    if (iq2_gate_up_ok(ctx, w1, D)) {  // moe_iq2_decode.cuh: tensor cores, a Q8_0 shared expert in the launch
      FastArgs fa{};
      fa.wa[0] = ra.wa, fa.wb[0] = ra.wb, fa.x = x, fa.idx = idx, fa.weight = weight, fa.out = h;
      fa.idx_sorted = ra.idx_sorted, fa.rows = I, fa.K = D, fa.k = k, fa.E = E, fa.limit = limit;
      fa.s8 = tune.int8_gate_up;  // (taken where x is an FP8 round trip: model numerics; the kernel checks)
      if (shared && shared->w1.type == WType::Q8_0) {
        auto u8 = [](const void* p) { return static_cast<const uint8_t*>(p); };
        fa.wa[1] = u8(shared->w1.data), fa.wb[1] = u8(shared->w3.data);
        fa.sa[1] = u8(shared->w1.scales), fa.sb[1] = u8(shared->w3.scales);
        shared_gate_up_done = true;
      }
      iq2_gate_up(ctx, fa, static_cast<int>(nk), shared_gate_up_done ? static_cast<int>(n) : 0, ra.wa_end,
                  ra.wb_end, tune.gate_up_ksplit);
    } else {
      with_src(w1, [&](auto tag) { launch_dec<typename decltype(tag)::type, 2, true>(ctx, ra, nk); });
    }
  } else {
    const int64_t mi = max_items(nk, E);
    int4* items = reinterpret_cast<int4*>(ws + L.items);
    int* n_items = reinterpret_cast<int*>(ws + L.n_items);
    launch(ctx, moe_sort_kernel, 1, 1024, 0, idx, static_cast<int>(nk), E, perm, pos, items, n_items, kTok);
    PfArgs p{};
    set_weights(p, w1, w3);
    p.x = x, p.perm = perm, p.weight = weight, p.items = items, p.n_items = n_items, p.out = h;
    p.rows = I, p.cols = D, p.k = k, p.n_rt = static_cast<int>((I + 127) / 128), p.limit = limit;
    // IQ2_XXS gate/up and Q2_K down with inputs of bf16 values (model numerics): the grouped
    // bodies (moe_grouped_decode.cuh), same h and d layout.
    const bool grouped_pf = model && tune.grouped_prefill && mi <= 65535;  // (grid.y: the items)
    const GroupedItems gi{perm, items, n_items};
    if (grouped_pf && iq2_gate_up_prefill_ok(ctx, w1, D))
      iq2_gate_up_prefill(ctx, w1, w3, E, x, k, weight, limit, gi, mi, tune.gate_up_ksplit, h);
    else
      launch_pf<true>(ctx, w1, p, mode, p.n_rt * mi);
    if (model) act_quant_fp8(ctx, h, nk, I);
    set_weights(p, w2, w2);
    p.x = h, p.out = d, p.rows = D, p.cols = I, p.n_rt = static_cast<int>((D + 255) / 256);
    if (grouped_pf && q2k_down_prefill_ok(ctx, w2, I))
      q2k_down_prefill(ctx, w2, E, k, h, gi, mi, tune.down_ksplit, d);
    else
      launch_pf<false>(ctx, w2, p, mode, p.n_rt * mi);
  }

  // The shared expert's h (no routing weight), next to the routed rows.
  const bool sh_dec = shared && decode;
  DecArgs sa{};
  sa.k = 1, sa.E = 1, sa.limit = limit;
  if (sh_dec && !shared_gate_up_done) {
    set_weights(sa, shared->w1, shared->w3);
    sa.x = x, sa.out = hs, sa.rows = I, sa.L = D;
    with_src(shared->w1, [&](auto tag) { launch_dec<typename decltype(tag)::type, 2, true>(ctx, sa, n); });
  } else if (shared && !sh_dec) {
    matmul(ctx, shared->w1, x, n, fws(L.gs), mode);
    matmul(ctx, shared->w3, x, n, fws(L.us), mode);
    swiglu_clamp(ctx, fws(L.gs), fws(L.us), n * I, limit, hs);
  }
  if (model) {  // FP8 round trip of the down projections' inputs (the sorted path did its own)
    if (decode) act_quant_fp8(ctx, h, nk + (shared ? n : 0), I);
    else if (shared) act_quant_fp8(ctx, hs, n, I);
  }

  if (q2k_down_tc) {  // moe_q2k_decode.cuh: routed and shared segments in one launch, then their sum
    set_weights(ra, w2, w2);
    FastArgs fa{};
    fa.wa[0] = fa.wb[0] = ra.wa;
    if (shared) {
      fa.wa[1] = fa.wb[1] = static_cast<const uint8_t*>(shared->w2.data);
      fa.sa[1] = fa.sb[1] = static_cast<const uint8_t*>(shared->w2.scales);
    }
    fa.x = h, fa.idx = perm, fa.out = d, fa.rows = D, fa.K = I, fa.k = k, fa.E = E, fa.limit = limit;
    fa.s8 = tune.int8_down;
    q2k_down(ctx, fa, static_cast<int>(nk), shared ? static_cast<int>(n) : 0, ra.wa_end, tune.down_ksplit);
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((D / 4 + kThreads - 1) / kThreads, 64)),
                    static_cast<unsigned>(n));
    launch(ctx, fast_combine_kernel, grid, kThreads, 0, d, k, nk, D, shared != nullptr, model, y);
    return;
  }
  if (decode) {
    set_weights(ra, w2, w2);
    ra.x = h, ra.rows = D, ra.L = I;
    if (!model) {
      ra.out = y;
      with_src(w2, [&](auto tag) { launch_dec<typename decltype(tag)::type, 4, false>(ctx, ra, n); });
    } else {  // one slot per "token": expert perm[t * k + r] against h[t, r]
      ra.idx = perm, ra.k = 1, ra.out = d, ra.idx_sorted = nullptr;
      with_src(w2, [&](auto tag) { launch_dec<typename decltype(tag)::type, 4, false>(ctx, ra, nk); });
      const dim3 grid(static_cast<unsigned>(std::min<int64_t>((D / 4 + kThreads - 1) / kThreads, 64)),
                      static_cast<unsigned>(n));
      launch(ctx, slot_sum_kernel, grid, kThreads, 0, d, k, D, true, y);
    }
  } else {
    launch(ctx, moe_reduce_kernel, static_cast<unsigned>(n), kThreads, 0, d, pos, idx, k, E, D, model, y);
  }

  // y += the shared expert's output (model numerics: that output and the sum rounded to bf16).
  if (sh_dec) {
    set_weights(sa, shared->w2, shared->w2);
    sa.x = hs, sa.out = y, sa.rows = D, sa.L = I, sa.round_seg = model, sa.accumulate = true, sa.round_out = model;
    with_src(shared->w2, [&](auto tag) { launch_dec<typename decltype(tag)::type, 4, false>(ctx, sa, n); });
  } else if (shared) {
    float* ds = fws(L.ds);
    matmul(ctx, shared->w2, hs, n, ds, mode);
    if (model) round_bf16(ctx, ds, n * D);
    add(ctx, y, ds, n * D);
    if (model) round_bf16(ctx, y, n * D);
  }
}

}  // namespace hs::cuda
