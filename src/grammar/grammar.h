// A context-free grammar over bytes as a recursive transition network: each rule is a
// deterministic finite automaton whose edges read byte ranges or call another rule (which must
// match in full before the caller goes on). GrammarBuilder takes one Automaton per rule,
// determinizes it, removes what cannot lead to a complete value, and precomputes for every node
// its "expansion": the nodes that read the next byte once calls are entered and finished rules
// return. The matcher (grammar/matcher.h) runs the result as a pushdown automaton.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "grammar/automaton.h"

namespace hs::grammar {

// Nodes of one unrolled length chain (a string with minLength/maxLength) that lie far from both
// bounds behave alike for every token; the mask cache shares their entries (grammar/mask.h).
struct ChainTag {
  int32_t chain = -1;  // -1: not in a chain
  int32_t role = 0;    // the node's place within one position's automaton
  int32_t pos = 0;     // characters before it
};

struct Grammar {
  static constexpr int32_t kPop = -1;  // Item::top: the rule may end here
  struct Edge {
    uint8_t lo, hi;
    int32_t to;
  };
  // One way to reach a byte-reading node: push frames for the return nodes
  // pushes[push_begin, push_end) (outermost first), then stand at `top`.
  struct Item {
    int32_t top;
    uint32_t push_begin, push_end;
  };
  struct Call {
    int32_t rule;
    int32_t to;  // the return node
  };
  struct Node {
    uint32_t edge_begin = 0, edge_end = 0;  // byte edges (sorted, disjoint)
    uint32_t call_begin = 0, call_end = 0;  // call edges (folded into the expansion)
    uint32_t item_begin = 0, item_end = 0;  // the expansion
    int32_t rule = 0;
    bool final = false;   // the rule may end here
    bool simple = false;  // the expansion is just this node (no calls, not final)
  };
  struct Chain {
    int32_t min = 0, max = 0;
  };

  std::vector<Node> nodes;
  std::vector<Edge> edges;
  std::vector<Call> calls;
  std::vector<Item> items;
  std::vector<int32_t> pushes;
  std::vector<int32_t> rule_start;  // node of each rule's start state (-1: rule removed)
  std::vector<std::string> rule_names;
  std::vector<ChainTag> tags;       // per node
  std::vector<Chain> chains;
  int32_t root = 0;                 // the root rule

  // The node after reading `b` at node n, or -1.
  int32_t next(int32_t n, uint8_t b) const {
    const Node& nd = nodes[static_cast<size_t>(n)];
    for (uint32_t i = nd.edge_begin; i < nd.edge_end; ++i) {
      const Edge& e = edges[i];
      if (b < e.lo) return -1;
      if (b <= e.hi) return e.to;
    }
    return -1;
  }
  // A readable listing (rules, nodes, edges) for tests and debugging.
  std::string describe() const;
};

class GrammarBuilder {
 public:
  // Declares a rule (it may be called before it is defined, e.g. for recursion).
  int32_t declare(std::string name);
  // Gives a declared rule its automaton over bytes (symbols 0..255) with call edges. A rule
  // given `tags` is taken as already deterministic and is not determinized (tags per state).
  void define(int32_t rule, Automaton a, std::vector<ChainTag> tags = {});
  bool defined(int32_t rule) const { return rules_[static_cast<size_t>(rule)].defined; }
  int32_t add_chain(int32_t min, int32_t max);
  size_t rule_count() const { return rules_.size(); }
  const std::string& name(int32_t rule) const { return rules_[static_cast<size_t>(rule)].name; }

  // Finishes the grammar with `root` as its start rule. Throws SchemaError when no complete
  // value exists, when a rule recurses without reading a byte, or past the size limits.
  std::shared_ptr<const Grammar> build(int32_t root);

 private:
  struct Rule {
    std::string name;
    Automaton a;
    std::vector<ChainTag> tags;
    bool defined = false;
  };
  std::vector<Rule> rules_;
  std::vector<Grammar::Chain> chains_;
};

}  // namespace hs::grammar
