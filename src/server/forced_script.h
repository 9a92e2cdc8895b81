// Test-only (serve --test-force-script FILE): the forced output of each request chosen by what
// its prompt's last user turn holds, so that an agent CLI driven through the random built-in
// model can run a scripted task (call a tool first, answer once the tool's result is back).
// FILE is a JSON array of {"when": TEXT (optional), "output": TEXT, "hold_ms": N (optional)};
// the first rule whose `when` occurs in the decoded text after the prompt's last "<｜User｜>"
// wins (no `when`: any); `hold_ms` holds its prefill back that long (GenerationSpec::
// hold_prefill, for keep-alive tests). A request no rule matches is sampled as usual.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hs::server {

struct ForcedRule {
  std::optional<std::string> when;
  std::string output;
  int64_t hold_ms = 0;
};

// hs::Error naming the file and the entry when it cannot be read or is malformed.
std::vector<ForcedRule> load_forced_script(const std::string& path);
// The rule for a prompt's decoded text; nullptr when none matches.
const ForcedRule* match_forced_rule(const std::vector<ForcedRule>& rules, std::string_view prompt_text);

}  // namespace hs::server
