// hyperstream: DeepSeek-V4 inference engine. Dispatches to the subcommands of cli/commands.h.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "util/error.h"

namespace {

void print_usage() {
  std::printf(
      "hyperstream — DeepSeek-V4 inference engine\n\n"
      "usage: hyperstream <command> [options]\n"
      "       hyperstream <command> --help\n\ncommands:\n");
  for (const auto& c : hs::cli::commands()) std::printf("  %-18s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") ||
      !std::strcmp(argv[1], "help")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) {
    std::printf("hyperstream 0.1.0\n");
    return 0;
  }
  const std::string name = argv[1];
  for (const auto& c : hs::cli::commands()) {
    if (name != c.name) continue;
    hs::cli::Args args(argv + 2, argv + argc);
    try {
      return c.run(args);
    } catch (const hs::Error& e) {
      std::fprintf(stderr, "hyperstream %s: error: %s\n", c.name, e.what());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "hyperstream %s: internal error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "hyperstream: unknown command '%s' (see hyperstream --help)\n", name.c_str());
  return 2;
}
