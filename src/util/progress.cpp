#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace hs {

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), tty_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()) {}

void Progress::update(uint64_t done) {
  if (!tty_ || total_ == 0) return;
  const int pct = static_cast<int>(100 * done / total_);
  if (pct == last_pct_) return;
  last_pct_ = pct;
  const int width = 40, fill = pct * width / 100;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3d%% (%llu/%llu)", label_.c_str(), fill,
               "########################################", width - fill, "", pct,
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_));
  std::fflush(stderr);
}

void Progress::done() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (tty_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s: done in %.1f s\n", label_.c_str(), s);
}

}  // namespace hs
