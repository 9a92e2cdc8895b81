// Pipeline parallelism over the shards of one process (Engine::step_batch): one worker thread
// per stage (shard), made once and kept. Stage s works on micro-batch m after stage s-1 is
// done with m and after its own m-1, so while stage s runs m, stage s+1 runs m-1 and two
// devices are busy at once.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hs {

class PipelineRunner {
 public:
  // init(s) runs on worker s before its first piece of work (pinning the stage's device);
  // if it throws, the run fails and the next run tries it again.
  PipelineRunner(int stages, std::function<void(int stage)> init);
  ~PipelineRunner();
  PipelineRunner(const PipelineRunner&) = delete;
  PipelineRunner& operator=(const PipelineRunner&) = delete;

  int stages() const { return static_cast<int>(threads_.size()); }
  // Calls work(s, m) for every stage s and micro-batch m < micro_batches in pipeline order and
  // returns when all are done. After the first exception the work not yet started is skipped,
  // and that exception is rethrown here once every worker has stopped. Not reentrant.
  void run(int micro_batches, const std::function<void(int stage, int micro)>& work);

 private:
  void worker(int s);

  std::function<void(int)> init_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int, int)>* work_ = nullptr;
  int micro_ = 0;
  uint64_t generation_ = 0;
  std::vector<int> done_;  // micro-batches each stage finished in this run
  int finished_ = 0;       // workers finished with this run
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;  // last: started after everything they use exists
};

}  // namespace hs
