#include "server/signals.h"

#include <poll.h>
#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

namespace hs::server {

SignalWatcher::SignalWatcher() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  HS_CHECK(pthread_sigmask(SIG_BLOCK, &set, &old_mask_) == 0, "cannot block SIGTERM/SIGINT");
  fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  HS_CHECK(fd_ >= 0, "signalfd failed: ", std::strerror(errno));
  std::signal(SIGPIPE, SIG_IGN);
}

SignalWatcher::~SignalWatcher() {
  if (fd_ >= 0) close(fd_);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

int SignalWatcher::wait(int timeout_ms) {
  pollfd p{fd_, POLLIN, 0};
  for (;;) {
    const int r = poll(&p, 1, timeout_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return 0;
    signalfd_siginfo info{};
    const ssize_t n = read(fd_, &info, sizeof(info));
    if (n == static_cast<ssize_t>(sizeof(info))) return static_cast<int>(info.ssi_signo);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    return 0;
  }
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "signal";
  }
}

}  // namespace hs::server
