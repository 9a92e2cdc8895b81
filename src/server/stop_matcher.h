// Text-level stop sequences (OpenAI `stop`, Anthropic `stop_sequences`): the generated text
// arrives in pieces of any size; a stop sequence may span pieces. Text that might still be
// the start of a stop sequence is held back, so a match is never emitted, not even in part.
// As in other servers, the first stop sequence to complete wins (so "bc" beats "abcd" in
// "abcd": it is complete one character earlier).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace hs::server {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops = {});

  // Appends `text`; returns what can be emitted now. After a match, returns the text before
  // it, sets matched(), and drops everything after.
  std::string push(std::string_view text);
  // End of the stream: the held-back tail (empty after a match).
  std::string flush();
  bool matched() const { return matched_; }
  const std::string& which() const { return which_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool matched_ = false;
  std::string which_;
};

}  // namespace hs::server
