#include "grammar/grammar.h"

#include <algorithm>
#include <sstream>

#include "grammar/schema_error.h"

namespace hs::grammar {

namespace {

constexpr size_t kMaxRuleStates = 200000;
constexpr size_t kMaxNodes = 2000000;
constexpr size_t kMaxItems = 4000000;

struct TmpItem {
  int32_t top;
  std::vector<int32_t> pushes;
  bool operator<(const TmpItem& o) const { return top != o.top ? top < o.top : pushes < o.pushes; }
  bool operator==(const TmpItem& o) const { return top == o.top && pushes == o.pushes; }
};

std::string byte_text(uint8_t b) {
  if (b >= 0x21 && b < 0x7F && b != '\'' && b != '\\') return std::string(1, static_cast<char>(b));
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("\\x") + kHex[b >> 4] + kHex[b & 15];
}

}  // namespace

int32_t GrammarBuilder::declare(std::string name) {
  rules_.push_back(Rule{std::move(name), Automaton(), {}, false});
  return static_cast<int32_t>(rules_.size()) - 1;
}

void GrammarBuilder::define(int32_t rule, Automaton a, std::vector<ChainTag> tags) {
  Rule& r = rules_[static_cast<size_t>(rule)];
  r.a = std::move(a);
  r.tags = std::move(tags);
  r.defined = true;
}

int32_t GrammarBuilder::add_chain(int32_t min, int32_t max) {
  chains_.push_back({min, max});
  return static_cast<int32_t>(chains_.size()) - 1;
}

std::shared_ptr<const Grammar> GrammarBuilder::build(int32_t root) {
  const size_t R = rules_.size();
  for (auto& r : rules_) {
    HS_CHECK(r.defined, "grammar: rule '", r.name, "' was declared but not defined");
    if (r.tags.empty()) {
      try {
        r.a = determinize(r.a, kMaxRuleStates, "the schema");
      } catch (const SchemaError&) {
        throw;
      } catch (const Error& e) {
        throw SchemaError("", e.what());
      }
    }
  }
  // Productive states: those from which the rule can end (calls need a productive callee).
  std::vector<std::vector<char>> prod(R);
  for (size_t r = 0; r < R; ++r) prod[r].assign(rules_[r].a.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < R; ++r) {
      const Automaton& a = rules_[r].a;
      for (size_t k = a.size(); k-- > 0;) {
        if (prod[r][k]) continue;
        const auto& st = a.states[k];
        bool ok = st.accept;
        for (size_t e = 0; !ok && e < st.edges.size(); ++e) ok = prod[r][static_cast<size_t>(st.edges[e].to)];
        for (size_t c = 0; !ok && c < st.calls.size(); ++c) {
          const auto& cl = st.calls[c];
          const auto cr = static_cast<size_t>(cl.rule);
          ok = prod[cr][static_cast<size_t>(rules_[cr].a.start)] && prod[r][static_cast<size_t>(cl.to)];
        }
        if (ok) {
          prod[r][k] = 1;
          changed = true;
        }
      }
    }
  }
  const auto root_r = static_cast<size_t>(root);
  if (!prod[root_r][static_cast<size_t>(rules_[root_r].a.start)])
    throw SchemaError("#", "no JSON value satisfies the schema (every alternative is impossible)");

  // Number the productive states reachable from the root's start.
  auto g = std::make_shared<Grammar>();
  g->root = root;
  g->rule_start.assign(R, -1);
  for (const auto& r : rules_) g->rule_names.push_back(r.name);
  g->chains = chains_;
  std::vector<std::vector<int32_t>> id(R);
  for (size_t r = 0; r < R; ++r) id[r].assign(rules_[r].a.size(), -1);
  std::vector<std::pair<int32_t, int32_t>> order;  // (rule, state) by node id
  auto node_of = [&](int32_t r, int32_t s) {
    int32_t& slot = id[static_cast<size_t>(r)][static_cast<size_t>(s)];
    if (slot < 0) {
      if (order.size() >= kMaxNodes) throw SchemaError("", "the schema is too large (its grammar passes 2000000 nodes)");
      slot = static_cast<int32_t>(order.size());
      order.emplace_back(r, s);
    }
    return slot;
  };
  auto start_of = [&](int32_t r) {
    const int32_t n = node_of(r, rules_[static_cast<size_t>(r)].a.start);
    g->rule_start[static_cast<size_t>(r)] = n;
    return n;
  };
  start_of(root);
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [r, s] = order[i];
    const auto& st = rules_[static_cast<size_t>(r)].a.states[static_cast<size_t>(s)];
    Grammar::Node nd;
    nd.rule = r;
    nd.final = st.accept;
    nd.edge_begin = static_cast<uint32_t>(g->edges.size());
    std::vector<Automaton::Edge> es = st.edges;
    std::sort(es.begin(), es.end(), [](const auto& x, const auto& y) { return x.lo < y.lo; });
    for (const auto& e : es) {
      if (!prod[static_cast<size_t>(r)][static_cast<size_t>(e.to)]) continue;
      HS_CHECK(e.hi <= 255, "grammar: rule '", rules_[static_cast<size_t>(r)].name, "' has a non-byte symbol");
      g->edges.push_back({static_cast<uint8_t>(e.lo), static_cast<uint8_t>(e.hi), node_of(r, e.to)});
    }
    nd.edge_end = static_cast<uint32_t>(g->edges.size());
    nd.call_begin = static_cast<uint32_t>(g->calls.size());
    for (const auto& c : st.calls) {
      const auto cr = static_cast<size_t>(c.rule);
      if (!prod[cr][static_cast<size_t>(rules_[cr].a.start)] || !prod[static_cast<size_t>(r)][static_cast<size_t>(c.to)])
        continue;
      const int32_t ret = node_of(r, c.to);
      if (g->rule_start[cr] < 0) start_of(c.rule);
      g->calls.push_back({c.rule, ret});
    }
    nd.call_end = static_cast<uint32_t>(g->calls.size());
    g->nodes.push_back(nd);
  }
  const size_t N = g->nodes.size();
  g->tags.resize(N);
  for (size_t i = 0; i < N; ++i) {
    const auto [r, s] = order[i];
    const auto& tags = rules_[static_cast<size_t>(r)].tags;
    if (!tags.empty()) g->tags[i] = tags[static_cast<size_t>(s)];
  }

  // Expansions, memoized; a node met again while its own expansion is in progress means a
  // rule can call itself (or loop) without reading a byte.
  std::vector<std::vector<TmpItem>> exp(N);
  std::vector<uint8_t> state(N, 0);
  size_t total = 0;
  auto expand = [&](auto&& self, int32_t n) -> void {
    const auto un = static_cast<size_t>(n);
    if (state[un] == 2) return;
    if (state[un] == 1)
      throw SchemaError("", cat("the schema recurses without consuming any text (through '",
                                g->rule_names[static_cast<size_t>(g->nodes[un].rule)], "')"));
    state[un] = 1;
    const Grammar::Node& nd = g->nodes[un];
    std::vector<TmpItem> out;
    if (nd.edge_end > nd.edge_begin) out.push_back({n, {}});
    if (nd.final) out.push_back({Grammar::kPop, {}});
    for (uint32_t c = nd.call_begin; c < nd.call_end; ++c) {
      const Grammar::Call cl = g->calls[c];
      const int32_t s = g->rule_start[static_cast<size_t>(cl.rule)];
      self(self, s);
      for (const TmpItem& it : exp[static_cast<size_t>(s)]) {
        if (it.top == Grammar::kPop) {
          self(self, cl.to);
          for (const TmpItem& it2 : exp[static_cast<size_t>(cl.to)]) out.push_back(it2);
        } else {
          TmpItem t{it.top, {cl.to}};
          t.pushes.insert(t.pushes.end(), it.pushes.begin(), it.pushes.end());
          out.push_back(std::move(t));
        }
      }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    total += out.size();
    if (total > kMaxItems) throw SchemaError("", "the schema is too complex (too many alternatives at one point)");
    exp[un] = std::move(out);
    state[un] = 2;
  };
  for (size_t n = 0; n < N; ++n) expand(expand, static_cast<int32_t>(n));
  for (size_t n = 0; n < N; ++n) {
    Grammar::Node& nd = g->nodes[n];
    nd.item_begin = static_cast<uint32_t>(g->items.size());
    for (const TmpItem& it : exp[n]) {
      const auto pb = static_cast<uint32_t>(g->pushes.size());
      g->pushes.insert(g->pushes.end(), it.pushes.begin(), it.pushes.end());
      g->items.push_back({it.top, pb, static_cast<uint32_t>(g->pushes.size())});
    }
    nd.item_end = static_cast<uint32_t>(g->items.size());
    nd.simple = exp[n].size() == 1 && exp[n][0].top == static_cast<int32_t>(n) && exp[n][0].pushes.empty();
  }
  return g;
}

std::string Grammar::describe() const {
  std::ostringstream os;
  for (size_t r = 0; r < rule_start.size(); ++r) {
    if (rule_start[r] < 0) continue;
    os << "rule " << r << " '" << rule_names[r] << "' start n" << rule_start[r] << (static_cast<int32_t>(r) == root ? " (root)" : "")
       << "\n";
    for (size_t n = 0; n < nodes.size(); ++n) {
      const Node& nd = nodes[n];
      if (nd.rule != static_cast<int32_t>(r)) continue;
      os << "  n" << n << (nd.final ? " final" : "") << ":";
      for (uint32_t e = nd.edge_begin; e < nd.edge_end; ++e) {
        os << " [" << byte_text(edges[e].lo);
        if (edges[e].hi != edges[e].lo) os << "-" << byte_text(edges[e].hi);
        os << "]->n" << edges[e].to;
      }
      for (uint32_t c = nd.call_begin; c < nd.call_end; ++c)
        os << " <" << rule_names[static_cast<size_t>(calls[c].rule)] << ">->n" << calls[c].to;
      os << "\n";
    }
  }
  return os.str();
}

}  // namespace hs::grammar
