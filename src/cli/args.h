// A small option parser shared by the subcommands: --key value, --key=value, --flag,
// and positionals. Unknown options are an error naming the option and the command.
#pragma once
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace hs::cli {

struct OptionSpec {
  std::string name;   // without the leading dashes
  bool takes_value;   // false: a flag
  std::string help;   // shown by --help
  std::string value_name = "VALUE";
};

class ParsedArgs {
 public:
  // Throws hs::Error on an unknown option or a missing value. `help` is set when
  // --help/-h was given (the caller prints usage and exits 0).
  ParsedArgs(const std::string& command, const Args& args, const std::vector<OptionSpec>& specs);

  bool help() const { return help_; }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;  // the last one given
  std::vector<std::string> get_all(const std::string& name) const;  // every one given, in order
  std::string get_or(const std::string& name, const std::string& dflt) const;
  // Parses an integer option, with an error naming the option on junk.
  long long get_int(const std::string& name, long long dflt) const;
  double get_double(const std::string& name, double dflt) const;
  // An on|off switch, with an error naming the option on anything else.
  bool get_on_off(const std::string& name, bool dflt) const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::string command_;
  bool help_ = false;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> all_;
  std::vector<std::string> positionals_;
};

// Prints "usage: hyperstream <command> <synopsis>" and the option table.
void print_help(const std::string& command, const std::string& synopsis, const std::string& description,
                const std::vector<OptionSpec>& specs);

long long parse_int(const std::string& what, const std::string& s);
// "a,b,c" -> {"a","b","c"}
std::vector<std::string> split_commas(const std::string& s);
// "22,21" -> {22, 21}; errors name the option.
std::vector<int> parse_int_list(const std::string& what, const std::string& s);

double parse_double(const std::string& what, const std::string& s);

}  // namespace hs::cli
