#include "engine/pipeline_runner.h"

namespace hs {

PipelineRunner::PipelineRunner(int stages, std::function<void(int)> init) : init_(std::move(init)) {
  done_.assign(static_cast<size_t>(stages), 0);
  for (int s = 0; s < stages; ++s) threads_.emplace_back([this, s] { worker(s); });
}

PipelineRunner::~PipelineRunner() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void PipelineRunner::run(int micro_batches, const std::function<void(int, int)>& work) {
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lk(mu_);
    work_ = &work;
    micro_ = micro_batches;
    done_.assign(done_.size(), 0);
    finished_ = 0;
    error_ = nullptr;
    ++generation_;
    cv_.notify_all();
    cv_.wait(lk, [&] { return finished_ == stages(); });
    work_ = nullptr;
    err = error_;
  }
  if (err) std::rethrow_exception(err);
}

void PipelineRunner::worker(int s) {
  uint64_t seen = 0;
  bool ready = false;  // init_ succeeded
  const auto su = static_cast<size_t>(s);
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    for (int m = 0; m < micro_; ++m) {
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return error_ || s == 0 || done_[su - 1] > m; });
        if (error_) break;
      }
      try {
        if (!ready) {
          init_(s);
          ready = true;
        }
        (*work_)(s, m);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!error_) error_ = std::current_exception();
        cv_.notify_all();
        break;
      }
      std::lock_guard<std::mutex> lk(mu_);
      ++done_[su];
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lk(mu_);
    ++finished_;
    cv_.notify_all();
  }
}

}  // namespace hs
