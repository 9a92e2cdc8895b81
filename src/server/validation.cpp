#include "server/validation.h"

#include <cmath>
#include <string_view>

#include "server/api_error.h"

namespace hs::server {

std::string describe_type(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    case ojson::value_t::number_integer:
    case ojson::value_t::number_unsigned: return "an integer";
    case ojson::value_t::number_float: return "a number";
    default: return v.type_name();
  }
}

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> opt_number(const ojson& obj, const char* key, double lo, double hi) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad_request(key, "'", key, "' must be a number, got ", describe_type(*v));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) bad_request(key, "'", key, "' must be between ", lo, " and ", hi, ", got ", d);
  return d;
}

std::optional<int64_t> opt_int(const ojson& obj, const char* key, int64_t lo, int64_t hi) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  int64_t n = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad_request(key, "'", key, "' is out of range");
    n = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) && std::trunc(v->get<double>()) == v->get<double>() &&
             std::fabs(v->get<double>()) < 9e15) {
    n = static_cast<int64_t>(v->get<double>());
  } else {
    bad_request(key, "'", key, "' must be an integer, got ", describe_type(*v));
  }
  if (n < lo) bad_request(key, "'", key, "' must be at least ", lo, ", got ", n);
  if (n > hi) bad_request(key, "'", key, "' must be at most ", hi, ", got ", n);
  return n;
}

std::optional<bool> opt_bool(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad_request(key, "'", key, "' must be a boolean, got ", describe_type(*v));
  return v->get<bool>();
}

std::optional<std::string> opt_string(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad_request(key, "'", key, "' must be a string, got ", describe_type(*v));
  return v->get<std::string>();
}

const ojson* opt_object(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (v && !v->is_object()) bad_request(key, "'", key, "' must be an object, got ", describe_type(*v));
  return v;
}

const ojson* opt_array(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (v && !v->is_array()) bad_request(key, "'", key, "' must be an array, got ", describe_type(*v));
  return v;
}

const ojson& required_list(const ojson& obj, const char* key) {
  const ojson* v = opt_array(obj, key);
  if (!v) bad_request(key, "'", key, "' is required");
  if (v->empty()) bad_request(key, "'", key, "' must not be empty");
  return *v;
}

std::vector<std::string> opt_stop_list(const ojson& obj, const char* key, size_t max_count, bool allow_string) {
  const ojson* v = field(obj, key);
  std::vector<std::string> out;
  if (!v) return out;
  if (v->is_string() && allow_string) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const auto& s : *v) {
      if (!s.is_string()) bad_request(key, "'", key, "' must hold only strings, got ", describe_type(s));
      out.push_back(s.get<std::string>());
    }
  } else {
    bad_request(key, "'", key, "' must be ", allow_string ? "a string or " : "", "an array of strings, got ",
                describe_type(*v));
  }
  if (out.size() > max_count) bad_request(key, "'", key, "' may hold at most ", max_count, " sequences, got ", out.size());
  for (const auto& s : out)
    if (s.empty()) bad_request(key, "'", key, "' must not contain an empty string");
  return out;
}

void check_field_types(const ojson& obj, std::initializer_list<FieldType> fields) {
  for (const auto& f : fields) {
    const ojson* v = field(obj, f.name);
    if (!v) continue;
    const std::string_view t = f.type;
    const bool ok = (t == "string" && v->is_string()) || (t == "boolean" && v->is_boolean()) ||
                    (t == "object" && v->is_object()) || (t == "array" && v->is_array()) ||
                    (t == "number" && v->is_number()) || (t == "integer" && v->is_number_integer());
    if (!ok) bad_request(f.name, "'", f.name, "' must be ", t == "integer" || t == "array" || t == "object" ? "an " : "a ",
                         t, ", got ", describe_type(*v));
  }
}

}  // namespace hs::server
