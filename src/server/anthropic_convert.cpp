// Anthropic Messages request -> OpenAI-shaped chat messages and tools (the encoder's input).
#include <cctype>
#include <unordered_set>

#include "server/anthropic_api.h"
#include "server/api_error.h"
#include "server/thinking_signature.h"
#include "server/validation.h"
#include "util/log.h"

namespace hs::server {

namespace {

bool is_media(const std::string& type) { return type == "image" || type == "document"; }

// The text of a string or an array of text blocks (`what` names it in errors); with `media`,
// image and document blocks become placeholders.
std::string text_of(const ojson& v, const std::string& what, const char* joiner, bool media = false) {
  return content_parts_text(v, "messages", what, joiner, [&](const ojson& b, const std::string& where, const std::string& type) {
    if (media && is_media(type)) return media_placeholder(type, where);
    if (type != "text") bad_request("messages", where, " must be a text block ({\"type\": \"text\", \"text\": ...})");
    const ojson* t = field(b, "text");
    if (!t || !t->is_string()) bad_request("messages", where, ".text must be a string");
    return t->get<std::string>();
  });
}

// Claude Code (>= 2.1.36) puts "x-anthropic-billing-header: cc_version=...; cch=<nonce>;" first
// in `system`, with a nonce that changes on every request: left in, no two requests would share
// a prompt prefix and the prefix cache would never hit. It carries nothing for the model, so a
// text block (or, in a string, a first line) that starts with it is dropped.
ojson without_billing_header(const ojson& sys) {
  static constexpr std::string_view kHeader = "x-anthropic-billing-header:";
  auto billing = [](const std::string& t) { return t.compare(0, kHeader.size(), kHeader) == 0; };
  if (sys.is_string()) {
    const std::string t = sys.get<std::string>();
    if (!billing(t)) return sys;
    const size_t nl = t.find('\n');
    return nl == std::string::npos ? ojson(std::string()) : ojson(t.substr(nl + 1));
  }
  if (!sys.is_array()) return sys;
  ojson out = ojson::array();
  for (const ojson& b : sys) {
    const ojson* t = b.is_object() ? field(b, "text") : nullptr;
    if (t && t->is_string() && billing(t->get<std::string>())) continue;
    out.push_back(b);
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
    } else if (is_media(type)) {
      parts.push_back({{"type", "text"}, {"text", media_placeholder(type, bw)}});
    } else if (type == "tool_result") {
      flush();
      const ojson& id = block_field(b, "tool_use_id", bw, &ojson::is_string, "a string");
      const ojson* c = field(b, "content");
      std::string text = c ? text_of(*c, bw + ".content", "\n\n", true) : std::string();
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
        std::string text = block_field(b, "thinking", bw, &ojson::is_string, "a string").get<std::string>();
        if (const ojson* sig = field(b, "signature"); text.empty() && sig && sig->is_string())
          text = reasoning_from_signature(sig->get<std::string>()).value_or("");  // sent with display "omitted"
        reasoning += text;
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
  ojson out = ojson::array();
  std::unordered_set<std::string> names;  // a set: thousands of tools stay linear
  for_each_tool(*tools, [&](const ojson& t, const std::string& where) {
    if (auto type = opt_string(t, "type"); type && *type != "custom")
      bad_request("tools", where, ": tools of type '", *type, "' are not supported (only client tools)");
    auto name = opt_string(t, "name");
    if (!name || name->empty()) bad_request("tools", where, ".name must be a non-empty string");
    for (char c : *name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.'))
        bad_request("tools", where, ".name '", *name, "' may hold only letters, digits, '_', '-' and '.'");
    if (!names.insert(*name).second) bad_request("tools", where, ": the tool name '", *name, "' is declared twice");
    const ojson* schema = field(t, "input_schema");
    if (!schema || !schema->is_object()) bad_request("tools", where, ".input_schema must be a JSON Schema object");
    ojson fn = {{"name", *name}};
    if (auto d = opt_string(t, "description")) fn["description"] = *d;
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  });
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

OutputFormat anthropic_format(const ojson& req) {
  const ojson* oc = opt_object(req, "output_config");
  const ojson* ga = oc ? field(*oc, "format") : nullptr;
  const ojson* beta = field(req, "output_format");
  if (ga && beta) bad_request("output_format", "give 'output_config.format' or the beta 'output_format', not both");
  return ga ? anthropic_output_format(ga, "output_config.format") : anthropic_output_format(beta, "output_format");
}

}  // namespace

OutputFormat anthropic_output_spec(const ojson& req, const ChatInput& in) {
  const ojson choice = convert_tool_choice(field(req, "tool_choice"));
  if (auto forced = forced_tool_name(choice.is_null() ? nullptr : &choice, in.tools)) return forced_tool_call(in.tools, *forced);
  return anthropic_format(req);
}

ChatInput anthropic_chat_input(const Service& svc, const ojson& req) {
  svc.check_model(opt_string(req, "model"));
  const ojson* messages = &required_list(req, "messages");
  ChatInput in;
  in.variant = svc.config().variant;
  in.messages = ojson::array();
  if (const ojson* sys = field(req, "system"))
    in.messages.push_back({{"role", "system"}, {"content", text_of(without_billing_header(*sys), "system", "\n\n")}});
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
    else if (role == "system") in.messages.push_back({{"role", "system"}, {"content", text_of(*content, where + ".content", "\n\n")}});
    else bad_request("messages", where, ".role must be \"user\", \"assistant\" or \"system\"");
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
      if (auto d = opt_string(*th, "display"); d && *d != "summarized" && *d != "omitted")
        bad_request("thinking", "'thinking.display' must be \"summarized\" or \"omitted\", got \"", *d, "\"");
    } else if (type == "disabled") {
      in.thinking = false;
    } else {
      bad_request("thinking", "'thinking.type' must be \"enabled\", \"adaptive\" or \"disabled\"");
    }
  }
  if (const ojson* oc = opt_object(req, "output_config")) {
    if (auto effort = opt_string(*oc, "effort")) {
      if (*effort != "low" && *effort != "medium" && *effort != "high" && *effort != "xhigh" && *effort != "max")
        bad_request("output_config", "'output_config.effort' must be \"low\", \"medium\", \"high\", \"xhigh\" or \"max\", got \"",
                    *effort, "\"");
      // The checkpoint's effort table (chat-format.md §4); a level it lacks keeps the default.
      if (auto m = map_reasoning_effort(*effort, in.variant)) in.effort = m->effort;
    }
  }
  in.response_format = prompt_response_format(anthropic_format(req));
  return in;
}

}  // namespace hs::server
