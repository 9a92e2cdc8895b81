// SIGTERM / SIGINT for graceful shutdown, read from a signalfd: no signal handler and no
// global state. The constructor blocks the two signals in the calling thread; threads
// created afterwards inherit the mask, so construct it before any thread exists (first thing
// in `hyperstream serve`). It also ignores SIGPIPE (a client closing its socket must surface
// as a failed write, not kill the process).
#pragma once
#include <csignal>

namespace hs::server {

class SignalWatcher {
 public:
  SignalWatcher();
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  // Waits up to timeout_ms (-1: forever) for SIGTERM or SIGINT; returns it, or 0 on timeout.
  int wait(int timeout_ms);

 private:
  int fd_ = -1;
  sigset_t old_mask_;
};

const char* signal_name(int sig);

}  // namespace hs::server
