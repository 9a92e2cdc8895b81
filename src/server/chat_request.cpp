#include "server/chat_request.h"

#include <cctype>
#include <unordered_set>

#include "server/api_error.h"
#include "server/validation.h"
#include "util/log.h"

namespace hs::server {

ChatPrompt render_chat_prompt(const ChatInput& in) {
  ChatOptions o;
  o.thinking_mode = in.thinking ? ThinkingMode::thinking : ThinkingMode::chat;
  o.reasoning_effort = in.thinking ? in.effort : std::nullopt;
  o.variant = in.variant;
  o.system_in_user_turn = true;  // the next turn must start with this prompt (prefix cache)
  ojson request = ojson::object();
  request["messages"] = in.messages;
  if (!in.tools.is_null()) request["tools"] = in.tools;
  if (!in.response_format.is_null()) request["response_format"] = in.response_format;
  try {
    return encode_request(request, o);
  } catch (const Error& e) {
    bad_request("messages", e.what());
  }
}

ChatPromptIds build_chat_prompt(const Tokenizer& tok, const ChatInput& in) {
  const ChatPrompt p = render_chat_prompt(in);
  // Only the template's structure becomes control tokens; the client's text never does.
  return {tok.encode_with_literals(p.text, p.literal), p.starts_in_reasoning};
}

std::string media_placeholder(const std::string& type, const std::string& where) {
  log_warn(where, ": a part of type '", type, "' was replaced by the text \"[Unsupported ", type,
           "]\" (the model reads text only)");
  return "[Unsupported " + type + "]";
}

void apply_reasoning_effort(const std::string& effort, ChatInput& in) {
  if (auto m = map_reasoning_effort(effort, in.variant)) {
    in.thinking = !m->chat_mode;
    in.effort = m->effort;
  } else {
    in.thinking = true;  // a level this checkpoint has no text for: thinking, default effort
  }
}

void apply_chat(GenerationSpec& spec, const ChatPromptIds& p, const ojson& tools, uint64_t id_seed) {
  spec.prompt = p.ids;
  spec.chat = true;
  spec.parser.start_in_reasoning = p.starts_in_reasoning;
  spec.parser.id_seed = id_seed;
  spec.parser.tools = tools;
}

ojson validate_openai_tools(const ojson* tools) {
  if (!tools) return nullptr;
  if (!tools->is_array()) bad_request("tools", "'tools' must be an array, got ", describe_type(*tools));
  if (tools->empty()) return nullptr;
  std::unordered_set<std::string> names;  // a set: thousands of tools stay linear
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string where = cat("tools[", i, "]");
    if (!t.is_object()) bad_request("tools", where, " must be an object, got ", describe_type(t));
    const ojson* type = field(t, "type");
    if (!type || !type->is_string() || *type != "function")
      bad_request("tools", where, ".type must be \"function\"");
    const ojson* fn = field(t, "function");
    if (!fn || !fn->is_object()) bad_request("tools", where, ".function must be an object");
    const ojson* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty())
      bad_request("tools", where, ".function.name must be a non-empty string");
    for (char c : name->get<std::string>())
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        bad_request("tools", where, ".function.name '", name->get<std::string>(),
                    "' may hold only letters, digits, '_', '-' and '.'");
    if (const ojson* d = field(*fn, "description"); d && !d->is_string())
      bad_request("tools", where, ".function.description must be a string");
    if (const ojson* params = field(*fn, "parameters"); params && !params->is_object())
      bad_request("tools", where, ".function.parameters must be a JSON Schema object, got ", describe_type(*params));
    if (!names.insert(name->get<std::string>()).second)
      bad_request("tools", where, ": the function name '", name->get<std::string>(), "' is declared twice");
  }
  return *tools;
}

bool check_tool_choice(const ojson* choice, const ojson& tools, const char* param) {
  if (!choice) return true;
  if (choice->is_string()) {
    const std::string c = choice->get<std::string>();
    if (c == "none") return false;
    if (c == "auto") return true;
    if (c == "required") {
      if (tools.is_null()) bad_request(param, "tool_choice \"required\" needs tools");
      return true;
    }
    bad_request(param, "'", param, "' must be \"none\", \"auto\", \"required\" or a function, got \"", c, "\"");
  }
  if (!choice->is_object()) bad_request(param, "'", param, "' must be a string or an object, got ", describe_type(*choice));
  const ojson* fn = field(*choice, "function");
  const ojson* name = fn && fn->is_object() ? field(*fn, "name") : nullptr;
  if (!name || !name->is_string()) bad_request(param, "'", param, "' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
  if (!tools.is_null())
    for (const auto& t : tools)
      if (t["function"]["name"] == *name) return true;
  bad_request(param, "tool_choice names the function '", name->get<std::string>(), "', which is not among the tools");
}

}  // namespace hs::server
