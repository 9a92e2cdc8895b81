// Synthetic weights made in device memory (`hyperstream bench --synthetic flash`): a
// DeepSeek-V4-Flash-shaped random model is built on the GPU in seconds, without generating tens
// of GB on the host. The host quantises a modest pool of random rows per (storage, width) once,
// with the reference quantisers of format/quants.h (values drawn like model/synthetic_weights.cpp:
// mean 0, standard deviation 1/sqrt(cols)); the pool is uploaded in the device layout of
// upload_gguf_weight / upload_fp8_weight, and a kernel fills each weight by copying pool rows
// chosen by a hash of (seed, row). Every row of a made weight is therefore a valid quantised row
// (real scales, no NaN), equal to one pool row, and different seeds give different weights.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "format/ggml_types.h"
#include "kernels/cuda/ops_cuda.h"

namespace hs {
class ThreadPool;
}

namespace hs::cuda {

// The storage of a synthetic weight: a GGUF type with a reference quantiser (format/quants.h
// type_has_quantizer: F32, F16, BF16, Q8_0, MXFP4, Q2_K, Q4_K, ...) and a CUDA decoder, stored as
// upload_gguf_weight stores it (Q8_0 / MXFP4 split into planes unless keep_blocks), or DeepSeek's
// official FP8 (e4m3 + e8m0 scales per 128x128 block, WType::FP8_B128).
struct SynthType {
  GgmlType ggml = GgmlType::F32;
  bool fp8_b128 = false;     // FP8_B128 (ggml unused)
  bool keep_blocks = false;  // Q8_0 / MXFP4 as GGML_BLOCK
  static SynthType gguf(GgmlType t, bool keep_blocks = false) { return {t, false, keep_blocks}; }
  static SynthType fp8() { return {GgmlType::F32, true, false}; }
  std::string name() const;  // "MXFP4", "Q8_0(blocks)", "FP8_B128", ...
};

// The pools of one device, made on first use per (type, cols). Owned by the caller (one per
// device); safe to share between threads. FP8_B128 pools use one scale per 128-column block for
// all pool rows (so that any choice of rows keeps the 128x128 scale blocks valid).
class SynthPool {
 public:
  // pool_rows is rounded up to a multiple of 128. threads (optional, host): quantises in parallel.
  explicit SynthPool(DeviceContext& ctx, int64_t pool_rows = 512, uint64_t seed = 0x5eedf1a5ULL,
                     ThreadPool* threads = nullptr);
  SynthPool(const SynthPool&) = delete;
  SynthPool& operator=(const SynthPool&) = delete;

  int device() const;
  int64_t pool_rows() const { return rows_; }

  // One pool: its host bytes (GGUF rows of ggml_row_bytes(type, cols), or e4m3 [pool_rows, cols]
  // plus fp8_scales: the e8m0 byte of each 128-column block) and its device copy.
  struct Entry {
    SynthType type;
    int64_t cols = 0;
    std::vector<uint8_t> bytes;
    std::vector<uint8_t> fp8_scales;
    DeviceWeight dev;
  };
  const Entry& get(SynthType type, int64_t cols);

  // The pool row that row `row` of a weight made with `seed` copies.
  int64_t source_row(uint64_t seed, int64_t row) const;

 private:
  DeviceContext* ctx_;
  int64_t rows_;
  uint64_t seed_;
  ThreadPool* threads_;
  std::mutex mu_;
  std::map<std::tuple<uint32_t, bool, bool, int64_t>, Entry> entries_;
};

// A seed for tensor `tensor_id` (e.g. a hash of its name) of a model made with `seed`.
uint64_t synth_tensor_seed(uint64_t seed, uint64_t tensor_id);

// The device layout of a [rows, cols] weight of `type` (data / scales null): data_bytes() and
// scale_bytes() say what fill_random_weight needs. Throws for a type without a quantiser or a
// CUDA decoder, and for a cols the type cannot hold.
WeightView synth_layout(SynthType type, int64_t rows, int64_t cols);

// Allocates a [rows, cols] weight on ctx's device and fills it (queued on ctx.stream()).
DeviceWeight make_random_weight(DeviceContext& ctx, SynthPool& pool, SynthType type, int64_t rows, int64_t cols,
                                uint64_t seed);
// Fills caller-owned planes: dst is synth_layout(type, rows, cols) with data (and scales, for
// Q8_0 / MXFP4 / FP8_B128) pointing at writable device memory of that many bytes (a bench
// arena). Queued on ctx.stream(), nothing waits (the pool is made and uploaded first if new).
void fill_random_weight(DeviceContext& ctx, SynthPool& pool, SynthType type, const WeightView& dst, uint64_t seed);

}  // namespace hs::cuda
