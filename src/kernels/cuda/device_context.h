// One GPU as the CUDA backend sees it: its id, its own stream, cuBLAS/cuBLASLt handles and a
// scratch arena, all owned by one DeviceContext (design.md §3: scratch belongs to the device,
// with its own lock; no process-wide or thread_local state). Every public method pins the
// device first (cudaSetDevice through a DeviceGuard that restores the caller's device), so a
// context may be used from any thread, and several contexts may live in one process.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "util/error.h"

struct cublasContext;
typedef struct cublasContext* cublasHandle_t;
struct cublasLtContext;
typedef struct cublasLtContext* cublasLtHandle_t;

namespace hs::cuda {

// Throws hs::Error "file:line: call failed: <cuda error name>: <string>".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace hs::cuda

#define HS_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    const cudaError_t hs_cuda_err_ = (call);                                         \
    if (hs_cuda_err_ != cudaSuccess)                                                 \
      ::hs::cuda::throw_cuda_error(hs_cuda_err_, #call, __FILE__, __LINE__);         \
  } while (0)
// After a kernel launch: the launch's own error (bad configuration, missing image).
#define HS_CUDA_CHECK_LAUNCH() HS_CUDA_CHECK(cudaGetLastError())
#define HS_CUBLAS_CHECK(call)                                                        \
  do {                                                                               \
    const int hs_cublas_st_ = static_cast<int>(call);                                \
    if (hs_cublas_st_ != 0) ::hs::cuda::throw_cublas_error(hs_cublas_st_, #call, __FILE__, __LINE__); \
  } while (0)

namespace hs::cuda {

// Number of usable CUDA devices; 0 (never an exception) when there is no driver or no GPU.
int device_count();

// Pins `device` for the guard's lifetime and restores the previous current device after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
  bool restore_ = false;
};

class DeviceContext;

// Owning device allocation, freed on the device it was allocated on. Movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(int device, size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }
  void reset();

 private:
  int device_ = -1;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// An instantiated CUDA graph, destroyed on its device. Movable, not copyable.
class CapturedGraph {
 public:
  CapturedGraph() = default;
  CapturedGraph(int device, cudaGraphExec_t exec, size_t nodes) : device_(device), exec_(exec), nodes_(nodes) {}
  ~CapturedGraph();
  CapturedGraph(CapturedGraph&& o) noexcept;
  CapturedGraph& operator=(CapturedGraph&& o) noexcept;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  cudaGraphExec_t exec() const { return exec_; }
  size_t nodes() const { return nodes_; }

 private:
  int device_ = -1;
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
};

class DeviceContext {
 public:
  explicit DeviceContext(int device);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublas_lt() const { return cublas_lt_; }
  const cudaDeviceProp& props() const { return props_; }
  int sm_count() const { return props_.multiProcessorCount; }
  std::string describe() const;  // "cuda:0 NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB)"

  void synchronize() const;

  // Allocation and copies on this device and stream (copies are stream-ordered; the
  // *_sync variants wait for the stream).
  DeviceBuffer alloc(size_t bytes) const;
  // Host to device. Copies of up to kUploadSegment bytes go through a pinned ring this context
  // owns and do not wait (the caller may reuse `src` at once: per-step token ids and positions
  // no longer stall the host); larger ones wait for the stream.
  void upload(void* dst, const void* src, size_t bytes);
  static constexpr size_t kUploadSegment = size_t{512} << 10;
  void download(void* dst, const void* src, size_t bytes) const;
  // Hands `bytes` of this device's memory to dst_ptr on another device (the HC state between
  // shards) in two halves, so that each stream is only fed by the thread that drives it:
  // send() queues the copy on this stream after the work that made `src` and returns the event
  // that marks its end; dst.accept(event) makes dst's later work wait for it (and releases it).
  // The host waits for neither. The copy is direct where peer access is on (enable_peer_access),
  // else the driver stages it through pinned host memory.
  cudaEvent_t send(DeviceContext& dst, void* dst_ptr, const void* src, size_t bytes);
  void accept(cudaEvent_t sent);
  void copy(void* dst, const void* src, size_t bytes) const;  // device to device, same device
  void fill_bytes(void* dst, int value, size_t bytes) const;

  // Scratch arena. A lease gives exclusive use of at least `bytes` until it is destroyed;
  // the arena grows to the largest request (waiting for the stream before it frees the old
  // block). Work queued on stream() with the lease's memory stays valid after the lease
  // ends, because the next user queues behind it on the same stream. Leases do not nest:
  // asking again from the thread that holds one throws instead of deadlocking.
  class ScratchLease {
   public:
    ScratchLease(ScratchLease&& o) noexcept;
    ScratchLease& operator=(ScratchLease&&) = delete;
    ScratchLease(const ScratchLease&) = delete;
    ~ScratchLease();
    void* data() const { return ptr_; }
    template <typename T>
    T* as(size_t byte_offset = 0) const {
      return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
    }
    size_t bytes() const { return bytes_; }

   private:
    friend class DeviceContext;
    ScratchLease(DeviceContext* ctx, void* ptr, size_t bytes) : ctx_(ctx), ptr_(ptr), bytes_(bytes) {}
    DeviceContext* ctx_;
    void* ptr_;
    size_t bytes_;
  };
  ScratchLease scratch(size_t bytes);
  size_t scratch_capacity() const;
  // Counts the arena's reallocations: work captured into a graph holds the arena's address,
  // so a graph is only valid while this is unchanged (engine/step_graphs.h keys on it).
  uint64_t scratch_generation() const;

  // CUDA graphs of this context's stream. Between begin_capture() and end_capture() the work
  // queued on stream() is recorded, not run; upload() and download() refuse to run then
  // (a recorded copy would read the host bytes of the capture, not of the replay).
  void begin_capture();
  CapturedGraph end_capture();  // instantiated, ready to launch
  void abort_capture();         // ends a capture that failed part way, dropping what it recorded
  bool capturing() const;
  void launch(const CapturedGraph& g);

  // Per-device kernel bookkeeping (the attributes are per device and function): raises a
  // kernel's dynamic shared-memory limit once, and caches its occupancy for a block shape.
  void ensure_dynamic_smem(const void* func, size_t bytes);
  int blocks_per_sm(const void* func, int threads, size_t dynamic_smem);
  // How many clusters of `cluster` blocks of `threads` can run at once on this device (0: none;
  // asked once per kernel and shape); non_portable first allows sizes above 8 for the kernel.
  int active_clusters(const void* func, int cluster, int threads, bool non_portable);
  bool cluster_fits(const void* func, int cluster, int threads, bool non_portable);
  // Programmatic dependent launch for this context's kernels (kernels/cuda/launch.cuh): off
  // unless the engine turns it on (EngineOptions::pdl). Set it between steps, not during a
  // capture: a captured graph keeps the launches it recorded.
  void set_pdl(bool on) { pdl_ = on; }
  bool pdl() const { return pdl_; }

 private:
  friend class ScratchLease;
  void release_scratch();

  int device_;
  cudaDeviceProp props_{};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  DeviceBuffer cublas_workspace_;

  // The arena is a one-holder resource: busy_/owner_ under scratch_mu_, waiters on scratch_cv_
  // (a lease may end on another thread than the one that took it, which a plain mutex forbids).
  mutable std::mutex scratch_mu_;
  std::condition_variable scratch_cv_;
  bool scratch_busy_ = false;
  std::thread::id scratch_owner_{};
  DeviceBuffer scratch_;
  uint64_t scratch_generation_ = 0;

  // The pinned upload ring (allocated on the first small upload): kUploadSegments segments,
  // each with the event recorded when the ring last moved past it (reuse waits for it).
  static constexpr size_t kUploadSegments = 8;
  std::mutex upload_mu_;
  void* upload_ring_ = nullptr;
  cudaEvent_t upload_events_[kUploadSegments] = {};
  size_t upload_seg_ = 0, upload_off_ = 0;  // the segment in use, the next free byte in it
  std::mutex attr_mu_;
  std::map<const void*, size_t> smem_set_;
  std::map<std::pair<const void*, std::pair<int, size_t>>, int> occupancy_;
  std::map<std::pair<const void*, std::pair<int, int>>, int> active_clusters_;
  bool pdl_ = false;
};

// Whether kernels and copies on `from` can reach `to`'s memory directly (NVLink / PCIe P2P).
bool can_access_peer(int from, int to);
// Turns peer access from `from` to `to` on (a no-op when it already is); false where the
// hardware cannot. The driver keeps this per process, for the devices' lifetime.
bool enable_peer_access(int from, int to);

}  // namespace hs::cuda
