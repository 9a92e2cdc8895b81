// `hyperstream render` (request JSON -> DeepSeek-V4 prompt) and `hyperstream
// parse-completion` (model output -> reasoning, content, tool calls).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "tokenizer/chat.h"
#include "tokenizer/dsml_parser.h"
#include "util/error.h"

namespace hs::cli {
namespace {

std::string read_input(const std::string& path) {
  if (path == "-") return std::string(std::istreambuf_iterator<char>(std::cin), {});
  std::ifstream f(path, std::ios::binary);
  HS_CHECK(f, "cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void write_stdout(const std::string& s) {
  HS_CHECK(std::fwrite(s.data(), 1, s.size(), stdout) == s.size() && std::fflush(stdout) == 0,
           "cannot write to stdout");
}

}  // namespace

int cmd_render(const Args& args) {
  const std::vector<OptionSpec> specs = {
      {"in", true, "request JSON: {\"messages\": [...], \"tools\": [...]} or a message array ('-': stdin)", "FILE"},
      {"thinking-mode", true, "thinking (default) or chat", "MODE"},
      {"reasoning-effort", true, "v4: high|max; v4-0731: low|high|max; also xhigh (=max), none (=chat mode)", "E"},
      {"keep-thinking", false, "keep the reasoning of earlier turns (drop_thinking=false)"},
      {"variant", true, "v4 (default) or v4-0731 (V4-Flash-0731 effort table)", "V"},
      {"default-system", true, "system message to insert when the request starts without one", "TEXT"},
      {"no-bos", false, "do not write the BOS text"},
  };
  ParsedArgs pa("render", args, specs);
  if (pa.help()) {
    print_help("render", "--in REQUEST.json [options]",
               "Print the DeepSeek-V4 prompt of a chat request to stdout, byte for byte (no newline added).",
               specs);
    return 0;
  }
  auto in = pa.get("in");
  HS_CHECK(in, "render: --in REQUEST.json is required");
  ChatOptions o;
  o.thinking_mode = parse_thinking_mode(pa.get_or("thinking-mode", "thinking"));
  o.variant = parse_chat_variant(pa.get_or("variant", "v4"));
  if (auto e = pa.get("reasoning-effort")) {
    auto s = map_reasoning_effort(*e, o.variant);
    HS_CHECK(s, "--reasoning-effort: '", *e, "' is not a level of variant ", pa.get_or("variant", "v4"));
    if (s->chat_mode) o.thinking_mode = ThinkingMode::chat;
    o.reasoning_effort = s->effort;
  }
  o.drop_thinking = !pa.has("keep-thinking");
  o.add_bos = !pa.has("no-bos");
  o.default_system = pa.get("default-system");
  const ojson request = parse_json(read_input(*in), *in);
  write_stdout(encode_request(request, o).text);
  return 0;
}

int cmd_parse_completion(const Args& args) {
  const std::vector<OptionSpec> specs = {
      {"in", true, "the model's output after the generation prompt, EOS included ('-': stdin)", "FILE"},
      {"thinking-mode", true, "thinking (output starts as reasoning) or chat", "MODE"},
      {"tools", true, "request JSON whose \"tools\" are checked against (unknown tool/parameter)", "FILE"},
      {"seed", true, "seed of the tool-call ids (default 0)", "N"},
  };
  ParsedArgs pa("parse-completion", args, specs);
  if (pa.help()) {
    print_help("parse-completion", "--thinking-mode thinking|chat --in FILE",
               "Split a DeepSeek-V4 completion into reasoning, content and DSML tool calls; print them as JSON.",
               specs);
    return 0;
  }
  auto in = pa.get("in");
  HS_CHECK(in, "parse-completion: --in FILE is required");
  auto mode = pa.get("thinking-mode");
  HS_CHECK(mode, "parse-completion: --thinking-mode thinking|chat is required");
  DsmlParserOptions o;
  o.start_in_reasoning = parse_thinking_mode(*mode) == ThinkingMode::thinking;
  o.id_seed = static_cast<uint64_t>(pa.get_int("seed", 0));
  if (auto t = pa.get("tools")) {
    const ojson req = parse_json(read_input(*t), *t);
    HS_CHECK(req.is_object() && req.contains("tools"), "--tools: '", *t, "' has no \"tools\" field");
    o.tools = req["tools"];
  }
  const ParsedCompletion r = parse_completion(read_input(*in), o);
  ojson out = ojson::object();
  out["reasoning_content"] = r.reasoning_content;
  out["content"] = r.content;
  out["tool_calls"] = ojson::array();
  for (const auto& c : r.tool_calls) out["tool_calls"].push_back(tool_call_to_openai(c));
  write_stdout(py_json_dumps(out) + "\n");
  return 0;
}

}  // namespace hs::cli
