#include "grammar/formats.h"

#include <string>

#include "grammar/regex.h"

namespace hs::grammar {

namespace {

constexpr const char* kDate =
    "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))";
constexpr const char* kTime = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
constexpr const char* kLabel = "[a-z0-9](?:[a-z0-9-]{0,20}[a-z0-9])?";

std::string regex_of(std::string_view format) {
  const std::string label = kLabel;
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return std::string(kDate) + "T" + kTime;
  if (format == "uuid") return "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
  if (format == "email")
    return "[a-z0-9]{1,20}(?:[._+-][a-z0-9]{1,20}){0,3}@" + label + "(?:\\." + label + "){0,2}\\.[a-z]{2,8}";
  if (format == "hostname") return label + "(?:\\." + label + "){0,3}";
  if (format == "ipv4") return "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (format == "ipv6") return "[0-9a-f]{1,4}(?::[0-9a-f]{1,4}){7}";
  if (format == "uri" || format == "url")
    return "https?://" + label + "(?:\\." + label + "){0,3}(?:/[a-zA-Z0-9._~-]{0,30}){0,6}";
  return {};
}

}  // namespace

std::optional<Automaton> format_automaton(std::string_view format) {
  const std::string re = regex_of(format);
  if (re.empty()) return std::nullopt;
  return compile_pattern("^(?:" + re + ")$");
}

}  // namespace hs::grammar
