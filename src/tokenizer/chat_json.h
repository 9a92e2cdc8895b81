// JSON as DeepSeek's Python encoder writes it: json.dumps(v, ensure_ascii=False) with the
// default separators. The prompt embeds tool schemas and argument values in this form, so it
// must match byte for byte (nlohmann's dump() differs in separators and float formatting).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace hs {

// Key order matters (Python dicts keep insertion order), hence ordered_json throughout.
using ojson = nlohmann::ordered_json;

// json.dumps(v, ensure_ascii=False): ", " and ": " separators, non-ASCII raw, `/` unescaped,
// floats as Python repr. Invalid UTF-8 inside strings becomes U+FFFD.
std::string py_json_dumps(const ojson& v);
void py_json_dump_to(std::string& out, const ojson& v);
// Appends `s` as a quoted JSON string (the escapes of json.dumps).
void py_json_quote_to(std::string& out, std::string_view s);
// Python's repr(float): shortest round trip, "1.0", "1e-07", "1e+16", "NaN", "Infinity".
std::string py_float_repr(double d);

// Nesting depth of a value (a scalar is 1), computed without recursion. Requests are
// checked against kMaxJsonDepth before any recursive copy or dump can exhaust the stack.
size_t json_depth(const ojson& v);
inline constexpr size_t kMaxJsonDepth = 512;

// Python truthiness of a JSON value (null, false, 0, "", [], {} are false).
bool py_truthy(const ojson& v);

// Parses JSON; throws hs::Error naming `what` on malformed input.
ojson parse_json(std::string_view text, std::string_view what);

// Bytes at the end of `s` that start a UTF-8 sequence not yet complete (0..3): a streamed
// delta holds them back so that every emitted piece is whole characters.
size_t utf8_incomplete_tail(std::string_view s);

}  // namespace hs
