// Kernel launches of this folder, with programmatic dependent launch (PDL) where the device
// context turns it on (DeviceContext::set_pdl; `--pdl` on the command line).
//
// Why: a decode step is ~40 small dependent kernels per layer, each a few microseconds, and
// between two of them the GPU drains the first grid, then launches and ramps up the next. With
// PDL the next grid is launched while the current one runs (once every block of it has passed
// pdl_enter) and its blocks wait on the device, in griddepcontrol.wait, for the current grid to
// finish and its writes to be visible; the launch latency and the ramp hide behind the work.
//
// The rule that keeps it correct: a kernel launched here calls pdl_enter() (or pdl_wait())
// before it touches global memory that another kernel writes or reads; `pdl_prefetch_l2` of
// weights (never written during a step) may come before it. The wait is transitive (the grid
// waited for itself waited for its predecessor), and a no-op in a grid launched without PDL.
// Copies, memsets, event waits and library kernels between two launches keep their full
// stream order: PDL only relaxes kernel after kernel. A source check tests that every
// kernel in this folder enters this way (tests/python/test_pdl_rule.py).
#pragma once
#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/device_context.h"

namespace hs::cuda::detail {

// Waits until every grid this one depends on has finished and its memory is visible.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Lets the next grid in the stream launch now (it still waits for this one in pdl_wait).
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A kernel's first statement: wait for the previous grid, then let the next one launch (after
// the wait, so at most one grid waits ahead of the running one).
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_trigger();
}
// Before pdl_wait, a weight-streaming kernel may pull the first bytes of its block's weights
// into L2 while the previous grid finishes: at most kPdlPrefetch bytes per block (enough to
// cover the launch gap; more would only evict what the previous grid is using), 128-byte lines
// spread over the block's threads. A hint: it changes no result.
constexpr size_t kPdlPrefetch = size_t{32} << 10;
__device__ __forceinline__ void pdl_prefetch_l2(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  const size_t n = bytes < kPdlPrefetch ? bytes : kPdlPrefetch;
  for (size_t o = static_cast<size_t>(threadIdx.x) * 128; o < n; o += static_cast<size_t>(blockDim.x) * 128)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(c + o));
}

inline cudaLaunchConfig_t launch_config(DeviceContext& ctx, dim3 grid, dim3 block, size_t smem,
                                        cudaLaunchAttribute (&attrs)[2], unsigned nattrs = 0) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = ctx.stream();
  if (ctx.pdl()) {
    attrs[nattrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[nattrs].val.programmaticStreamSerializationAllowed = 1;
    ++nattrs;
  }
  cfg.attrs = attrs;
  cfg.numAttrs = nattrs;
  return cfg;
}

// kernel<<<grid, block, smem, ctx.stream()>>>(args...), checked, with PDL where ctx has it on.
template <class... P, class... A>
void launch(DeviceContext& ctx, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A&&... args) {
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t cfg = launch_config(ctx, grid, block, smem, attrs);
  HS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}
// The same for a kernel chosen at run time as a pointer and its packed arguments.
inline void launch(DeviceContext& ctx, const void* kernel, dim3 grid, dim3 block, size_t smem, void** args) {
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t cfg = launch_config(ctx, grid, block, smem, attrs);
  HS_CUDA_CHECK(cudaLaunchKernelExC(&cfg, kernel, args));
}
// A launch in clusters of `cluster` blocks along x.
template <class... P, class... A>
void launch_cluster(DeviceContext& ctx, void (*kernel)(P...), dim3 grid, dim3 block, unsigned cluster, A&&... args) {
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = cluster;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg = launch_config(ctx, grid, block, 0, attrs, 1);
  HS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...));
}

}  // namespace hs::cuda::detail
