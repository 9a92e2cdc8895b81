// What a request's next token may be, beyond what the model prefers: the scheduler asks a
// constraint for a mask before sampling and tells it each token generated. Implemented by
// structured output (grammar/structured_output.h); the engine knows only this interface.
#pragma once
#include <cstdint>
#include <vector>

namespace hs {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of the tokens that may not come next to -infinity (logits[vocab]).
  virtual void mask(float* logits, int64_t vocab) = 0;
  // The same as a bit set: bit i of bits[i / 64] set when token i may come next (bits is
  // resized to (vocab + 63) / 64 words; ids past the constraint's vocabulary are cleared). The
  // device sampler applies it there, so a constrained request need not download its logits.
  virtual void allowed(std::vector<uint64_t>& bits, int64_t vocab) = 0;
  // The token generated; throws hs::Error when the constraint does not allow it.
  virtual void accept(int32_t token) = 0;
  // The output is complete and nothing may follow: the request ends here.
  virtual bool finished() const = 0;
};

}  // namespace hs
