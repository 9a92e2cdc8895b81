#include "util/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace hs {

bool log_enabled(LogLevel level) {
  const char* env = std::getenv("HS_LOG");
  LogLevel max = LogLevel::Warn;
  if (env) {
    if (!std::strcmp(env, "error")) max = LogLevel::Error;
    else if (!std::strcmp(env, "info")) max = LogLevel::Info;
    else if (!std::strcmp(env, "debug")) max = LogLevel::Debug;
  }
  return static_cast<int>(level) <= static_cast<int>(max);
}

void log_write(LogLevel level, std::string_view msg) {
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug"};
  std::fprintf(stderr, "hyperstream: %s: %.*s\n", kNames[static_cast<int>(level)],
               static_cast<int>(msg.size()), msg.data());
}

}  // namespace hs
