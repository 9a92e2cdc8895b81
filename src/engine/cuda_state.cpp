#ifdef HS_HAVE_CUDA
#include "engine/cuda_state.h"

#include <algorithm>

#include "util/error.h"

namespace hs {

namespace {

// The mirror of type T in `slot`, made on first use; a mirror from another backend or another
// device is refused (a sequence's state belongs to the shard that made it).
template <typename T, typename Make>
T& mirror(std::shared_ptr<BackendState>& slot, cuda::DeviceContext& ctx, const char* what, Make make) {
  if (!slot) slot.reset(make());
  T* t = dynamic_cast<T*>(slot.get());
  HS_CHECK(t, "sequence state: the ", what, " was made by another backend, not by cuda:", ctx.device());
  HS_CHECK(t->device() == ctx.device(), "sequence state: the ", what, " lives on cuda:", t->device(),
           ", not on this shard's cuda:", ctx.device());
  return *t;
}

}  // namespace

CudaRing::CudaRing(cuda::DeviceContext& ctx, size_t bytes) : ctx_(&ctx), buf_(ctx.alloc(bytes)) { reset(); }

CudaRing& CudaRing::of(const LayerState& st, cuda::DeviceContext& ctx, int window, int64_t head_dim) {
  const size_t bytes = static_cast<size_t>(window) * static_cast<size_t>(head_dim) * 4;
  CudaRing& r = mirror<CudaRing>(st.device, ctx, "SWA ring", [&] { return new CudaRing(ctx, bytes); });
  HS_CHECK(r.buf_.bytes() == bytes, "internal: SWA ring of ", r.buf_.bytes(), " bytes, expected ", bytes);
  return r;
}

void CudaRing::reset() { ctx_->fill_bytes(buf_.data(), 0, buf_.bytes()); }

CudaCompressorState::CudaCompressorState(cuda::DeviceContext& ctx, int ratio, int coff, int64_t d)
    : ctx_(&ctx), ratio_(ratio), coff_(coff), d_(d) {
  window_ = ctx.alloc(static_cast<size_t>(2 * ratio * coff * d + 2 * ratio * d) * 4);
  reset();
}

CudaCompressorState& CudaCompressorState::of(const CompressorState& st, cuda::DeviceContext& ctx) {
  HS_CHECK(st.ratio > 0 && st.d > 0, "internal: compressor state was never initialised");
  return mirror<CudaCompressorState>(st.device, ctx, "compressor state",
                                     [&] { return new CudaCompressorState(ctx, st.ratio, st.coff, st.d); });
}

cuda::CompressorBuffers CudaCompressorState::buffers() const {
  return {buf_kv(), buf_gate(), prev(), prev() + ratio_ * d_, ratio_, coff_, d_};
}

void CudaCompressorState::reserve_entries(int64_t need, int64_t keep) {
  if (need <= capacity_) return;
  const int64_t cap = std::max<int64_t>({need, 2 * capacity_, 64});
  cuda::DeviceBuffer grown = ctx_->alloc(static_cast<size_t>(cap * d_) * 4);
  if (keep > 0) ctx_->copy(grown.data(), entries_.data(), static_cast<size_t>(keep * d_) * 4);
  // The old block may still be read by queued kernels: wait before it is freed.
  ctx_->synchronize();
  entries_ = std::move(grown);
  capacity_ = cap;
}

void CudaCompressorState::reset() {
  ctx_->fill_bytes(window_.data(), 0, window_.bytes());
  if (entries_.bytes()) ctx_->fill_bytes(entries_.data(), 0, entries_.bytes());
}

}  // namespace hs
#endif  // HS_HAVE_CUDA
