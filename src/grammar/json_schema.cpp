// SchemaCompiler: resolving a schema node ($ref, allOf, nullable, annotations) and choosing
// its rule (anyOf, enum/const, types). The bodies of objects, arrays and strings are in
// json_values.cpp.
#include "grammar/json_schema.h"

#include <algorithm>
#include <set>

#include "grammar/matcher.h"
#include "grammar/numbers.h"
#include "grammar/schema_error.h"

namespace hs::grammar {

namespace {

bool is_annotation(std::string_view k) {
  static const std::set<std::string_view> kAnnotations = {
      "title",     "description", "default",          "examples",        "example",       "$schema",
      "$id",       "$comment",    "deprecated",       "readOnly",        "writeOnly",     "contentEncoding",
      "contentMediaType", "contentSchema", "discriminator", "$defs",     "definitions",   "$anchor",
      "externalDocs", "xml",      "strict",           "propertyOrdering", "$vocabulary"};
  return kAnnotations.count(k) || k.rfind("x-", 0) == 0;
}

bool is_unsupported(std::string_view k) {
  static const std::set<std::string_view> kUnsupported = {
      "not",           "if",           "then",        "else",          "dependentRequired", "dependentSchemas",
      "dependencies",  "patternProperties", "unevaluatedProperties", "unevaluatedItems", "contains",
      "minContains",   "maxContains",  "$dynamicRef", "$recursiveRef", "$dynamicAnchor",    "$recursiveAnchor"};
  return kUnsupported.count(k) > 0;
}

bool is_known(std::string_view k) {
  static const std::set<std::string_view> kKnown = {
      "type",          "enum",          "const",          "anyOf",          "oneOf",     "allOf",     "$ref",
      "nullable",      "properties",    "required",       "additionalProperties",      "propertyNames",
      "minProperties", "maxProperties", "items",          "prefixItems",    "additionalItems", "minItems",
      "maxItems",      "uniqueItems",   "minLength",      "maxLength",      "pattern",   "format",    "minimum",
      "maximum",       "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
  return kKnown.count(k) > 0;
}

const std::vector<std::string>& all_types() {
  static const std::vector<std::string> kTypes = {"object", "array", "string", "number", "boolean", "null"};
  return kTypes;
}

std::string key_of(const ojson& v) { return v.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The union of the types a `type` keyword names ("integer" within "number").
std::vector<std::string> types_of(const ojson& s, const std::string& where) {
  std::vector<std::string> out;
  auto add = [&](const ojson& t) {
    if (!t.is_string()) throw SchemaError(where, "'type' must be a string or an array of strings");
    const std::string n = t.get<std::string>();
    if (n != "integer" && std::find(all_types().begin(), all_types().end(), n) == all_types().end())
      throw SchemaError(where, cat("unknown type '", n, "'"));
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  };
  const ojson& t = s["type"];
  if (t.is_array()) {
    for (const auto& x : t) add(x);
  } else {
    add(t);
  }
  if (std::find(out.begin(), out.end(), "number") != out.end()) std::erase(out, std::string("integer"));
  return out;
}

bool has_any(const ojson& s, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (s.contains(k)) return true;
  return false;
}

}  // namespace

std::string pointer_escape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

SchemaCompiler::SchemaCompiler(GrammarBuilder& g, const ojson& document, JsonOptions opts)
    : g_(g), doc_(document), opts_(std::move(opts)) {}

const ojson& SchemaCompiler::lookup(const std::string& ref, const std::string& where) {
  if (ref == "#") return doc_;
  if (ref.rfind("#/", 0) != 0)
    throw SchemaError(where, cat("only local $ref ('#/...') is supported, got '", ref, "'"));
  const ojson* cur = &doc_;
  size_t pos = 2;
  while (pos <= ref.size()) {
    size_t slash = ref.find('/', pos);
    if (slash == std::string::npos) slash = ref.size();
    std::string tok = percent_decode(std::string_view(ref).substr(pos, slash - pos));
    std::string key;
    for (size_t i = 0; i < tok.size(); ++i) {
      if (tok[i] == '~' && i + 1 < tok.size() && (tok[i + 1] == '0' || tok[i + 1] == '1')) {
        key += tok[i + 1] == '0' ? '~' : '/';
        ++i;
      } else {
        key += tok[i];
      }
    }
    if (cur->is_object() && cur->contains(key)) {
      cur = &(*cur)[key];
    } else if (cur->is_array() && !key.empty() && key.find_first_not_of("0123456789") == std::string::npos &&
               std::stoull(key) < cur->size()) {
      cur = &(*cur)[std::stoull(key)];
    } else {
      throw SchemaError(where, cat("$ref '", ref, "' points to nothing in the schema"));
    }
    pos = slash + 1;
  }
  return *cur;
}

ojson SchemaCompiler::resolve(const ojson& schema, const std::string& where) {
  if (schema.is_boolean()) return schema.get<bool>() ? ojson::object() : ojson{{"enum", ojson::array()}};
  if (!schema.is_object()) throw SchemaError(where, cat("a schema must be an object or a boolean, got ", schema.type_name()));
  if (++depth_ > 64) throw SchemaError(where, "$ref chain too deep (a circular $ref?)");
  struct Leave {
    int& d;
    ~Leave() { --d; }
  } leave{depth_};
  ojson out = ojson::object();
  for (const auto& [k, v] : schema.items()) {
    if (is_annotation(k) || k == "$ref") continue;
    if (is_unsupported(k)) throw SchemaError(where, cat("the JSON Schema keyword '", k, "' is not supported"));
    if (k == "uniqueItems" && v == false) continue;
    if (k == "uniqueItems") throw SchemaError(where, "the JSON Schema keyword 'uniqueItems' (true) is not supported");
    if (!is_known(k)) continue;  // unknown keywords are ignored, as validators do
    out[k] = v;
  }
  if (out.contains("nullable")) {
    const bool nullable = out["nullable"] == true;
    out.erase("nullable");
    if (nullable && out.contains("type")) {
      ojson t = out["type"].is_array() ? out["type"] : ojson::array({out["type"]});
      if (std::find(t.begin(), t.end(), ojson("null")) == t.end()) t.push_back("null");
      out["type"] = t;
    }
    if (nullable && out.contains("enum") && out["enum"].is_array()) out["enum"].push_back(nullptr);
  }
  if (schema.contains("$ref")) {
    const ojson& r = schema["$ref"];
    if (!r.is_string()) throw SchemaError(where, "'$ref' must be a string");
    const std::string ref = r.get<std::string>();
    ojson target = resolve(lookup(ref, where), ref);
    out = out.empty() ? std::move(target) : merge(std::move(target), out, where);
  }
  if (out.contains("allOf")) {
    const ojson all = out["allOf"];
    out.erase("allOf");
    if (!all.is_array() || all.empty()) throw SchemaError(where, "'allOf' must be a non-empty array");
    ojson merged = resolve(out, where);
    for (size_t i = 0; i < all.size(); ++i)
      merged = merge(std::move(merged), resolve(all[i], where + "/allOf/" + std::to_string(i)), where);
    out = std::move(merged);
  }
  if (out.contains("oneOf")) {
    if (out.contains("anyOf")) throw SchemaError(where, "'anyOf' and 'oneOf' together are not supported");
    out["anyOf"] = out["oneOf"];
    out.erase("oneOf");
  }
  if (out.contains("anyOf")) {
    const ojson any = out["anyOf"];
    out.erase("anyOf");
    if (!any.is_array() || any.empty()) throw SchemaError(where, "'anyOf' / 'oneOf' must be a non-empty array");
    ojson branches = ojson::array();
    for (size_t i = 0; i < any.size(); ++i) {
      ojson b = resolve(any[i], where + "/anyOf/" + std::to_string(i));
      branches.push_back(out.empty() ? std::move(b) : merge(out, b, where));
    }
    out = ojson{{"anyOf", std::move(branches)}};
  }
  return out;
}

// allOf of two resolved schemas (JSON Schema semantics: both must hold).
ojson SchemaCompiler::merge(ojson a, const ojson& b, const std::string& where) {
  if (a.contains("anyOf") || b.contains("anyOf")) {
    const ojson la = a.contains("anyOf") ? a["anyOf"] : ojson::array({a});
    const ojson lb = b.contains("anyOf") ? b["anyOf"] : ojson::array({b});
    if (la.size() * lb.size() > 64) throw SchemaError(where, "allOf over anyOf makes more than 64 alternatives");
    ojson out = ojson::array();
    for (const auto& x : la)
      for (const auto& y : lb) out.push_back(merge(x, y, where));
    return ojson{{"anyOf", out}};
  }
  const ojson impossible = {{"enum", ojson::array()}};
  // Objects: a property one side does not declare falls under that side's additionalProperties.
  if (a.contains("properties") || b.contains("properties") || a.contains("additionalProperties") ||
      b.contains("additionalProperties")) {
    const ojson pa = a.value("properties", ojson::object()), pb = b.value("properties", ojson::object());
    const ojson aa = a.value("additionalProperties", ojson(true)), ab = b.value("additionalProperties", ojson(true));
    ojson req = a.value("required", ojson::array());
    for (const auto& r : b.value("required", ojson::array()))
      if (std::find(req.begin(), req.end(), r) == req.end()) req.push_back(r);
    ojson props = ojson::object();
    auto side = [](const ojson& p, const ojson& add, const std::string& k) -> std::optional<ojson> {
      if (p.contains(k)) return p[k];
      if (add == false) return std::nullopt;
      return add;
    };
    std::vector<std::string> keys;
    for (const auto& [k, _] : pa.items()) keys.push_back(k);
    for (const auto& [k, _] : pb.items())
      if (!pa.contains(k)) keys.push_back(k);
    for (const std::string& k : keys) {
      auto x = side(pa, aa, k), y = side(pb, ab, k);
      if (!x || !y) {
        if (std::find(req.begin(), req.end(), ojson(k)) != req.end()) return impossible;
        continue;
      }
      props[k] = *x == true || x->empty() ? *y : *y == true || y->empty() ? *x : ojson{{"allOf", {*x, *y}}};
    }
    a["properties"] = props;
    a["required"] = req;
    a["additionalProperties"] = aa == false || ab == false ? ojson(false)
                                : aa == true ? ab
                                : ab == true ? aa
                                             : ojson{{"allOf", {aa, ab}}};
  }
  for (const auto& [k, v] : b.items()) {
    if (k == "properties" || k == "required" || k == "additionalProperties") continue;
    if (!a.contains(k)) {
      a[k] = v;
      continue;
    }
    if (a[k] == v) continue;
    if (k == "type") {
      std::vector<std::string> ta = types_of(a, where), tb = types_of(b, where), t;
      for (const auto& x : ta)
        for (const auto& y : tb)
          if (x == y || (x == "number" && y == "integer") || (x == "integer" && y == "number"))
            t.push_back(x == "integer" || y == "integer" ? "integer" : x);
      if (t.empty()) return impossible;
      a["type"] = t;
    } else if (k == "enum" || k == "const") {
      const ojson ea = k == "enum" ? a[k] : ojson::array({a[k]}), eb = k == "enum" ? v : ojson::array({v});
      ojson both = ojson::array();
      for (const auto& x : ea)
        if (std::find(eb.begin(), eb.end(), x) != eb.end()) both.push_back(x);
      a.erase(k);
      a["enum"] = both;
    } else if (k == "minLength" || k == "minItems" || k == "minProperties" || k == "minimum") {
      a[k] = std::max(a[k].get<double>(), v.get<double>());
    } else if (k == "maxLength" || k == "maxItems" || k == "maxProperties" || k == "maximum") {
      a[k] = std::min(a[k].get<double>(), v.get<double>());
    } else if ((k == "exclusiveMinimum" || k == "exclusiveMaximum") && a[k].is_number() && v.is_number()) {
      a[k] = k == "exclusiveMinimum" ? std::max(a[k].get<double>(), v.get<double>()) : std::min(a[k].get<double>(), v.get<double>());
    } else if (k == "items" && a[k].is_object() && v.is_object()) {
      a[k] = ojson{{"allOf", {a[k], v}}};
    } else {
      throw SchemaError(where, cat("allOf combines two different '", k, "' values, which is not supported"));
    }
  }
  return a;
}

int32_t SchemaCompiler::value(const ojson& schema, const std::string& where) {
  return value_rule(resolve(schema, where), where);
}

int32_t SchemaCompiler::any_object() { return type_rule("object", ojson::object(), "#"); }

int32_t SchemaCompiler::value_rule(const ojson& s, const std::string& where) {
  if (s.contains("anyOf")) {
    const std::string key = "any:" + key_of(s);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const int32_t rule = g_.declare("anyOf " + where);
    memo_[key] = rule;
    Automaton a;
    const int32_t end = a.add();
    a.accept(end);
    const ojson& branches = s["anyOf"];
    for (size_t i = 0; i < branches.size(); ++i)
      a.call(a.start, value_rule(branches[i], where + "/anyOf/" + std::to_string(i)), end);
    g_.define(rule, std::move(a));
    return rule;
  }
  if (s.contains("enum") || s.contains("const")) return literal_rule(s, where);
  std::vector<std::string> types;
  if (s.contains("type")) {
    types = types_of(s, where);
  } else {
    if (has_any(s, {"properties", "required", "additionalProperties", "propertyNames", "minProperties", "maxProperties"}))
      types.push_back("object");
    if (has_any(s, {"items", "prefixItems", "additionalItems", "minItems", "maxItems"})) types.push_back("array");
    if (has_any(s, {"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
    if (has_any(s, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})) types.push_back("number");
    if (types.empty()) types = all_types();
  }
  if (types.size() == 1) return type_rule(types[0], s, where);
  const std::string key = "types:" + key_of(s) + key_of(ojson(types));
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const int32_t rule = g_.declare("value " + where);
  memo_[key] = rule;
  Automaton a;
  const int32_t end = a.add();
  a.accept(end);
  for (const auto& t : types) a.call(a.start, type_rule(t, s, where), end);
  g_.define(rule, std::move(a));
  return rule;
}

int32_t SchemaCompiler::type_rule(const std::string& type, const ojson& s, const std::string& where) {
  static const std::map<std::string, std::vector<const char*>> kRelevant = {
      {"object", {"properties", "required", "additionalProperties", "propertyNames", "minProperties", "maxProperties"}},
      {"array", {"items", "prefixItems", "additionalItems", "minItems", "maxItems"}},
      {"string", {"minLength", "maxLength", "pattern", "format"}},
      {"number", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
      {"integer", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}},
      {"boolean", {}},
      {"null", {}}};
  ojson relevant = ojson::object();
  for (const char* k : kRelevant.at(type))
    if (s.contains(k)) relevant[k] = s[k];
  if (type == "string") return string_rule(relevant, where, Encoding::json, "\"");
  const std::string key = type + ":" + key_of(relevant);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const int32_t rule = g_.declare(type + " " + where);
  memo_[key] = rule;
  Automaton a;
  if (type == "null") {
    a.accept(add_literal(a, a.start, "null"));
  } else if (type == "boolean") {
    a.accept(add_literal(a, a.start, "true"));
    a.accept(add_literal(a, a.start, "false"));
  } else if (type == "number" || type == "integer") {
    auto bound = [&](const char* inc, const char* exc, bool lower) -> std::optional<NumberBound> {
      std::optional<NumberBound> b;
      auto tighter = [&](NumberBound n) {
        if (!b || (lower ? n.value > b->value || (n.value == b->value && n.exclusive)
                         : n.value < b->value || (n.value == b->value && n.exclusive)))
          b = n;
      };
      if (relevant.contains(inc)) {
        if (!relevant[inc].is_number()) throw SchemaError(where, cat("'", inc, "' must be a number"));
        const bool draft4 = relevant.contains(exc) && relevant[exc].is_boolean() && relevant[exc].get<bool>();
        tighter({relevant[inc].get<double>(), draft4});
      }
      if (relevant.contains(exc) && !relevant[exc].is_boolean()) {
        if (!relevant[exc].is_number()) throw SchemaError(where, cat("'", exc, "' must be a number"));
        tighter({relevant[exc].get<double>(), true});
      }
      return b;
    };
    const auto lo = bound("minimum", "exclusiveMinimum", true), hi = bound("maximum", "exclusiveMaximum", false);
    bool integer = type == "integer";
    if (relevant.contains("multipleOf")) {
      if (!(relevant["multipleOf"].is_number() && relevant["multipleOf"].get<double>() == 1.0))
        throw SchemaError(where, "'multipleOf' other than 1 is not supported");
      integer = true;
    }
    try {
      const Automaton chars = integer ? integer_automaton(lo, hi) : number_automaton(lo, hi);
      a.accept(add_encoded(a, a.start, chars, Encoding::raw));
    } catch (const SchemaError& e) {
      throw SchemaError(where, e.detail());
    }
  } else if (type == "object") {
    object_body(a, relevant, where);
  } else {
    array_body(a, relevant, where);
  }
  g_.define(rule, std::move(a));
  return rule;
}

std::vector<ojson> SchemaCompiler::enum_values(const ojson& s, const std::string& where) {
  std::vector<ojson> values;
  if (s.contains("enum")) {
    if (!s["enum"].is_array()) throw SchemaError(where, "'enum' must be an array");
    for (const auto& v : s["enum"]) values.push_back(v);
  }
  if (s.contains("const")) {
    if (s.contains("enum") && std::find(values.begin(), values.end(), s["const"]) == values.end()) return {};
    values = {s["const"]};
  }
  ojson rest = s;
  rest.erase("enum");
  rest.erase("const");
  if (rest.empty()) return values;
  // Other keywords too: keep the values that the rest of the schema accepts (checked with a
  // grammar of the rest, so the check agrees with what would be generated).
  GrammarBuilder g;
  SchemaCompiler c(g, doc_, JsonOptions{false, 0, opts_.forbidden});
  const auto grammar = g.build(c.value_rule(rest, where));
  std::vector<ojson> kept;
  for (const auto& v : values)
    if (grammar_accepts(grammar, v.dump(-1, ' ', false, ojson::error_handler_t::replace))) kept.push_back(v);
  return kept;
}

int32_t SchemaCompiler::literal_rule(const ojson& s, const std::string& where) {
  // No value (an empty enum, a `false` schema): a rule that matches nothing, which the
  // grammar drops with whatever needs it (an optional property, an anyOf branch).
  const std::vector<ojson> values = enum_values(s, where);
  ojson list = ojson::array();
  for (const auto& v : values) list.push_back(v);
  const std::string key = "lit:" + key_of(list);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  const int32_t rule = g_.declare("enum " + where);
  memo_[key] = rule;
  Automaton a;
  for (const auto& v : values) {
    std::string text;
    try {
      text = v.dump(-1, ' ', false, ojson::error_handler_t::strict);
    } catch (const std::exception&) {
      throw SchemaError(where, "an 'enum' / 'const' value holds invalid UTF-8");
    }
    for (const auto& f : opts_.forbidden)
      if (text.find(f) != std::string::npos) throw SchemaError(where, cat("an 'enum' / 'const' value contains '", f, "'"));
    a.accept(add_literal(a, a.start, text));
  }
  g_.define(rule, std::move(a));
  return rule;
}

int32_t SchemaCompiler::raw_string(const ojson& schema, const std::string& where, std::string_view terminator) {
  const ojson s = resolve(schema, where);
  if (s.contains("anyOf")) {
    std::vector<int32_t> rules;
    const ojson& branches = s["anyOf"];
    for (size_t i = 0; i < branches.size(); ++i) {
      const int32_t r = raw_string(branches[i], where + "/anyOf/" + std::to_string(i), terminator);
      if (r >= 0) rules.push_back(r);
    }
    if (rules.empty()) return -1;
    if (rules.size() == 1) return rules[0];
    const int32_t rule = g_.declare("raw anyOf " + where);
    Automaton a;
    const int32_t end = a.add();
    a.accept(end);
    for (int32_t r : rules) a.call(a.start, r, end);
    g_.define(rule, std::move(a));
    return rule;
  }
  if (s.contains("enum") || s.contains("const")) {
    std::vector<std::string> texts;
    for (const auto& v : enum_values(s, where))
      if (v.is_string()) texts.push_back(v.get<std::string>());
    if (texts.empty()) return -1;
    const int32_t rule = g_.declare("raw enum " + where);
    Automaton a;
    for (const auto& t : texts) {
      for (const auto& f : opts_.forbidden)
        if (t.find(f) != std::string::npos) throw SchemaError(where, cat("an 'enum' / 'const' value contains '", f, "'"));
      if (t.find(terminator) != std::string::npos)
        throw SchemaError(where, cat("an 'enum' / 'const' value contains '", terminator, "'"));
      a.accept(add_literal(a, add_literal(a, a.start, t), terminator));
    }
    g_.define(rule, std::move(a));
    return rule;
  }
  if (s.contains("type")) {
    const auto types = types_of(s, where);
    if (std::find(types.begin(), types.end(), "string") == types.end()) return -1;
  } else if (has_any(s, {"properties", "items", "prefixItems", "minimum", "maximum", "exclusiveMinimum",
                         "exclusiveMaximum", "required", "minItems", "maxItems", "additionalProperties"}) &&
             !has_any(s, {"minLength", "maxLength", "pattern", "format"})) {
    return -1;
  }
  ojson relevant = ojson::object();
  for (const char* k : {"minLength", "maxLength", "pattern", "format"})
    if (s.contains(k)) relevant[k] = s[k];
  return string_rule(relevant, where, Encoding::raw, terminator);
}

}  // namespace hs::grammar
