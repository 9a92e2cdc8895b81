// The decode (n <= 8) down projection of Q2_K routed experts on tensor cores (the q2 mix's
// down experts), with a Q8_0 shared expert in the same launch. Included by moe_experts.cu only;
// it replaces the staged f32 kernel (moe_experts_decode.cuh) for this one projection. Its
// per-segment rows are added by fast_combine_kernel (moe_fast_decode.cuh), as the native types'.
//
// Why: the f32 decode is issue-bound on Q2_K (ncu on the H200, 8L q2: 34 us for 16.5 MB of
// down weights at n = 1). Here the 2-bit codes never become f32: four codes of a row (one byte
// each at one shift) become two bf16x2 words by one multiply-add and two byte permutes from a
// palette of bf16(0..3), and mma.sync m16n8k16 multiplies them by h split into three bf16 terms
// (f32-exact, the MXFP4 and IQ2_XXS paths' scheme). A k-step is one 16-element sub-block: its
// sum of q * h is scaled by dl = d * (sc & 15) and the sub-block's sum of h, times ml = dmin *
// (sc >> 4), is subtracted: dl * sum(q h) - ml * sum(h) = sum((dl q - ml) h), the CPU's
// dequantise-then-dot in another order.
//
// Geometry: a block of 8 warps = TR row spans x KS K-splits. A warp owns 32 rows of w2 (two
// 16-row fragments) and walks its share of K one 256-element block at a time; a step copies the
// 32 rows' block bytes (the 16-byte-aligned 96 bytes around each 84-byte block) into a ring slot
// by cp.async, kQ2Depth - 1 steps ahead. K inside a sub-block is permuted (A and B alike): mma
// k = 2c, 2c+1 take elements 4c, 4c+1 and k = 2c+8, 2c+9 elements 4c+2, 4c+3, so lane (g, c)
// reads one 32-bit word of codes per row and 128-element half, which serves four sub-blocks.
#pragma once

#include "kernels/cuda/moe_fast_decode.cuh"

namespace hs::cuda {

using namespace detail;

namespace {

constexpr int kQ2Row = 96;             // staged bytes per row and step
constexpr int kQ2Slot = 32 * kQ2Row;   // one step of a warp's 32 rows
constexpr int kQ2Depth = 3;            // ring slots per warp

// Dynamic shared memory: [B terms: K/16 sub-blocks x 96 B][sums: K/16 floats][ring][16 B pad].
size_t q2k_smem(int64_t K) {
  return static_cast<size_t>(K) * 6 + static_cast<size_t>(K / 16) * 4 + size_t{kWarps} * kQ2Depth * kQ2Slot + 16;
}

// bf16 bits of 0, 1, 2, 3: low bytes 00 80 00 40, high bytes 00 3F 40 40 (palette bytes 0..3, 4..7).
constexpr uint32_t kQ2PalLo = 0x40008000u, kQ2PalHi = 0x40403F00u;

// Sub-block S, term t, lane c -> uint2 (elements 4c, 4c+1 | 4c+2, 4c+3 of the sub-block) at
// (S * 3 + t) * 4 + c; sx[S] = the sub-block's 16 values added in element order.
__device__ __forceinline__ void stage_q2k_terms(uint2* bs, float* sx, const float* x, int64_t K) {
  for (int64_t S = threadIdx.x; S < K / 16; S += blockDim.x) {
    float4 v4[4];
    HS_UNROLL for (int c = 0; c < 4; ++c) v4[c] = reinterpret_cast<const float4*>(x + 16 * S)[c];
    float s = 0.f;
    HS_UNROLL for (int c = 0; c < 4; ++c) {
      float v[4] = {v4[c].x, v4[c].y, v4[c].z, v4[c].w};
      s += v[0], s += v[1], s += v[2], s += v[3];
      uint2 o[3];
      bf16_terms(v, o);
      HS_UNROLL for (int t = 0; t < 3; ++t) bs[(S * 3 + t) * 4 + c] = o[t];
    }
    sx[S] = s;
  }
}

// One routed segment's slice (expert e against h row q): every warp's partial sums of its 32
// rows into red (fast_body's layout).
__device__ __forceinline__ void q2k_body(const FastArgs& a, const uint8_t* w_end, uint8_t* smem, float* red, int e,
                                         int q) {
  uint2* bs = reinterpret_cast<uint2*>(smem);
  float* sx = reinterpret_cast<float*>(smem + a.K * 6);
  uint8_t* rings = smem + a.K * 6 + a.K / 16 * 4;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  const int tr = warp % a.TR, ks = warp / a.TR;
  const int64_t K = a.K, nb = K / 256, rb = nb * 84;
  const int64_t span0 = static_cast<int64_t>(blockIdx.x) * a.TR * 32 + tr * 32;
  const int64_t gpw = (nb + a.KS - 1) / a.KS, J0 = min64(nb, ks * gpw), J1 = min64(nb, J0 + gpw);
  const int64_t e_row0 = static_cast<int64_t>(e) * a.rows;
  uint8_t* wring = rings + warp * kQ2Depth * kQ2Slot;
  // Staged row j: row span0 + j (rows past the end repeat the last one: computed, not stored).
  auto row_base = [&](int j) { return a.wa[0] + (e_row0 + min64(span0 + j, a.rows - 1)) * rb; };
  auto fill = [&](int64_t b, uint8_t* st) {
    HS_UNROLL for (int i = 0; i < 6; ++i) {
      const int qd = lane + 32 * i, j = qd / 6, part = qd - 6 * j;
      const uintptr_t p = (reinterpret_cast<uintptr_t>(row_base(j) + 84 * b) & ~uintptr_t{15}) + 16 * part;
      cp_async16(st + j * kQ2Row + 16 * part, reinterpret_cast<const uint8_t*>(p), w_end);
    }
  };
  const WarpRing<kQ2Depth> ring{wring, kQ2Slot, J0, J1};
  ring.prime(fill);
  stage_q2k_terms(bs, sx, a.x + static_cast<int64_t>(q) * K, K);  // while the first steps load
  __syncthreads();
  const uint8_t* rbase[2][2];  // this lane's rows: [f][h] = row 16 f + g + 8 h of the span
  HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) rbase[f][h] = row_base(16 * f + g + 8 * h);
  float acc[2][2] = {};
  ring.run(fill, [&](int64_t b, const uint8_t* st) {
    const uint32_t* st32 = reinterpret_cast<const uint32_t*>(st);
    int off[2][2];  // the block's byte offset in the slot (a multiple of 4)
    float d[2][2];
    uint32_t sw[2][2][4];  // the 16 scale bytes
    HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
      off[f][h] = (16 * f + g + 8 * h) * kQ2Row + static_cast<int>(reinterpret_cast<uintptr_t>(rbase[f][h] + 84 * b) & 15);
      const uint32_t dd = st32[(off[f][h] + 80) >> 2];  // d, dmin
      d[f][h] = f16_bits_to_f32(static_cast<uint16_t>(dd));
      HS_UNROLL for (int i = 0; i < 4; ++i) sw[f][h][i] = st32[(off[f][h] >> 2) + i];
      // The min terms of sub-blocks c, c + 4, c + 8, c + 12 (the quad's lanes share them out).
      const float dmin = f16_bits_to_f32(static_cast<uint16_t>(dd >> 16));
      HS_UNROLL for (int i = 0; i < 4; ++i) {
        const uint32_t sc = (sw[f][h][i] >> (8 * c)) & 255u;
        acc[f][h] = fmaf(-(dmin * uint_f(sc >> 4)), sx[b * 16 + 4 * i + c], acc[f][h]);
      }
    }
    const uint2* bb = bs + b * 16 * 12 + g * 4 + c;  // sub-block S of the block: + S * 12
    HS_UNROLL for (int nh = 0; nh < 4; ++nh) {  // 128-element half n = nh / 2, 16-byte half nh % 2
      uint32_t wq[2][2];
      HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h)
        wq[f][h] = st32[((off[f][h] + 16 + 16 * nh) >> 2) + c];
      HS_UNROLL for (int j = 0; j < 4; ++j) {
        const int S = 8 * (nh >> 1) + 2 * j + (nh & 1);
        const uint2 bm = g < 3 ? bb[S * 12] : make_uint2(0u, 0u);
        HS_UNROLL for (int f = 0; f < 2; ++f) {
          uint32_t lo[2], hi[2];
          float dl[2];
          HS_UNROLL for (int h = 0; h < 2; ++h) {
            // Selector byte i = code | (code + 4) << 4: bytes (low, high) of bf16(code).
            const uint32_t sel = ((wq[f][h] >> (2 * j)) & 0x03030303u) * 0x11u + 0x40404040u;
            lo[h] = __byte_perm(kQ2PalLo, kQ2PalHi, sel);        // elements 4c, 4c+1
            hi[h] = __byte_perm(kQ2PalLo, kQ2PalHi, sel >> 16);  // elements 4c+2, 4c+3
            dl[h] = d[f][h] * uint_f((sw[f][h][S >> 2] >> (8 * (S & 3))) & 15u);
          }
          float cf[4] = {0.f, 0.f, 0.f, 0.f};
          mma_bf16(cf, lo[0], lo[1], hi[0], hi[1], bm.x, bm.y);
          acc[f][0] = fmaf(dl[0], cf[0] + cf[1], acc[f][0]);
          acc[f][1] = fmaf(dl[1], cf[2] + cf[3], acc[f][1]);
        }
      }
    }
  });
  // Lane c = 0 holds columns t0, t1 and lane c = 1 column t2 (its second column is zero); every
  // lane holds a quarter of the min terms.
  float* wred = red + (ks * a.TR + tr) * 32;
  HS_UNROLL for (int f = 0; f < 2; ++f) HS_UNROLL for (int h = 0; h < 2; ++h) {
    float v = acc[f][h];
    v += __shfl_xor_sync(kFullMask, v, 1);
    v += __shfl_xor_sync(kFullMask, v, 2);
    if (c == 0) wred[16 * f + g + 8 * h] = v;
  }
}

// grid (row blocks, segments): the first a.nsh segments are the shared expert's (token y, Q8_0
// planes in a.wa[1], a.sa[1]; moe_fast_decode.cuh's body), the rest routed segments y - a.nsh
// (expert a.idx[q] of w2 against h row q). Each segment's rows into a.out[q * rows + row].
__global__ void __launch_bounds__(kThreads, 2) q2k_down_kernel(FastArgs a, const uint8_t* w_end) {
  extern __shared__ uint4 smem4[];
  uint8_t* smem = reinterpret_cast<uint8_t*>(smem4);
  __shared__ float red[kWarps * 32];
  __shared__ int s_rank, s_e;
  __shared__ float s_w;
  const FastSlot sl = fast_slot<false>(a);
  if (threadIdx.x == 0) fast_slot_meta<false>(a, sl, &s_e, &s_rank, &s_w);
  __syncthreads();
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * a.TR * 32;
  if (sl.sh)
    fast_body<FMath<WType::Q8_0, false>, false>(a, a.wa[1], a.wa[1], a.sa[1], a.sa[1], 0,
                                                 a.x + static_cast<int64_t>(sl.q) * a.K, row0, smem, red);
  else
    q2k_body(a, w_end, smem, red, s_e, sl.q);
  __syncthreads();
  fast_epilogue<false>(a, red, row0, sl, s_rank, s_w);
}

// Whether the down projection takes this kernel: Q2_K blocks, whole 256-element rows, no shared
// expert or a Q8_0 one, the staging fits in shared memory.
bool q2k_down_ok(DeviceContext& ctx, const WeightView& w2, const MoeShared* shared, int64_t K) {
  return w2.type == WType::GGML_BLOCK && w2.ggml == GgmlType::Q2_K && K % 256 == 0 &&
         (!shared || shared->w2.type == WType::Q8_0) &&
         q2k_smem(K) + 2048 <= ctx.props().sharedMemPerBlockOptin;
}

// nk routed segments and nsh shared ones: the K-split as deep as keeps every warp at two or
// more steps, the rest of the block's warps row spans.
void q2k_down(DeviceContext& ctx, FastArgs a, int nk, int nsh, const uint8_t* w_end) {
  if (nk + nsh == 0) return;
  const int64_t nb = a.K / 256;
  a.KS = kWarps;
  while (a.KS > 1 && nb < 2 * a.KS) a.KS /= 2;
  a.TR = kWarps / a.KS;
  a.q0 = 0, a.nk = nk, a.nsh = nsh;
  const size_t smem = q2k_smem(a.K);
  const void* kern = reinterpret_cast<const void*>(q2k_down_kernel);
  ctx.ensure_dynamic_smem(kern, smem);
  const int64_t span = 32 * a.TR;
  const dim3 grid(static_cast<unsigned>((a.rows + span - 1) / span), static_cast<unsigned>(nk + nsh));
  void* args[] = {&a, &w_end};
  HS_CUDA_CHECK(cudaLaunchKernel(kern, grid, dim3(kThreads), args, smem, ctx.stream()));
}

}  // namespace
}  // namespace hs::cuda
