#ifdef HS_HAVE_CUDA
#include "engine/cuda_profile.h"

#include <algorithm>
#include <cstdio>

#include "kernels/cuda/device_context.h"

namespace hs {

CudaOpProfile::Scope::Scope(CudaOpProfile* p, std::string name) : p_(p), name_(std::move(name)) {
  if (!p_) return;
  ++p_->depth_;
  start_ = p_->event();
  HS_CUDA_CHECK(cudaEventRecord(start_, p_->stream_));
}

CudaOpProfile::Scope::~Scope() {
  if (!p_) return;
  --p_->depth_;
  cudaEvent_t end = p_->event();
  if (cudaEventRecord(end, p_->stream_) == cudaSuccess) p_->pending_.push_back({std::move(name_), {start_, end}});
}

CudaOpProfile::~CudaOpProfile() {
  for (auto& [n, ev] : pending_) {
    cudaEventDestroy(ev.first);
    cudaEventDestroy(ev.second);
  }
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

void CudaOpProfile::enable(bool on) {
  collect();
  totals_.clear();
  on_ = on;
}

cudaEvent_t CudaOpProfile::event() {
  if (free_.empty()) {
    cuda::DeviceGuard g(device_);
    cudaEvent_t e = nullptr;
    HS_CUDA_CHECK(cudaEventCreate(&e));
    return e;
  }
  cudaEvent_t e = free_.back();
  free_.pop_back();
  return e;
}

void CudaOpProfile::collect() {
  for (auto& [name, ev] : pending_) {
    HS_CUDA_CHECK(cudaEventSynchronize(ev.second));
    float ms = 0;
    HS_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.first, ev.second));
    auto& t = totals_[name];
    t.first += 1;
    t.second += ms;
    free_.push_back(ev.first);
    free_.push_back(ev.second);
  }
  pending_.clear();
}

std::string CudaOpProfile::report() {
  collect();
  std::vector<std::pair<std::string, std::pair<int64_t, double>>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  double total = 0;
  for (const auto& r : rows) total += r.second.second;
  std::string out = "| op | calls | GPU ms | % | us/call |\n|---|---:|---:|---:|---:|\n";
  char line[512];
  for (const auto& [name, t] : rows) {
    std::snprintf(line, sizeof line, "| %s | %lld | %.3f | %.1f | %.1f |\n", name.c_str(),
                  static_cast<long long>(t.first), t.second, total > 0 ? 100.0 * t.second / total : 0.0,
                  1e3 * t.second / static_cast<double>(t.first));
    out += line;
  }
  std::snprintf(line, sizeof line, "| total | | %.3f | 100 | |\n", total);
  out += line;
  totals_.clear();
  return out;
}

}  // namespace hs
#endif  // HS_HAVE_CUDA
