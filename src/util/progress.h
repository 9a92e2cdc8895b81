// A progress bar on stderr for long work (loading, converting). Draws only on a terminal;
// elsewhere prints nothing until done(), so logs stay clean.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace hs {

class Progress {
 public:
  Progress(std::string label, uint64_t total);
  void update(uint64_t done);
  void done();

 private:
  std::string label_;
  uint64_t total_;
  bool tty_;
  int last_pct_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hs
