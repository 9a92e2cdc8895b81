// Lowering of automata over code points to automata over bytes: UTF-8, and for JSON strings
// the escapes the value's characters need (`"` and `\` escaped, control characters as \n \t
// ... or \u00XX; every other character as its UTF-8 bytes, as json.dumps(ensure_ascii=False)
// writes it). Raw encoding (DSML string parameters) writes every character as its UTF-8.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"

namespace hs::grammar {

enum class Encoding { json, raw };

// Adds the byte form of `chars` (code points; epsilon-free) to `bytes`, entered from `from`;
// returns the state reached after any string `chars` accepts.
int32_t add_encoded(Automaton& bytes, int32_t from, const Automaton& chars, Encoding enc);

// A rule: `open`, then between min and max characters of `chars`, then `close`, unrolled one
// position per character (deterministic, with chain tags so that the mask cache can share the
// positions far from both bounds). The first byte of `close` must not start a character.
struct TaggedAutomaton {
  Automaton a;
  std::vector<ChainTag> tags;
};
TaggedAutomaton length_chain(const RangeSet& chars, int32_t min, int32_t max, Encoding enc, int32_t chain,
                             std::string_view open, std::string_view close);

// The sequences of byte ranges that together encode exactly the code points [lo, hi] in
// UTF-8 (surrogates skipped); each byte position of a sequence is one range.
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;
std::vector<ByteSeq> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace hs::grammar
