// Per-op GPU time of the CUDA backend (`hyperstream bench --profile`): each top-level op the
// forward calls records a pair of events on the backend's stream; report() waits, sums the
// elapsed times by op (and weight shape/type for matmuls) and prints a table. Off by default:
// then a scope costs one branch. Nested ops (MoE's round trips) are charged to the outer op.
#pragma once
#ifdef HS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hs {

class CudaOpProfile {
 public:
  class Scope {
   public:
    Scope(CudaOpProfile* p, std::string name);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CudaOpProfile* p_;
    std::string name_;
    cudaEvent_t start_ = nullptr;
  };

  // The events are made on `device`, the stream's (the calling thread may have another current).
  CudaOpProfile(cudaStream_t stream, int device) : stream_(stream), device_(device) {}
  ~CudaOpProfile();
  bool on() const { return on_; }
  void enable(bool on);
  // Opens a scope; `detail` is only called (to build the row's name) when profiling is on.
  template <typename F>
  Scope scope(const char* op, F&& detail) {
    return Scope(on_ && depth_ == 0 ? this : nullptr, on_ && depth_ == 0 ? std::string(op) + detail() : std::string());
  }
  Scope scope(const char* op) {
    return scope(op, [] { return std::string(); });
  }
  // Markdown table of the time recorded since enable(true), largest first; then resets.
  std::string report();

 private:
  cudaEvent_t event();
  void collect();

  cudaStream_t stream_;
  int device_ = 0;
  bool on_ = false;
  int depth_ = 0;
  std::vector<cudaEvent_t> free_;
  std::vector<std::pair<std::string, std::pair<cudaEvent_t, cudaEvent_t>>> pending_;
  std::map<std::string, std::pair<int64_t, double>> totals_;  // name -> (calls, ms)
};

}  // namespace hs
#endif  // HS_HAVE_CUDA
