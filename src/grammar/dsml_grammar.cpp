#include "grammar/dsml_grammar.h"

#include <algorithm>
#include <array>

#include "grammar/regex.h"
#include "grammar/schema_error.h"
#include "tokenizer/chat_tokens.h"

namespace hs::grammar {

int32_t reasoning_rule(GrammarBuilder& g, const std::vector<std::string>& forbidden) {
  Automaton text = not_containing(utf8_to_codepoints(ds4::kThinkEnd));
  for (const auto& f : forbidden) text = intersect(text, not_containing(utf8_to_codepoints(f)), 10000, "reasoning");
  const int32_t rule = g.declare("reasoning");
  Automaton a;
  a.accept(add_literal(a, add_encoded(a, a.start, text, Encoding::raw), ds4::kThinkEnd));
  g.define(rule, std::move(a));
  return rule;
}

int32_t tool_call_rule(GrammarBuilder& g, SchemaCompiler& c, const std::string& name, const ojson& parameters) {
  if (name.empty() || name.find('"') != std::string::npos) throw SchemaError("", "a tool name must be non-empty and hold no '\"'");
  const ojson p = parameters.is_null() ? ojson::object() : c.resolve(parameters, "#");
  if (p.contains("anyOf")) throw SchemaError("#", "a tool's parameters must be one object schema (anyOf / oneOf at the top is not supported)");
  if (p.contains("enum") || p.contains("const")) throw SchemaError("#", "a tool's parameters with 'enum' / 'const' are not supported");
  if (p.contains("type") && p["type"] != "object") throw SchemaError("#", "a tool's parameters must be of type \"object\"");
  std::vector<std::pair<std::string, ojson>> props;
  if (p.contains("properties")) {
    if (!p["properties"].is_object()) throw SchemaError("#", "'properties' must be an object");
    for (const auto& [k, v] : p["properties"].items()) props.emplace_back(k, v);
  }
  std::vector<std::string> required;
  for (const auto& r : p.value("required", ojson::array())) {
    if (!r.is_string()) throw SchemaError("#", "'required' must be an array of strings");
    required.push_back(r.get<std::string>());
  }
  const ojson extra = p.value("additionalProperties", ojson(true));
  for (const auto& r : required) {
    if (std::any_of(props.begin(), props.end(), [&](const auto& x) { return x.first == r; })) continue;
    if (extra == false) throw SchemaError("#", cat("the required parameter '", r, "' is not in 'properties' and additionalProperties is false"));
    props.emplace_back(r, extra == true ? ojson::object() : extra);
  }
  const int32_t rule = g.declare("tool call " + name);
  Automaton a;
  const std::string open = cat("\n\n", ds4::kBlockOpen, "\n", ds4::kInvokeOpen, " name=\"", name, "\">\n");
  const int32_t body = add_literal(a, a.start, open);
  const size_t k = props.size();
  std::vector<std::array<int32_t, 2>> st(k + 1);
  for (auto& s : st) s = {a.add(), a.add()};
  a.eps(body, st[0][0]);
  for (size_t i = 0; i < k; ++i) {
    const auto& [key, schema] = props[i];
    if (key.find('"') != std::string::npos) throw SchemaError("#/properties", cat("a parameter name holds '\"': ", key));
    const std::string where = "#/properties/" + pointer_escape(key);
    const int32_t raw = c.raw_string(schema, where, kDsmlParamClose);
    const int32_t json = c.value(schema, where);
    const bool req = std::find(required.begin(), required.end(), key) != required.end();
    for (int e = 0; e < 2; ++e) {
      const int32_t from = st[i][static_cast<size_t>(e)];
      if (!req) a.eps(from, st[i + 1][static_cast<size_t>(e)]);
      const int32_t tag = add_literal(a, from, cat(e ? "\n" : "", ds4::kParamOpen, " name=\"", key, "\" string=\""));
      const int32_t end = a.add();
      if (raw >= 0) a.call(add_literal(a, tag, "true\">"), raw, end);
      const int32_t after_json = a.add();
      a.call(add_literal(a, tag, "false\">"), json, after_json);
      a.eps(add_literal(a, after_json, kDsmlParamClose), end);
      a.eps(add_literal(a, end, ">"), st[i + 1][1]);
    }
  }
  const std::string close = cat("\n", ds4::kInvokeClose, "\n", ds4::kBlockClose);
  for (int e = 0; e < 2; ++e) a.accept(add_literal(a, st[k][static_cast<size_t>(e)], close));
  g.define(rule, std::move(a));
  return rule;
}

}  // namespace hs::grammar
