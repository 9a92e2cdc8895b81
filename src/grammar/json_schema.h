// JSON Schema -> grammar rules (docs/server.md "Structured output" lists what is supported).
// The subset is what SDKs emit from zod / pydantic: type (and type lists), enum, const,
// properties / required / additionalProperties, items / prefixItems / additionalItems,
// minItems / maxItems, anyOf / oneOf (as anyOf), allOf (merged), local $ref / $defs /
// definitions (recursion included), nullable, minLength / maxLength, pattern, format (see
// formats.h), numeric bounds. Unsupported keywords are a SchemaError naming them.
//
// What is generated is a subset of the valid values, in one canonical shape: properties in
// the schema's order (each at most once, the required ones always), no properties beyond the
// declared ones unless additionalProperties allows them (or the object declares none), bounded
// whitespace between tokens, and the limits of numbers.h and of the length caps below.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/encode.h"
#include "grammar/grammar.h"
#include "tokenizer/chat_json.h"

namespace hs::grammar {

struct JsonOptions {
  // Between tokens: nothing, one space, or a newline and up to max_indent spaces.
  bool whitespace = true;
  int max_indent = 20;
  // Texts no generated string may contain (the chat parser stops at them).
  std::vector<std::string> forbidden;
};

// Positions unrolled at most: longer maxLength / maxItems are enforced at this length (still
// valid); a minLength / minItems beyond it is a SchemaError.
inline constexpr int32_t kMaxStringChain = 2048;
inline constexpr int32_t kMaxPatternLength = 512;
inline constexpr int32_t kMaxArrayUnroll = 1024;

class SchemaCompiler {
 public:
  // `document` is the whole schema ($ref targets are looked up in it); it must outlive this.
  SchemaCompiler(GrammarBuilder& g, const ojson& document, JsonOptions opts);

  // A rule matching one JSON value valid for `schema`, a node inside the document (or a
  // standalone schema whose $refs point into the document). `where` is its JSON pointer.
  int32_t value(const ojson& schema, const std::string& where);
  int32_t any_object();
  // A rule matching the raw text of a string valid for `schema` followed by `terminator`
  // (DSML string="true" parameters); -1 when the schema admits no string.
  int32_t raw_string(const ojson& schema, const std::string& where, std::string_view terminator);
  // `schema` resolved: $ref followed, allOf merged, annotations dropped (for the DSML params).
  ojson resolve(const ojson& schema, const std::string& where);

 private:
  int32_t value_rule(const ojson& s, const std::string& where);
  int32_t type_rule(const std::string& type, const ojson& s, const std::string& where);
  int32_t literal_rule(const ojson& s, const std::string& where);
  int32_t string_rule(const ojson& s, const std::string& where, Encoding enc, std::string_view close);
  void object_body(Automaton& a, const ojson& s, const std::string& where);
  void array_body(Automaton& a, const ojson& s, const std::string& where);
  int32_t ws(Automaton& a, int32_t from);
  int32_t ws_rule();
  int32_t extra_key_rule(const std::vector<std::string>& declared);
  // The characters of the strings `s` allows, and its length bounds (-1: none).
  Automaton string_chars(const ojson& s, const std::string& where, int32_t& min, int32_t& max, bool& free);
  Automaton without_forbidden(Automaton chars, const std::vector<std::string>& extra);
  std::vector<ojson> enum_values(const ojson& s, const std::string& where);
  ojson merge(ojson a, const ojson& b, const std::string& where);
  const ojson& lookup(const std::string& ref, const std::string& where);

  GrammarBuilder& g_;
  const ojson& doc_;
  JsonOptions opts_;
  std::map<std::string, int32_t> memo_;
  int32_t ws_rule_ = -1;
  int depth_ = 0;
};

// The JSON-pointer-escaped form of a key ("~" -> "~0", "/" -> "~1").
std::string pointer_escape(std::string_view key);

}  // namespace hs::grammar
