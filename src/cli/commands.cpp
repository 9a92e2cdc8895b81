#include "cli/commands.h"

namespace hs::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"inspect", "show a model's config, layer schedule, tensors, types and bytes", cmd_inspect},
      {"logits", "run a model over token ids and write the logits of every position (.npy)", cmd_logits},
      // @@COMMAND-TABLE@@ (helpers: add `{"name", "summary", cmd_x},` above this line)
  };
  return kCommands;
}

}  // namespace hs::cli
