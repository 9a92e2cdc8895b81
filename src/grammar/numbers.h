// JSON numbers as automata over their characters, with JSON Schema's bounds (minimum, maximum,
// exclusiveMinimum, exclusiveMaximum). What is generated is a subset of what the bounds allow,
// chosen so that every value parses to a double that a validator compares exactly as the
// automaton does:
// * integer: -?(0|[1-9][0-9]*) with at most 16 digits (bounds are clamped to ±(10^16 - 1));
// * number without bounds: -?(0|[1-9][0-9]{0,15})(\.[0-9]{1,16})?([eE][+-]?[0-9]{1,2})?;
// * number with a bound: plain decimals -?I(.F)? of at most 15 digits (distinct such decimals
//   are distinct doubles, in the same order); a bound needs at most 15 significant digits.
#pragma once
#include <optional>

#include "grammar/automaton.h"

namespace hs::grammar {

struct NumberBound {
  double value = 0;
  bool exclusive = false;
};

// Throws SchemaError (without a location) when no number satisfies the bounds or a bound is
// beyond what is supported.
Automaton integer_automaton(std::optional<NumberBound> lo, std::optional<NumberBound> hi);
Automaton number_automaton(std::optional<NumberBound> lo, std::optional<NumberBound> hi);

// Union and concatenation helpers of (epsilon-free or not) automata, determinized.
Automaton union_of(const Automaton& a, const Automaton& b);
Automaton concat_literal(std::string_view prefix, const Automaton& a);

}  // namespace hs::grammar
