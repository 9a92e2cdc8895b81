// Request validation and the public entry points of the chat encoder. The rendering rules
// themselves (DeepSeek's encoding_dsv4.py) are in chat_render.cpp.
#include "tokenizer/chat.h"

#include "tokenizer/chat_messages.h"
#include "tokenizer/chat_tokens.h"
#include "util/error.h"

namespace hs {
namespace chat_detail {
namespace {

const char* type_name(const ojson& v) { return v.type_name(); }

// Text of a `content` field: a string, null/absent (""), or OpenAI content parts whose text
// parts are joined with "\n\n" and other parts become "[Unsupported <type>]" (DeepSeek's
// rule for tool results, applied to every role).
std::string content_text(const ojson& m, const std::string& where) {
  auto it = m.find("content");
  if (it == m.end() || it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  HS_CHECK(it->is_array(), where, ".content: expected a string, an array of parts or null, got ",
           type_name(*it));
  std::string out;
  for (size_t k = 0; k < it->size(); ++k) {
    const ojson& part = (*it)[k];
    const std::string pw = cat(where, ".content[", k, "]");
    HS_CHECK(part.is_object(), pw, ": expected a content part object, got ", type_name(part));
    auto ty = part.find("type");
    HS_CHECK(ty != part.end() && ty->is_string(), pw, ": missing string field 'type'");
    if (k) out += "\n\n";
    if (*ty == "text") {
      auto tx = part.find("text");
      HS_CHECK(tx != part.end() && tx->is_string(), pw, ": text part without a string 'text'");
      out += tx->get<std::string>();
    } else {
      out += "[Unsupported " + ty->get<std::string>() + "]";
    }
  }
  return out;
}

// An optional string field: absent or null gives "".
std::string opt_string(const ojson& m, const char* key, const std::string& where) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return {};
  HS_CHECK(it->is_string(), where, ".", key, ": expected a string, got ", type_name(*it));
  return it->get<std::string>();
}

// The `function` object of an OpenAI tool or tool call (`what`), checked: "type" (if
// present) is "function", and the function has a non-empty string name.
const ojson& function_of(const ojson& item, const std::string& where, const char* what) {
  HS_CHECK(item.is_object(), where, ": expected a ", what, " object, got ", type_name(item));
  if (auto ty = item.find("type"); ty != item.end() && !ty->is_null())
    HS_CHECK(*ty == "function", where, ".type: only \"function\" is supported, got ", ty->dump());
  auto fn = item.find("function");
  HS_CHECK(fn != item.end() && fn->is_object(), where, ": a ", what, " without an object 'function'");
  auto name = fn->find("name");
  HS_CHECK(name != fn->end() && name->is_string() && !name->get_ref<const std::string&>().empty(), where, ": a ",
           what, " without a name");
  return *fn;
}

ojson tool_functions(const ojson& tools, const std::string& where) {
  HS_CHECK(tools.is_array(), where, ": expected an array of tools, got ", type_name(tools));
  ojson out = ojson::array();
  for (size_t k = 0; k < tools.size(); ++k)  // only the function object is rendered, as DeepSeek does
    out.push_back(function_of(tools[k], cat(where, "[", k, "]"), "tool"));
  return out;
}

std::vector<ToolCallIn> tool_calls_in(const ojson& calls, const std::string& where) {
  std::vector<ToolCallIn> out;
  if (calls.is_null()) return out;
  HS_CHECK(calls.is_array(), where, ": expected an array, got ", type_name(calls));
  for (size_t k = 0; k < calls.size(); ++k) {
    const ojson& c = calls[k];
    const std::string cw = cat(where, "[", k, "]");
    const ojson& fn = function_of(c, cw, "tool call");
    ToolCallIn tc;
    tc.id = opt_string(c, "id", cw);
    if (tc.id.empty()) tc.id = opt_string(fn, "id", cw + ".function");  // DeepSeek's fallback
    tc.call.name = fn["name"].get<std::string>();
    auto args = fn.find("arguments");
    const ojson none;
    const ojson& a = args == fn.end() ? none : *args;
    HS_CHECK(a.is_null() || a.is_string() || a.is_object(), cw,
             ".function.arguments: expected a JSON string or an object, got ", type_name(a));
    tc.call.arguments = dsml_arguments_object(a);
    out.push_back(std::move(tc));
  }
  return out;
}

bool is_known_task(std::string_view task) {
  for (const auto& t : ds4::kTaskTokens)
    if (t.task == task) return true;
  return false;
}

}  // namespace

std::vector<Msg> normalize_messages(const ojson& messages, const char* what) {
  HS_CHECK(messages.is_array(), what, ": expected an array of messages, got ", type_name(messages));
  std::vector<Msg> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const ojson& m = messages[i];
    const std::string where = cat(what, "[", i, "]");
    HS_CHECK(m.is_object(), where, ": expected a message object, got ", type_name(m));
    Msg msg;
    auto role = m.find("role");
    HS_CHECK(role != m.end() && role->is_string(), where, ": missing string field 'role'");
    msg.role = role->get<std::string>();
    static constexpr std::string_view kRoles[] = {"system", "user",      "assistant",
                                                  "tool",   "developer", "latest_reminder"};
    bool known = false;
    for (auto r : kRoles) known = known || msg.role == r;
    HS_CHECK(known, where, ": unknown role '", msg.role,
             "' (expected system, user, assistant, tool, developer or latest_reminder)");
    msg.content = content_text(m, where);
    if (auto t = m.find("task"); t != m.end() && !t->is_null()) {
      HS_CHECK(t->is_string() && is_known_task(t->get_ref<const std::string&>()), where,
               ".task: expected one of action, query, authority, domain, title, read_url, got ", t->dump());
      msg.task = t->get<std::string>();
    }
    if (auto t = m.find("tools"); t != m.end() && !t->is_null() && msg.role != "user" && msg.role != "tool") {
      ojson fns = tool_functions(*t, where + ".tools");
      if (!fns.empty()) msg.tools = std::move(fns);
    }
    if (auto rf = m.find("response_format"); rf != m.end() && py_truthy(*rf)) msg.response_format = *rf;
    if (auto w = m.find("wo_eos"); w != m.end() && !w->is_null()) {
      HS_CHECK(w->is_boolean(), where, ".wo_eos: expected a boolean, got ", type_name(*w));
      msg.wo_eos = w->get<bool>();
    }
    if (msg.role == "assistant") {
      msg.reasoning = opt_string(m, "reasoning_content", where);
      if (auto tc = m.find("tool_calls"); tc != m.end()) msg.tool_calls = tool_calls_in(*tc, where + ".tool_calls");
    } else if (msg.role == "tool") {
      msg.tool_call_id = opt_string(m, "tool_call_id", where);
    } else if (msg.role == "developer") {
      HS_CHECK(!msg.content.empty(), where, ": a developer message needs non-empty content");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace chat_detail

ChatPrompt encode_messages(const ojson& messages, const ChatOptions& opts) {
  HS_CHECK(json_depth(messages) <= kMaxJsonDepth && json_depth(opts.context) <= kMaxJsonDepth,
           "messages: JSON nested deeper than ", kMaxJsonDepth, " levels");
  std::vector<chat_detail::Msg> context;
  if (!opts.context.is_null()) context = chat_detail::normalize_messages(opts.context, "context");
  return chat_detail::render_messages(std::move(context), chat_detail::normalize_messages(messages, "messages"),
                                      opts);
}

ChatPrompt encode_request(const ojson& request, const ChatOptions& opts) {
  HS_CHECK(json_depth(request) <= kMaxJsonDepth, "request: JSON nested deeper than ", kMaxJsonDepth, " levels");
  ojson messages;
  ojson tools, response_format;
  if (request.is_array()) {
    messages = request;
  } else {
    HS_CHECK(request.is_object(), "request: expected an object or an array of messages, got ",
             request.type_name());
    auto m = request.find("messages");
    HS_CHECK(m != request.end(), "request: missing field 'messages'");
    messages = *m;
    if (auto t = request.find("tools"); t != request.end()) tools = *t;
    if (auto rf = request.find("response_format"); rf != request.end()) response_format = *rf;
  }
  HS_CHECK(messages.is_array(), "request.messages: expected an array, got ", messages.type_name());
  const auto starts_with_system = [&] {
    return !messages.empty() && messages[0].is_object() && messages[0].value("role", ojson()) == "system";
  };
  if (opts.default_system && !starts_with_system())
    messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", *opts.default_system}});
  // {"type": "text"} is OpenAI's "no format"; DeepSeek's encoder would print it as a schema.
  if (response_format.is_object() && response_format.value("type", ojson()) == "text") response_format = nullptr;
  HS_CHECK(tools.is_null() || tools.is_array(), "request.tools: expected an array, got ", tools.type_name());
  const bool has_tools = !tools.is_null() && !tools.empty();
  const bool has_format = py_truthy(response_format);
  if (has_tools || has_format) {
    if (!starts_with_system()) messages.insert(messages.begin(), ojson{{"role", "system"}, {"content", ""}});
    ojson& sys = messages[0];
    if (has_tools) {
      HS_CHECK(!sys.contains("tools") || sys["tools"].is_null(),
               "request: tools given both at the top level and on messages[0]");
      sys["tools"] = tools;
    }
    if (has_format) {
      HS_CHECK(!sys.contains("response_format") || sys["response_format"].is_null(),
               "request: response_format given both at the top level and on messages[0]");
      sys["response_format"] = response_format;
    }
  }
  return encode_messages(messages, opts);
}

std::string assistant_prefix(ThinkingMode mode) {
  std::string out(ds4::kAssistant);
  out += mode == ThinkingMode::thinking ? ds4::kThinkStart : ds4::kThinkEnd;
  return out;
}

std::optional<EffortSetting> map_reasoning_effort(std::string_view value, ChatVariant variant) {
  EffortSetting s;
  if (value == "none") {
    s.chat_mode = true;
    return s;
  }
  if (value == "xhigh") value = "max";
  const bool ok = value == "high" || value == "max" || (variant == ChatVariant::v4_0731 && value == "low");
  if (!ok) return std::nullopt;
  s.effort = std::string(value);
  return s;
}

ThinkingMode parse_thinking_mode(std::string_view s) {
  if (s == "thinking") return ThinkingMode::thinking;
  if (s == "chat") return ThinkingMode::chat;
  fail("thinking mode: expected 'thinking' or 'chat', got '", s, "'");
}

ChatVariant parse_chat_variant(std::string_view s) {
  if (s == "v4") return ChatVariant::v4;
  if (s == "v4-0731") return ChatVariant::v4_0731;
  fail("chat variant: expected 'v4' or 'v4-0731', got '", s, "'");
}

}  // namespace hs
