// Typed access to the fields of a request object. An absent field or JSON null reads as
// "not given"; a wrong type or an out-of-range value is a 400 ApiError naming the field.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/chat_json.h"

namespace hs::server {

// The field's value, or nullptr when absent or null.
const ojson* field(const ojson& obj, const char* key);

std::optional<double> opt_number(const ojson& obj, const char* key, double lo, double hi);
// Integers (a float with an integral value is accepted, as Python clients may send 5.0).
std::optional<int64_t> opt_int(const ojson& obj, const char* key, int64_t lo, int64_t hi);
std::optional<bool> opt_bool(const ojson& obj, const char* key);
std::optional<std::string> opt_string(const ojson& obj, const char* key);
const ojson* opt_object(const ojson& obj, const char* key);
const ojson* opt_array(const ojson& obj, const char* key);
// A required non-empty array ("'messages' is required" / "must not be empty").
const ojson& required_list(const ojson& obj, const char* key);

// `stop` / `stop_sequences`: a string or an array of at most `max_count` non-empty strings
// (`allow_string`: the single-string form is accepted).
std::vector<std::string> opt_stop_list(const ojson& obj, const char* key, size_t max_count, bool allow_string);

// Fields this server accepts but ignores must still have their documented type. Each entry is
// {name, type} with type one of "string", "boolean", "object", "array", "number", "integer".
struct FieldType {
  const char* name;
  const char* type;
};
void check_field_types(const ojson& obj, std::initializer_list<FieldType> fields);

// A JSON value's type for messages ("a string", "an array", ...).
std::string describe_type(const ojson& v);

}  // namespace hs::server
