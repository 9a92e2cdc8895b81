// A fixed pool of worker threads with a blocking parallel_for. Work is split into
// contiguous index ranges; callers compute each output element in one place with a fixed
// reduction order, so results are bit-identical whatever the thread count.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hs {

class ThreadPool {
 public:
  // n_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over [0, n) split into ranges of at least `grain` items.
  // Runs on the calling thread too; returns when every range is done. Not reentrant:
  // a nested call from inside fn runs serially on the calling worker.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_ranges(int slot);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_chunk_ = 0;
  int job_slots_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
  bool busy_ = false;
};

}  // namespace hs
