#include "tokenizer/dsml.h"

#include "tokenizer/chat_tokens.h"

namespace hs {

ojson dsml_arguments_object(const ojson& arguments) {
  if (arguments.is_null()) return ojson::object();
  if (arguments.is_object()) return arguments;
  const std::string raw = arguments.is_string() ? arguments.get<std::string>() : py_json_dumps(arguments);
  // DeepSeek's encoder: json.loads, and on failure {"arguments": raw}. A JSON value that is
  // not an object (where Python would crash on .items()) takes the same fallback.
  ojson parsed = ojson::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object()) return parsed;
  ojson wrapped = ojson::object();
  wrapped["arguments"] = raw;
  return wrapped;
}

namespace {

// Appends request text to `out`, recording its span when asked.
void append_literal(std::string& out, std::string_view s, std::vector<TextSpan>* literal) {
  if (literal && !s.empty()) literal->push_back({out.size(), out.size() + s.size()});
  out += s;
}

}  // namespace

std::string render_dsml_parameters(const ojson& arguments, std::vector<TextSpan>* literal) {
  std::string out;
  bool first = true;
  for (const auto& [key, value] : arguments.items()) {
    if (!first) out += '\n';
    first = false;
    const bool is_str = value.is_string();
    out += "<";
    out += ds4::kDsml;
    out += "parameter name=\"";
    append_literal(out, key, literal);
    out += std::string("\" string=\"") + (is_str ? "true" : "false") + "\">";
    if (is_str) append_literal(out, value.get_ref<const std::string&>(), literal);
    else append_literal(out, py_json_dumps(value), literal);
    out += ds4::kParamClose;
    out += '>';
  }
  return out;
}

std::string render_dsml_block(const std::vector<DsmlCall>& calls, std::vector<TextSpan>* literal) {
  if (calls.empty()) return {};
  std::string out = "\n\n";
  out += ds4::kBlockOpen;
  out += '\n';
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) out += '\n';
    out += ds4::kInvokeOpen;
    out += " name=\"";
    append_literal(out, calls[i].name, literal);
    out += "\">\n";
    std::vector<TextSpan> spans;
    const size_t base = out.size();
    out += render_dsml_parameters(calls[i].arguments, literal ? &spans : nullptr);
    if (literal)
      for (const TextSpan& s : spans) literal->push_back({base + s.begin, base + s.end});
    out += '\n';
    out += ds4::kInvokeClose;
  }
  out += '\n';
  out += ds4::kBlockClose;
  return out;
}

std::string dsml_arguments_json(const std::vector<DsmlParam>& params) {
  std::string out = "{";
  for (size_t i = 0; i < params.size(); ++i) {
    if (i) out += ", ";
    py_json_quote_to(out, params[i].key);
    out += ": ";
    if (params[i].is_string) py_json_quote_to(out, params[i].value);
    else out += params[i].value;
  }
  out += '}';
  return out;
}

std::string make_tool_call_id(uint64_t seed, uint64_t index) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  // splitmix64 over (seed, index): well mixed, no state outside this call.
  uint64_t x = seed ^ (index * 0x9E3779B97F4A7C15ull);
  auto next = [&x]() {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::string id = "call_";
  for (int block = 0; block < 2; ++block) {
    uint64_t r = next();
    for (int k = 0; k < 12; ++k) {  // 12 * log2(62) < 64 bits
      id += kAlphabet[r % 62];
      r /= 62;
    }
  }
  return id;
}

}  // namespace hs
