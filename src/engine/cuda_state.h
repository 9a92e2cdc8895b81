// The device half of a sequence's state on the CUDA backend (design.md §3: per sequence, per
// shard, zeroed on reset). The host LayerState/CompressorState keep the counters; these keep
// the data, in GPU memory of the device that first used them.
#pragma once
#ifdef HS_HAVE_CUDA
#include "engine/sequence_state.h"
#include "kernels/cuda/device_context.h"
#include "kernels/cuda/state_cuda.h"

namespace hs {

// A layer's SWA ring [window, head_dim] (position p at slot p % window).
class CudaRing : public BackendState {
 public:
  // The ring of `st` on ctx's device, made (zeroed) on first use.
  static CudaRing& of(const LayerState& st, cuda::DeviceContext& ctx, int window, int64_t head_dim);
  float* data() const { return buf_.as<float>(); }
  int device() const { return ctx_->device(); }
  void reset() override;
  size_t bytes() const override { return buf_.bytes(); }

 private:
  CudaRing(cuda::DeviceContext& ctx, size_t bytes);
  cuda::DeviceContext* ctx_;
  cuda::DeviceBuffer buf_;
};

// One compressor: the open window's rows, the CSA overlap and the compressed entries.
class CudaCompressorState : public BackendState {
 public:
  static CudaCompressorState& of(const CompressorState& st, cuda::DeviceContext& ctx);
  float* buf_kv() const { return window_.as<float>(); }                   // [ratio, coff*d]
  float* buf_gate() const { return buf_kv() + ratio_ * coff_ * d_; }      // [ratio, coff*d]
  float* prev() const { return buf_gate() + ratio_ * coff_ * d_; }        // [2, ratio, d]: kv, gate
  float* entries() const { return entries_.as<float>(); }                // [capacity, d]
  cuda::CompressorBuffers buffers() const;
  int device() const { return ctx_->device(); }
  // Room for `need` entries, keeping the first `keep` (the capacity doubles: amortised copies).
  void reserve_entries(int64_t need, int64_t keep);
  int64_t capacity() const { return capacity_; }
  void reset() override;
  size_t bytes() const override { return window_.bytes() + entries_.bytes(); }

 private:
  CudaCompressorState(cuda::DeviceContext& ctx, int ratio, int coff, int64_t d);
  cuda::DeviceContext* ctx_;
  int ratio_, coff_;
  int64_t d_;
  cuda::DeviceBuffer window_, entries_;
  int64_t capacity_ = 0;
};

}  // namespace hs
#endif  // HS_HAVE_CUDA
