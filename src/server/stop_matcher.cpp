#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace hs::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

std::string StopMatcher::push(std::string_view text) {
  if (matched_) return {};
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, {});
  // The earliest match wins; at one position, the shortest (it completes first when streaming).
  size_t best = std::string::npos;
  for (const auto& s : stops_) {
    const size_t p = held_.find(s);
    if (p == std::string::npos) continue;
    if (p < best || (p == best && s.size() < which_.size())) {
      best = p;
      which_ = s;
    }
  }
  if (best != std::string::npos) {
    matched_ = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Hold the longest tail that is a proper prefix of some stop sequence.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > hold; --len)
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopMatcher::flush() { return matched_ ? std::string() : std::exchange(held_, {}); }

}  // namespace hs::server
