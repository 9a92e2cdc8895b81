#include "cli/args.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace hs::cli {

ParsedArgs::ParsedArgs(const std::string& command, const Args& args, const std::vector<OptionSpec>& specs)
    : command_(command) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--help" || a == "-h") {
      help_ = true;
      continue;
    }
    if (a.size() > 2 && a[0] == '-' && a[1] == '-') {
      std::string key = a.substr(2), value;
      bool inline_value = false;
      if (auto eq = key.find('='); eq != std::string::npos) {
        value = key.substr(eq + 1);
        key = key.substr(0, eq);
        inline_value = true;
      }
      const OptionSpec* spec = nullptr;
      for (const auto& s : specs)
        if (s.name == key) spec = &s;
      HS_CHECK(spec, "unknown option --", key, " for '", command, "' (see hyperstream ", command, " --help)");
      if (spec->takes_value) {
        if (!inline_value) {
          HS_CHECK(i + 1 < args.size(), "option --", key, " needs a value");
          value = args[++i];
        }
      } else {
        HS_CHECK(!inline_value, "option --", key, " takes no value");
        value = std::string(1, '1');  // (not = "1": GCC 12 -Wrestrict false positive)
      }
      values_[key] = value;
      all_[key].push_back(value);
    } else {
      positionals_.push_back(a);
    }
  }
}

std::optional<std::string> ParsedArgs::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> ParsedArgs::get_all(const std::string& name) const {
  auto it = all_.find(name);
  return it == all_.end() ? std::vector<std::string>{} : it->second;
}

std::string ParsedArgs::get_or(const std::string& name, const std::string& dflt) const {
  auto v = get(name);
  return v ? *v : dflt;
}

long long ParsedArgs::get_int(const std::string& name, long long dflt) const {
  auto v = get(name);
  return v ? parse_int("--" + name, *v) : dflt;
}

double ParsedArgs::get_double(const std::string& name, double dflt) const {
  auto v = get(name);
  return v ? parse_double("--" + name, *v) : dflt;
}

bool ParsedArgs::get_on_off(const std::string& name, bool dflt) const {
  auto v = get(name);
  if (!v) return dflt;
  HS_CHECK(*v == "on" || *v == "off", "--", name, ": expected on or off, got '", *v, "'");
  return *v == "on";
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string item;
  for (char c : s) {
    if (c == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  out.push_back(item);
  return out;
}

std::vector<int> parse_int_list(const std::string& what, const std::string& s) {
  std::vector<int> out;
  for (const auto& item : split_commas(s)) out.push_back(static_cast<int>(parse_int(what, item)));
  return out;
}

long long parse_int(const std::string& what, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  HS_CHECK(!s.empty() && end && *end == '\0' && errno == 0, what, ": expected an integer, got '", s, "'");
  return v;
}

double parse_double(const std::string& what, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  HS_CHECK(!s.empty() && end && *end == '\0' && errno == 0, what, ": expected a number, got '", s, "'");
  return v;
}

void print_help(const std::string& command, const std::string& synopsis, const std::string& description,
                const std::vector<OptionSpec>& specs) {
  std::printf("usage: hyperstream %s %s\n\n%s\n", command.c_str(), synopsis.c_str(), description.c_str());
  if (!specs.empty()) std::printf("\noptions:\n");
  for (const auto& s : specs) {
    std::string lhs = "--" + s.name + (s.takes_value ? " " + s.value_name : "");
    std::printf("  %-26s %s\n", lhs.c_str(), s.help.c_str());
  }
  std::printf("  %-26s %s\n", "--help", "show this help");
}

}  // namespace hs::cli
