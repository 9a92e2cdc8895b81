#include "kernels/cuda/device_context.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstring>
#include <utility>

namespace hs::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(cat(file, ":", line, ": ", call, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw Error(cat(file, ":", line, ": ", call, " failed: cuBLAS status ", status, " (",
                  cublasGetStatusString(static_cast<cublasStatus_t>(status)), ")"));
}

int device_count() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return n;
}

DeviceGuard::DeviceGuard(int device) {
  HS_CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) {
    HS_CUDA_CHECK(cudaSetDevice(device));
    restore_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (restore_) (void)cudaSetDevice(prev_);  // a destructor must not throw
}

// ---- DeviceBuffer

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
  if (bytes == 0) return;
  DeviceGuard g(device);
  HS_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : device_(std::exchange(o.device_, -1)), ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, -1);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::reset() {
  if (ptr_) {
    int prev = -1;
    const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
    if (!have_prev || prev != device_) (void)cudaSetDevice(device_);
    (void)cudaFree(ptr_);  // freed on its own device; no throw from destructors
    if (have_prev && prev != device_) (void)cudaSetDevice(prev);
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

// ---- DeviceContext

DeviceContext::DeviceContext(int device) : device_(device) {
  const int n = device_count();
  HS_CHECK(device >= 0 && device < n, "cuda:", device, " does not exist (", n, " CUDA device(s) visible)");
  DeviceGuard g(device_);
  HS_CUDA_CHECK(cudaGetDeviceProperties(&props_, device_));
  HS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    HS_CUBLAS_CHECK(cublasCreate(&cublas_));
    HS_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Plain FP32 for Sgemm (no TF32 unless someone opts in); bf16 GEMMs name their compute type.
    HS_CUBLAS_CHECK(cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH));
    // A workspace of our own so cuBLAS never allocates behind the arena's back.
    cublas_workspace_ = DeviceBuffer(device_, size_t{32} << 20);
    HS_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_.data(), cublas_workspace_.bytes()));
    HS_CUBLAS_CHECK(cublasLtCreate(&cublas_lt_));
  } catch (...) {
    if (cublas_lt_) cublasLtDestroy(cublas_lt_);
    if (cublas_) cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

DeviceContext::~DeviceContext() {
  int prev = -1;
  const bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(stream_);
  if (cublas_lt_) cublasLtDestroy(cublas_lt_);
  if (cublas_) cublasDestroy(cublas_);
  scratch_.reset();
  cublas_workspace_.reset();
  if (upload_ring_) {
    for (auto& e : upload_events_) (void)cudaEventDestroy(e);
    (void)cudaFreeHost(upload_ring_);
  }

  (void)cudaStreamDestroy(stream_);
  if (have_prev) (void)cudaSetDevice(prev);
}

std::string DeviceContext::describe() const {
  return cat("cuda:", device_, " ", props_.name, " (sm_", props_.major, props_.minor, ", ", props_.multiProcessorCount,
             " SMs, ", static_cast<double>(props_.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0), " GiB)");
}

void DeviceContext::synchronize() const {
  DeviceGuard g(device_);
  HS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

DeviceBuffer DeviceContext::alloc(size_t bytes) const { return DeviceBuffer(device_, bytes); }

void DeviceContext::upload(void* dst, const void* src, size_t bytes) {
  DeviceGuard g(device_);
  if (bytes == 0) return;
  HS_CHECK(!capturing(), "cuda:", device_, ": internal: an upload inside a graph capture (it would replay stale bytes)");
  if (bytes > kUploadSegment) {
    HS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    HS_CUDA_CHECK(cudaStreamSynchronize(stream_));  // pageable source: the caller may free it on return
    return;
  }
  std::lock_guard<std::mutex> lk(upload_mu_);
  if (!upload_ring_) {
    HS_CUDA_CHECK(cudaHostAlloc(&upload_ring_, kUploadSegment * kUploadSegments, cudaHostAllocPortable));
    for (auto& e : upload_events_) HS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  if (upload_off_ + bytes > kUploadSegment) {  // does not fit: take the next segment
    HS_CUDA_CHECK(cudaEventRecord(upload_events_[upload_seg_], stream_));  // copies out of it end here
    upload_seg_ = (upload_seg_ + 1) % kUploadSegments;
    upload_off_ = 0;
    // Its last copies were queued one lap ago; normally long done.
    HS_CUDA_CHECK(cudaEventSynchronize(upload_events_[upload_seg_]));
  }
  char* slot = static_cast<char*>(upload_ring_) + upload_seg_ * kUploadSegment + upload_off_;
  std::memcpy(slot, src, bytes);
  HS_CUDA_CHECK(cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream_));
  upload_off_ += (bytes + 255) & ~size_t{255};  // at most kUploadSegment (a multiple of 256)
}

cudaEvent_t DeviceContext::send(DeviceContext& dst, void* dst_ptr, const void* src, size_t bytes) {
  DeviceGuard g(device_);
  // Queued after the work that produced `src`. With peer access on this is a direct NVLink/P2P
  // copy; without it the driver stages it through its own pinned host buffers.
  HS_CUDA_CHECK(cudaMemcpyPeerAsync(dst_ptr, dst.device_, src, device_, bytes, stream_));
  cudaEvent_t sent = nullptr;
  HS_CUDA_CHECK(cudaEventCreateWithFlags(&sent, cudaEventDisableTiming));
  const cudaError_t err = cudaEventRecord(sent, stream_);
  if (err != cudaSuccess) {
    (void)cudaEventDestroy(sent);
    HS_CUDA_CHECK(err);
  }
  return sent;
}

void DeviceContext::accept(cudaEvent_t sent) {
  DeviceGuard g(device_);
  const cudaError_t err = cudaStreamWaitEvent(stream_, sent, 0);
  (void)cudaEventDestroy(sent);  // released by the driver once the wait is satisfied
  HS_CUDA_CHECK(err);
}

bool can_access_peer(int from, int to) {
  if (from == to) return true;
  int ok = 0;
  HS_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, from, to));
  return ok != 0;
}

bool enable_peer_access(int from, int to) {
  if (from == to) return true;
  if (!can_access_peer(from, to)) return false;
  DeviceGuard g(from);
  const cudaError_t err = cudaDeviceEnablePeerAccess(to, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();  // not an error here: someone (another engine) did it already
    return true;
  }
  HS_CUDA_CHECK(err);
  return true;
}

void DeviceContext::download(void* dst, const void* src, size_t bytes) const {
  DeviceGuard g(device_);
  HS_CHECK(!capturing(), "cuda:", device_, ": internal: a download inside a graph capture");
  HS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  HS_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void DeviceContext::copy(void* dst, const void* src, size_t bytes) const {
  DeviceGuard g(device_);
  HS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void DeviceContext::fill_bytes(void* dst, int value, size_t bytes) const {
  DeviceGuard g(device_);
  HS_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
}

DeviceContext::ScratchLease DeviceContext::scratch(size_t bytes) {
  std::unique_lock<std::mutex> lk(scratch_mu_);
  HS_CHECK(!(scratch_busy_ && scratch_owner_ == std::this_thread::get_id()),
           "cuda:", device_, ": nested scratch lease from one thread (would deadlock)");
  scratch_cv_.wait(lk, [&] { return !scratch_busy_; });
  scratch_busy_ = true;
  scratch_owner_ = std::this_thread::get_id();
  try {
    if (bytes > scratch_.bytes()) {
      DeviceGuard g(device_);
      // Earlier leases may still have work queued that reads the old block.
      HS_CUDA_CHECK(cudaStreamSynchronize(stream_));
      scratch_.reset();
      const size_t grown = (bytes + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);  // whole MiB
      scratch_ = DeviceBuffer(device_, grown);
      ++scratch_generation_;
    }
  } catch (...) {
    scratch_busy_ = false;
    scratch_owner_ = {};
    scratch_cv_.notify_one();
    throw;
  }
  return ScratchLease(this, scratch_.data(), scratch_.bytes());
}

size_t DeviceContext::scratch_capacity() const {
  std::lock_guard<std::mutex> lk(scratch_mu_);
  return scratch_.bytes();
}

uint64_t DeviceContext::scratch_generation() const {
  std::lock_guard<std::mutex> lk(scratch_mu_);
  return scratch_generation_;
}

bool DeviceContext::capturing() const {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  HS_CUDA_CHECK(cudaStreamIsCapturing(stream_, &st));
  return st != cudaStreamCaptureStatusNone;
}

void DeviceContext::begin_capture() {
  DeviceGuard g(device_);
  // Relaxed: other threads driving other devices may allocate or synchronise meanwhile.
  HS_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
}

CapturedGraph DeviceContext::end_capture() {
  DeviceGuard g(device_);
  cudaGraph_t graph = nullptr;
  HS_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t st = cudaGraphGetNodes(graph, nullptr, &nodes);
  const cudaError_t inst = st == cudaSuccess ? cudaGraphInstantiate(&exec, graph, 0) : st;
  (void)cudaGraphDestroy(graph);  // the executable keeps what it needs
  HS_CUDA_CHECK(inst);
  return CapturedGraph(device_, exec, nodes);
}

void DeviceContext::abort_capture() {
  DeviceGuard g(device_);
  if (!capturing()) return;
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(stream_, &graph);  // invalidated captures end with an error: expected
  if (graph) (void)cudaGraphDestroy(graph);
  (void)cudaGetLastError();
}

void DeviceContext::launch(const CapturedGraph& graph) {
  DeviceGuard g(device_);
  HS_CUDA_CHECK(cudaGraphLaunch(graph.exec(), stream_));
}

CapturedGraph::~CapturedGraph() {
  if (exec_) {
    DeviceGuard g(device_);
    (void)cudaGraphExecDestroy(exec_);
  }
}

CapturedGraph::CapturedGraph(CapturedGraph&& o) noexcept
    : device_(o.device_), exec_(std::exchange(o.exec_, nullptr)), nodes_(o.nodes_) {}

CapturedGraph& CapturedGraph::operator=(CapturedGraph&& o) noexcept {
  if (this != &o) {
    this->~CapturedGraph();
    device_ = o.device_;
    exec_ = std::exchange(o.exec_, nullptr);
    nodes_ = o.nodes_;
  }
  return *this;
}

void DeviceContext::release_scratch() {
  {
    std::lock_guard<std::mutex> lk(scratch_mu_);
    scratch_busy_ = false;
    scratch_owner_ = {};
  }
  scratch_cv_.notify_one();
}

DeviceContext::ScratchLease::ScratchLease(ScratchLease&& o) noexcept
    : ctx_(std::exchange(o.ctx_, nullptr)), ptr_(o.ptr_), bytes_(o.bytes_) {}

DeviceContext::ScratchLease::~ScratchLease() {
  if (ctx_) ctx_->release_scratch();
}

void DeviceContext::ensure_dynamic_smem(const void* func, size_t bytes) {
  // The default 48 KB covers static + dynamic shared memory: up to 16 KB of dynamic no kernel
  // here needs the attribute (their static parts are smaller than 32 KB); above, the kernel's
  // static part decides (a request of exactly 48 KB next to a static reduction buffer failed
  // the launch without it).
  if (bytes <= 16 * 1024) return;
  std::lock_guard<std::mutex> lk(attr_mu_);
  auto it = smem_set_.find(func);
  if (it != smem_set_.end() && it->second >= bytes) return;
  DeviceGuard g(device_);
  cudaFuncAttributes fa{};
  HS_CUDA_CHECK(cudaFuncGetAttributes(&fa, func));
  HS_CHECK(bytes + fa.sharedSizeBytes <= props_.sharedMemPerBlockOptin, "cuda:", device_, ": a kernel needs ", bytes,
           " bytes of dynamic and ", fa.sharedSizeBytes, " of static shared memory, the device allows ",
           props_.sharedMemPerBlockOptin);
  if (bytes + fa.sharedSizeBytes > 48 * 1024)
    HS_CUDA_CHECK(cudaFuncSetAttribute(func, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  smem_set_[func] = bytes;
}

int DeviceContext::blocks_per_sm(const void* func, int threads, size_t dynamic_smem) {
  std::lock_guard<std::mutex> lk(attr_mu_);
  const auto key = std::make_pair(func, std::make_pair(threads, dynamic_smem));
  auto it = occupancy_.find(key);
  if (it != occupancy_.end()) return it->second;
  DeviceGuard g(device_);
  int n = 0;
  HS_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, func, threads, dynamic_smem));
  n = n < 1 ? 1 : n;
  occupancy_[key] = n;
  return n;
}

int DeviceContext::active_clusters(const void* func, int cluster, int threads, bool non_portable) {
  std::lock_guard<std::mutex> lk(attr_mu_);
  const auto key = std::make_pair(func, std::make_pair(cluster, threads));
  auto it = active_clusters_.find(key);
  if (it != active_clusters_.end()) return it->second;
  DeviceGuard g(device_);
  int n = 0;
  if (!non_portable || cudaFuncSetAttribute(func, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(cluster));
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = static_cast<unsigned>(cluster);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    if (cudaOccupancyMaxActiveClusters(&n, func, &cfg) != cudaSuccess) n = 0;
  }
  (void)cudaGetLastError();  // a refused size is an answer, not an error
  active_clusters_[key] = n;
  return n;
}

bool DeviceContext::cluster_fits(const void* func, int cluster, int threads, bool non_portable) {
  return active_clusters(func, cluster, threads, non_portable) > 0;
}

}  // namespace hs::cuda
