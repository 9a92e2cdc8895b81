// Anthropic Messages request -> OpenAI-shaped chat messages and tools (the encoder's input).
#include <cctype>

#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/validation.h"

namespace hs::server {

namespace {

// The text of a string or an array of text blocks (`what` names it in errors).
std::string text_of(const ojson& v, const std::string& what, const char* joiner) {
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_array()) bad_request("messages", what, " must be a string or an array of text blocks, got ", describe_type(v));
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    const ojson& b = v[i];
    const std::string where = cat(what, "[", i, "]");
    if (!b.is_object() || !b.contains("type") || b["type"] != "text")
      bad_request("messages", where, " must be a text block ({\"type\": \"text\", \"text\": ...})");
    const ojson* t = field(b, "text");
    if (!t || !t->is_string()) bad_request("messages", where, ".text must be a string");
    if (i) out += joiner;
    out += t->get<std::string>();
  }
  return out;
}

const ojson& block_field(const ojson& b, const char* key, const std::string& where, bool (ojson::*is)() const noexcept,
                         const char* type) {
  auto it = b.find(key);
  if (it == b.end() || !((*it).*is)()) bad_request("messages", where, ".", key, " must be ", type);
  return *it;
}

// fn(block, where, type) for each content block, once it is known to be an object with a type.
template <typename Fn>
void for_each_block(const ojson& content, const std::string& where, Fn&& fn) {
  for (size_t i = 0; i < content.size(); ++i) {
    const ojson& b = content[i];
    const std::string bw = cat(where, ".content[", i, "]");
    if (!b.is_object()) bad_request("messages", bw, " must be a content block object, got ", describe_type(b));
    fn(b, bw, block_field(b, "type", bw, &ojson::is_string, "a string").get<std::string>());
  }
}

void convert_user(const ojson& content, const std::string& where, ojson& out) {
  if (content.is_string()) {
    out.push_back({{"role", "user"}, {"content", content}});
    return;
  }
  ojson parts = ojson::array();  // a run of text blocks becomes one user message
  auto flush = [&] {
    if (!parts.empty()) out.push_back({{"role", "user"}, {"content", std::exchange(parts, ojson::array())}});
  };
  for_each_block(content, where, [&](const ojson& b, const std::string& bw, const std::string& type) {
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", block_field(b, "text", bw, &ojson::is_string, "a string")}});
    } else if (type == "tool_result") {
      flush();
      const ojson& id = block_field(b, "tool_use_id", bw, &ojson::is_string, "a string");
      const ojson* c = field(b, "content");
      std::string text = c ? text_of(*c, bw + ".content", "\n\n") : std::string();
      if (auto err = opt_bool(b, "is_error"); err && *err) text = "Error: " + text;
      out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", std::move(text)}});
    } else {
      bad_request("messages", bw, ": content blocks of type '", type, "' are not supported in user messages");
    }
  });
  flush();
}

void convert_assistant(const ojson& content, const std::string& where, bool last, ojson& out) {
  ojson msg = {{"role", "assistant"}};
  std::string text, reasoning;
  ojson calls = ojson::array();
  if (content.is_string()) {
    text = content.get<std::string>();
  } else {
    for_each_block(content, where, [&](const ojson& b, const std::string& bw, const std::string& type) {
      if (type == "text") {
        text += block_field(b, "text", bw, &ojson::is_string, "a string").get<std::string>();
      } else if (type == "thinking") {
        reasoning += block_field(b, "thinking", bw, &ojson::is_string, "a string").get<std::string>();
      } else if (type == "tool_use") {
        const ojson& id = block_field(b, "id", bw, &ojson::is_string, "a string");
        const ojson& name = block_field(b, "name", bw, &ojson::is_string, "a string");
        const ojson& input = block_field(b, "input", bw, &ojson::is_object, "an object");
        calls.push_back({{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", input}}}});
      } else if (type != "redacted_thinking") {
        bad_request("messages", bw, ": content blocks of type '", type, "' are not supported in assistant messages");
      }
    });
  }
  msg["content"] = text;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (last) msg["wo_eos"] = true;  // a final assistant message is a prefill: continue it
  out.push_back(std::move(msg));
}

ojson convert_tools(const ojson* tools) {
  if (!tools) return nullptr;
  if (!tools->is_array()) bad_request("tools", "'tools' must be an array, got ", describe_type(*tools));
  ojson out = ojson::array();
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = (*tools)[i];
    const std::string where = cat("tools[", i, "]");
    if (!t.is_object()) bad_request("tools", where, " must be an object, got ", describe_type(t));
    if (auto type = opt_string(t, "type"); type && *type != "custom")
      bad_request("tools", where, ": tools of type '", *type, "' are not supported (only client tools)");
    auto name = opt_string(t, "name");
    if (!name || name->empty()) bad_request("tools", where, ".name must be a non-empty string");
    for (char c : *name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        bad_request("tools", where, ".name '", *name, "' may hold only letters, digits, '_', '-' and '.'");
    for (const auto& prev : out)
      if (prev["function"]["name"] == *name) bad_request("tools", where, ": the tool name '", *name, "' is declared twice");
    const ojson* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) bad_request("tools", where, ".input_schema must be a JSON Schema object");
    ojson fn = {{"name", *name}};
    if (auto d = opt_string(t, "description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// Anthropic tool_choice -> the OpenAI form check_tool_choice() takes.
ojson convert_tool_choice(const ojson* tc) {
  if (!tc) return nullptr;
  if (!tc->is_object()) bad_request("tool_choice", "'tool_choice' must be an object, got ", describe_type(*tc));
  opt_bool(*tc, "disable_parallel_tool_use");
  const auto type = opt_string(*tc, "type");
  if (type == "auto") return "auto";
  if (type == "any") return "required";
  if (type == "none") return "none";
  if (type == "tool") {
    auto name = opt_string(*tc, "name");
    if (!name) bad_request("tool_choice", "tool_choice of type \"tool\" needs a 'name'");
    return {{"type", "function"}, {"function", {{"name", *name}}}};
  }
  bad_request("tool_choice", "'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\"");
}

}  // namespace

ChatInput anthropic_chat_input(const Service& svc, const ojson& req) {
  svc.check_model(opt_string(req, "model"));
  const ojson* messages = &required_list(req, "messages");
  ChatInput in;
  in.variant = svc.config().variant;
  in.messages = ojson::array();
  if (const ojson* sys = field(req, "system")) in.messages.push_back({{"role", "system"}, {"content", text_of(*sys, "system", "\n\n")}});
  for (size_t i = 0; i < messages->size(); ++i) {
    const ojson& m = (*messages)[i];
    const std::string where = cat("messages[", i, "]");
    if (!m.is_object()) bad_request("messages", where, " must be an object, got ", describe_type(m));
    const auto role = opt_string(m, "role");
    const ojson* content = field(m, "content");
    if (!content || !(content->is_string() || content->is_array()))
      bad_request("messages", where, ".content must be a string or an array of content blocks");
    if (role == "user") convert_user(*content, where, in.messages);
    else if (role == "assistant") convert_assistant(*content, where, i + 1 == messages->size(), in.messages);
    else bad_request("messages", where, ".role must be \"user\" or \"assistant\"");
  }
  in.tools = convert_tools(field(req, "tools"));
  const ojson choice = convert_tool_choice(field(req, "tool_choice"));
  if (!check_tool_choice(choice.is_null() ? nullptr : &choice, in.tools)) in.tools = nullptr;
  if (in.tools.is_array() && in.tools.empty()) in.tools = nullptr;
  in.thinking = svc.config().default_thinking;
  if (const ojson* th = opt_object(req, "thinking")) {
    const auto type = opt_string(*th, "type");
    if (type == "enabled" || type == "adaptive") {
      in.thinking = true;
      opt_int(*th, "budget_tokens", 1, INT32_MAX);
    } else if (type == "disabled") {
      in.thinking = false;
    } else {
      bad_request("thinking", "'thinking.type' must be \"enabled\" or \"disabled\"");
    }
  }
  return in;
}

}  // namespace hs::server
