// Finite automata over an integer alphabet: code points (the value of a JSON string, a number's
// text) or bytes (a grammar rule). Edges carry symbol ranges; a grammar rule's automaton may
// also have call edges (match a whole other rule, then go on) and epsilon moves. The JSON-Schema
// compiler builds NFAs with the helpers below, then determinizes, intersects and trims them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace hs::grammar {

// The largest code point; surrogates (U+D800..U+DFFF) never appear in a character set.
inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct Automaton {
  struct Edge {
    uint32_t lo, hi;  // inclusive symbol range
    int32_t to;
  };
  struct Call {
    int32_t rule;
    int32_t to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<Call> calls;
    std::vector<int32_t> eps;
    bool accept = false;
  };
  std::vector<State> states;
  int32_t start = 0;

  Automaton() { add(); }
  int32_t add() {
    states.emplace_back();
    return static_cast<int32_t>(states.size()) - 1;
  }
  void edge(int32_t a, uint32_t lo, uint32_t hi, int32_t b) { states[static_cast<size_t>(a)].edges.push_back({lo, hi, b}); }
  void eps(int32_t a, int32_t b) { states[static_cast<size_t>(a)].eps.push_back(b); }
  void call(int32_t a, int32_t rule, int32_t b) { states[static_cast<size_t>(a)].calls.push_back({rule, b}); }
  void accept(int32_t a) { states[static_cast<size_t>(a)].accept = true; }
  size_t size() const { return states.size(); }
  // True when no accepting state is reachable (after trim(): the start state accepts nothing).
  bool empty() const;
};

// A sorted list of disjoint inclusive ranges (a character class).
using RangeSet = std::vector<std::pair<uint32_t, uint32_t>>;
RangeSet normalize(RangeSet r);            // sorts and merges
RangeSet complement(const RangeSet& r);    // within the code points, without surrogates
RangeSet any_char();                       // every code point but the surrogates
RangeSet without_surrogates(const RangeSet& r);

// Fragment helpers: each appends states reachable from `from` and returns the state after.
int32_t add_literal(Automaton& a, int32_t from, std::string_view bytes);  // bytes as symbols
int32_t add_codepoints(Automaton& a, int32_t from, std::u32string_view cps);
int32_t add_class(Automaton& a, int32_t from, const RangeSet& set);
// Copies `src` into `dst`, entered from `from` by an epsilon move; every accepting state of
// the copy moves by epsilon to the returned state (the copy's states do not accept).
int32_t embed(Automaton& dst, const Automaton& src, int32_t from);

// Subset construction: the result has no epsilon moves, disjoint edge ranges per state and at
// most one call edge per rule per state. Throws hs::Error naming `what` past `max_states`.
Automaton determinize(const Automaton& a, size_t max_states, std::string_view what);
// The product of two epsilon-free, call-free automata: accepts what both accept.
Automaton intersect(const Automaton& a, const Automaton& b, size_t max_states, std::string_view what);
// Removes the states that are unreachable or cannot reach acceptance (call-free automata).
Automaton trim(const Automaton& a);
// Strings of code points without `t` anywhere (a KMP automaton; every state accepts).
Automaton not_containing(std::u32string_view t);
// Whether the (epsilon-free, call-free, deterministic) automaton accepts `symbols`.
bool accepts(const Automaton& dfa, std::u32string_view symbols);

}  // namespace hs::grammar
