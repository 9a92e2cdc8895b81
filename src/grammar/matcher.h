// Running a Grammar over bytes: a pushdown automaton whose state is a set of stacks (an
// ambiguous grammar, e.g. anyOf branches that begin alike, keeps several parses alive). A stack
// is a chain of frames in an arena: its top node reads the next byte; each frame under it holds
// the node of the calling rule to go on at when the rule above ends. Stacks share frames.
#pragma once
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"

namespace hs::grammar {

inline constexpr int32_t kRootFrame = -1;     // below the root rule: ending it completes the value
inline constexpr int32_t kUnknownFrame = -2;  // below a node taken out of context (mask cache)

struct Frame {
  int32_t node;
  int32_t parent;
};
struct Top {
  int32_t node;    // reads the next byte
  int32_t parent;  // frame index, kRootFrame or kUnknownFrame
};

enum : uint8_t { kAccepted = 1, kEscaped = 2 };

// The byte-reading stacks reached by standing at `node` over `parent` (calls entered, ended
// rules returned from), appended to `out`; flags get kAccepted when the root ends, kEscaped
// when a rule ends into kUnknownFrame. New frames are appended to `arena`.
void close_at(const Grammar& g, std::vector<Frame>& arena, int32_t node, int32_t parent, std::vector<Top>& out,
              uint8_t& flags);
// Every stack of tops[begin, end) reading byte b, closed, appended to out (then deduplicated).
void step(const Grammar& g, std::vector<Frame>& arena, const std::vector<Top>& tops, size_t begin, size_t end,
          uint8_t b, std::vector<Top>& out, uint8_t& flags);
// Removes stacks equal to an earlier one of out[begin, ...) and keeps at most kMaxStacks.
void dedupe(const std::vector<Frame>& arena, std::vector<Top>& out, size_t begin);
inline constexpr size_t kMaxStacks = 64;

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);
  // Advances over `bytes`; false (and no change) when the grammar does not allow them.
  bool feed(std::string_view bytes);
  bool complete() const { return accepted_; }         // the bytes so far are a whole value
  bool can_continue() const { return !tops_.empty(); }  // some byte may follow
  const Grammar& grammar() const { return *g_; }
  const std::vector<Top>& tops() const { return tops_; }
  // Frames; scratch frames may be appended past frames().size() and removed again.
  std::vector<Frame>& arena() { return arena_; }
  size_t arena_size() const { return arena_size_; }

 private:
  void compact();
  std::shared_ptr<const Grammar> g_;
  std::vector<Frame> arena_;
  size_t arena_size_ = 0;  // committed frames (arena_ beyond it is scratch)
  size_t compacted_ = 0;   // arena_size_ after the last compaction
  std::vector<Top> tops_;
  bool accepted_ = false;
};

// Whether the whole of `text` is a complete value of the grammar.
bool grammar_accepts(const std::shared_ptr<const Grammar>& g, std::string_view text);

}  // namespace hs::grammar
