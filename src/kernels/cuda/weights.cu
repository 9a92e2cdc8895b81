// Weight views, uploads, and the device-side repack of GGUF Q8_0 / MXFP4 blocks into the
// 16-byte-aligned planes the kernels stream (ops_cuda.h describes the layouts).
#include <cstring>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops_cuda.h"
#include "kernels/cuda/weights.cuh"

namespace hs::cuda {

using namespace detail;

const char* wtype_name(WType t) {
  switch (t) {
    case WType::F32: return "F32";
    case WType::F16: return "F16";
    case WType::BF16: return "BF16";
    case WType::Q8_0: return "Q8_0";
    case WType::FP8_B128: return "FP8_B128";
    case WType::MXFP4: return "MXFP4";
    case WType::GGML_BLOCK: return "GGML_BLOCK";
  }
  return "?";
}

int64_t WeightView::data_bytes() const {
  switch (type) {
    case WType::F32: return rows * cols * 4;
    case WType::F16:
    case WType::BF16: return rows * cols * 2;
    case WType::Q8_0:
    case WType::FP8_B128: return rows * cols;
    case WType::MXFP4: return rows * cols / 2;
    case WType::GGML_BLOCK: return rows * ggml_row_bytes(ggml, cols);
  }
  return 0;
}

int64_t WeightView::scale_bytes() const {
  switch (type) {
    case WType::Q8_0: return rows * (cols / 32) * 2;
    case WType::MXFP4: return rows * (cols / 32);
    case WType::FP8_B128: return ((rows + 127) / 128) * ((cols + 127) / 128);
    default: return 0;
  }
}

WeightView WeightView::slice_rows(int64_t r0, int64_t n) const {
  HS_CHECK(r0 >= 0 && n >= 0 && r0 + n <= rows, "weight slice [", r0, ", ", r0 + n, ") outside ", rows, " rows");
  WeightView v = *this;
  v.rows = n;
  const int64_t per_row = rows > 0 ? data_bytes() / rows : 0;
  v.data = static_cast<const uint8_t*>(data) + r0 * per_row;
  switch (type) {
    case WType::Q8_0: v.scales = static_cast<const uint8_t*>(scales) + r0 * (cols / 32) * 2; break;
    case WType::MXFP4: v.scales = static_cast<const uint8_t*>(scales) + r0 * (cols / 32); break;
    case WType::FP8_B128:
      HS_CHECK(r0 % 128 == 0, "FP8 weight slices must start on a 128-row block, got row ", r0);
      v.scales = static_cast<const uint8_t*>(scales) + (r0 / 128) * ((cols + 127) / 128);
      break;
    default: break;
  }
  return v;
}

namespace {

// GGUF Q8_0 block (f16 d, 32 x int8) -> qs plane + d plane. One thread per block.
__global__ void repack_q8_0_kernel(const uint8_t* src, int64_t n_blocks, int8_t* qs, uint16_t* d) {
  pdl_enter();
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < n_blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint16_t* blk = reinterpret_cast<const uint16_t*>(src + b * 34);  // 2-byte aligned
    d[b] = blk[0];
    uint32_t* out = reinterpret_cast<uint32_t*>(qs + b * 32);
#pragma unroll
    for (int i = 0; i < 8; ++i) out[i] = static_cast<uint32_t>(blk[1 + 2 * i]) | (static_cast<uint32_t>(blk[2 + 2 * i]) << 16);
  }
}

// GGUF MXFP4 block (e8m0 e, 16 bytes of split-half nibbles) -> qs plane + e plane.
__global__ void repack_mxfp4_kernel(const uint8_t* src, int64_t n_blocks, uint8_t* qs, uint8_t* e) {
  pdl_enter();
  for (int64_t b = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; b < n_blocks;
       b += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* blk = src + b * 17;
    e[b] = blk[0];
    uint8_t v[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = blk[1 + i];
    uint4 u;
    memcpy(&u, v, 16);
    *reinterpret_cast<uint4*>(qs + b * 16) = u;
  }
}

}  // namespace

bool cuda_supports_gguf_type(GgmlType type) {
  return type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16 || ggml_block_supported(type);
}

DeviceWeight upload_gguf_weight(DeviceContext& ctx, GgmlType type, const void* host, int64_t rows, int64_t cols,
                                bool keep_blocks) {
  HS_CHECK(rows > 0 && cols > 0, "upload_gguf_weight: empty tensor");
  DeviceGuard g(ctx.device());
  DeviceWeight dw;
  dw.view.rows = rows;
  dw.view.cols = cols;
  switch (type) {
    case GgmlType::F32: dw.view.type = WType::F32; break;
    case GgmlType::F16: dw.view.type = WType::F16; break;
    case GgmlType::BF16: dw.view.type = WType::BF16; break;
    case GgmlType::Q8_0: dw.view.type = keep_blocks ? WType::GGML_BLOCK : WType::Q8_0; break;
    case GgmlType::MXFP4: dw.view.type = keep_blocks ? WType::GGML_BLOCK : WType::MXFP4; break;
    default:
      HS_CHECK(ggml_block_supported(type), "the CUDA backend has no kernels for GGUF type ",
               ggml_type_info(static_cast<uint32_t>(type)) ? ggml_type_name(type) : "(unknown)", " (id ",
               static_cast<uint32_t>(type), ")");
      dw.view.type = WType::GGML_BLOCK;
  }
  dw.view.ggml = type;
  const int64_t src_bytes = ggml_row_bytes(type, cols) * rows;  // also checks cols % block
  if (dw.view.type == WType::GGML_BLOCK) {  // the GGUF bytes as they are
    ggml_block_validate(type, host, src_bytes / ggml_type_info(type).block_bytes);
    dw.data = ctx.alloc(static_cast<size_t>(src_bytes));
    ctx.upload(dw.data.data(), host, static_cast<size_t>(src_bytes));
    dw.view.data = dw.data.data();
    return dw;
  }
  if (type == GgmlType::F32 || type == GgmlType::F16 || type == GgmlType::BF16) {
    dw.data = ctx.alloc(static_cast<size_t>(src_bytes));
    ctx.upload(dw.data.data(), host, static_cast<size_t>(src_bytes));
    dw.view.data = dw.data.data();
    return dw;
  }
  DeviceBuffer raw = ctx.alloc(static_cast<size_t>(src_bytes));
  ctx.upload(raw.data(), host, static_cast<size_t>(src_bytes));
  const int64_t n_blocks = rows * cols / 32;
  dw.data = ctx.alloc(static_cast<size_t>(dw.view.data_bytes()));
  dw.scales = ctx.alloc(static_cast<size_t>(dw.view.scale_bytes()));
  const unsigned grid = grid_for(n_blocks, 256);
  if (type == GgmlType::Q8_0)
    launch(ctx, repack_q8_0_kernel, grid, 256, 0, raw.as<uint8_t>(), n_blocks, dw.data.as<int8_t>(),
                                                        dw.scales.as<uint16_t>());
  else
    launch(ctx, repack_mxfp4_kernel, grid, 256, 0, raw.as<uint8_t>(), n_blocks, dw.data.as<uint8_t>(),
                                                         dw.scales.as<uint8_t>());
  ctx.synchronize();  // raw is freed on return
  dw.view.data = dw.data.data();
  dw.view.scales = dw.scales.data();
  return dw;
}

DeviceWeight upload_fp8_weight(DeviceContext& ctx, const uint8_t* host_w, const uint8_t* host_scales, int64_t rows,
                               int64_t cols) {
  HS_CHECK(rows > 0 && cols > 0 && cols % 16 == 0, "upload_fp8_weight: need cols % 16 == 0, got ", rows, "x", cols);
  DeviceWeight dw;
  dw.view.type = WType::FP8_B128;
  dw.view.rows = rows;
  dw.view.cols = cols;
  dw.data = ctx.alloc(static_cast<size_t>(dw.view.data_bytes()));
  dw.scales = ctx.alloc(static_cast<size_t>(dw.view.scale_bytes()));
  ctx.upload(dw.data.data(), host_w, dw.data.bytes());
  ctx.upload(dw.scales.data(), host_scales, dw.scales.bytes());
  dw.view.data = dw.data.data();
  dw.view.scales = dw.scales.data();
  return dw;
}

}  // namespace hs::cuda
