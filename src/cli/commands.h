// The subcommands of the `hyperstream` binary. Each lives in its own cmd_*.cpp and is
// registered in commands.cpp (one line each). A command returns the process exit code;
// hs::Error escaping a command becomes a one-line message and exit code 1.
#pragma once
#include <string>
#include <vector>

namespace hs::cli {

using Args = std::vector<std::string>;  // argv after the subcommand name

struct Command {
  const char* name;
  const char* summary;  // one line for `hyperstream --help`
  int (*run)(const Args& args);
};

const std::vector<Command>& commands();

// --- registered commands (keep in the order of commands.cpp)
int cmd_inspect(const Args& args);
int cmd_logits(const Args& args);
int cmd_tokenize(const Args& args);
int cmd_detokenize(const Args& args);
int cmd_render(const Args& args);  int cmd_parse_completion(const Args& args);
int cmd_convert(const Args& args);
int cmd_synth(const Args& args);
int cmd_serve(const Args& args);
int cmd_run(const Args& args);
int cmd_bench(const Args& args);
// @@COMMAND-DECLARATIONS@@ (helpers: add `int cmd_x(const Args&);` above this line)

}  // namespace hs::cli
