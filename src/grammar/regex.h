// JSON Schema `pattern` (ECMA-262 regular expressions, as validators run them with the u
// flag) compiled to a deterministic automaton over code points that accepts exactly the strings
// the pattern matches anywhere (RegExp.test semantics: unanchored unless ^/$ say otherwise).
//
// Supported: literals, escapes (\d \D \w \W \s \S \n \r \t \v \f \0 \xHH \uHHHH \u{H..} \cX,
// identity escapes), `.`, classes with ranges and negation, groups ( ), (?: ), (?<name> ),
// alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms are the same language), and ^ $
// anywhere. Refused with an error naming the construct: lookaround, backreferences, word
// boundaries \b \B, Unicode property escapes \p{..}.
#pragma once
#include <string_view>

#include "grammar/automaton.h"

namespace hs::grammar {

// Throws SchemaError (grammar/schema_error.h) naming the unsupported construct or the syntax
// error and its position.
Automaton compile_pattern(std::string_view pattern);

// UTF-8 -> code points; throws hs::Error on invalid UTF-8.
std::u32string utf8_to_codepoints(std::string_view s);

}  // namespace hs::grammar
