// Minimal logging to stderr. The verbosity comes from the HS_LOG environment variable
// (error|warn|info|debug; default warn) and is read at each call: no process-wide state.
#pragma once
#include <string_view>

#include "util/error.h"

namespace hs {

enum class LogLevel { Error = 0, Warn = 1, Info = 2, Debug = 3 };

bool log_enabled(LogLevel level);
void log_write(LogLevel level, std::string_view msg);

template <typename... Args>
void log_warn(Args&&... args) {
  if (log_enabled(LogLevel::Warn)) log_write(LogLevel::Warn, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_info(Args&&... args) {
  if (log_enabled(LogLevel::Info)) log_write(LogLevel::Info, cat(std::forward<Args>(args)...));
}
template <typename... Args>
void log_debug(Args&&... args) {
  if (log_enabled(LogLevel::Debug)) log_write(LogLevel::Debug, cat(std::forward<Args>(args)...));
}

}  // namespace hs
