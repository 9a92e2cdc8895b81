#include "util/thread_pool.h"

#include <algorithm>

namespace hs {

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_ranges(int slot) {
  // Slot s handles [s*chunk, (s+1)*chunk): a static split, so the same index always lands
  // in a range computed the same way.
  int64_t b = static_cast<int64_t>(slot) * job_chunk_;
  int64_t e = std::min(job_n_, b + job_chunk_);
  if (b < e) (*job_)(b, e);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    if (index < job_slots_) run_ranges(index);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t max_slots = (n + grain - 1) / grain;
  int slots = static_cast<int>(std::min<int64_t>(max_slots, size()));
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (slots <= 1 || busy_) {
      lk.unlock();
      fn(0, n);
      return;
    }
    busy_ = true;
    job_ = &fn;
    job_n_ = n;
    job_slots_ = slots;
    job_chunk_ = (n + slots - 1) / slots;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  run_ranges(0);
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
  job_ = nullptr;
  busy_ = false;
}

}  // namespace hs
