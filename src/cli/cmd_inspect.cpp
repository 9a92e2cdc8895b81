#include "cli/commands.h"
#include "util/error.h"
namespace hs::cli {
int cmd_inspect(const Args&) { fail("inspect: under construction"); }
int cmd_logits(const Args&) { fail("logits: under construction"); }
}  // namespace hs::cli
