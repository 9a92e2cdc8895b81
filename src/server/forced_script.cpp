#include "server/forced_script.h"

#include <fstream>
#include <sstream>

#include "tokenizer/chat_json.h"
#include "tokenizer/chat_tokens.h"
#include "util/error.h"

namespace hs::server {

std::vector<ForcedRule> load_forced_script(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  HS_CHECK(f, "--test-force-script: cannot read '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  const ojson j = parse_json(ss.str(), "--test-force-script " + path);
  HS_CHECK(j.is_array(), "--test-force-script ", path, ": expected a JSON array of {\"when\", \"output\"} rules");
  std::vector<ForcedRule> rules;
  for (size_t i = 0; i < j.size(); ++i) {
    const ojson& r = j[i];
    HS_CHECK(r.is_object() && r.contains("output") && r["output"].is_string(), "--test-force-script ", path, ": rule ", i,
             " needs a string \"output\"");
    ForcedRule rule;
    rule.output = r["output"].get<std::string>();
    if (r.contains("when")) {
      HS_CHECK(r["when"].is_string(), "--test-force-script ", path, ": rule ", i, ": \"when\" must be a string");
      rule.when = r["when"].get<std::string>();
    }
    if (r.contains("hold_ms")) {
      HS_CHECK(r["hold_ms"].is_number_unsigned() && r["hold_ms"].get<uint64_t>() <= 600000, "--test-force-script ", path,
               ": rule ", i, ": \"hold_ms\" must be an integer from 0 to 600000");
      rule.hold_ms = r["hold_ms"].get<int64_t>();
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

const ForcedRule* match_forced_rule(const std::vector<ForcedRule>& rules, std::string_view prompt_text) {
  const size_t at = prompt_text.rfind(ds4::kUser);
  const std::string_view turn = at == std::string_view::npos ? prompt_text : prompt_text.substr(at);
  for (const auto& r : rules)
    if (!r.when || turn.find(*r.when) != std::string_view::npos) return &r;
  return nullptr;
}

}  // namespace hs::server
