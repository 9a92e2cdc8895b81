// A Responses API request -> the OpenAI-shaped chat input every API shares: input items become
// messages (a run of reasoning, assistant message and function_call items is one assistant
// turn, as DeepSeek's format has one), function tools become chat tools, and tools this server
// cannot run (web_search, file_search, Codex's namespace tools, ...) are left out with a note.
#include <algorithm>
#include <unordered_set>

#include "server/api_error.h"
#include "server/responses_api.h"
#include "server/validation.h"
#include "util/log.h"

namespace hs::server {

namespace {

// The text of `content`: a string, or parts (input_text, output_text, text, refusal; images,
// files and audio become "[Unsupported TYPE]" placeholders, as on the other routes).
std::string content_text(const ojson& content, const std::string& where) {
  return content_parts_text(content, "input", where, "\n\n", [](const ojson& part, const std::string& pw, const std::string& type) {
    if (type == "input_image" || type == "input_file" || type == "input_audio") return media_placeholder(type, pw);
    if (type != "input_text" && type != "output_text" && type != "text" && type != "refusal")
      bad_request("input", pw, ": content parts of type '", type, "' are not supported");
    const char* key = type == "refusal" ? "refusal" : "text";
    const ojson* t = field(part, key);
    if (!t || !t->is_string()) bad_request("input", pw, ": a '", type, "' part needs a string '", key, "'");
    return t->get<std::string>();
  });
}

std::string required_string(const ojson& item, const char* key, const std::string& where) {
  const ojson* v = field(item, key);
  if (!v || !v->is_string()) bad_request("input", where, ".", key, " must be a string");
  return v->get<std::string>();
}

// Items -> chat messages. An assistant turn gathers until the next non-assistant item.
class Conversation {
 public:
  void add(const ojson& item, const std::string& where) {
    if (!item.is_object()) bad_request("input", where, " must be an object, got ", describe_type(item));
    std::string type = "message";
    if (const ojson* t = field(item, "type")) {
      if (!t->is_string()) bad_request("input", where, ".type must be a string");
      type = t->get<std::string>();
    }
    if (type == "message") message(item, where);
    else if (type == "function_call") function_call(item, where);
    else if (type == "function_call_output") call_output(item, where);
    else if (type == "reasoning") reasoning(item, where);
    else
      bad_request("input", where, ": items of type '", type,
                  "' are not supported (message, function_call, function_call_output and reasoning are)");
  }

  ojson finish() {
    flush();
    if (!messages_.empty() && messages_.back()["role"] == "assistant") messages_.back()["wo_eos"] = true;  // continue it
    return std::move(messages_);
  }

 private:
  void message(const ojson& item, const std::string& where) {
    const std::string role = required_string(item, "role", where);
    const ojson* content = field(item, "content");
    if (!content) bad_request("input", where, ".content is required");
    const std::string text = content_text(*content, where + ".content");
    if (role == "assistant") {
      assistant()["content"].get_ref<std::string&>() += text;  // in place: many parts stay linear
      return;
    }
    if (role != "user" && role != "system" && role != "developer")
      bad_request("input", where, ".role must be \"user\", \"assistant\", \"system\" or \"developer\", got \"", role, "\"");
    flush();
    const std::string as = role == "developer" ? "system" : role;  // developer: as on the chat route
    // Consecutive system texts (instructions, then Codex's developer messages) are one system
    // prompt, joined as Anthropic's system blocks are: DeepSeek's template would run them together.
    if (as == "system" && !messages_.empty() && messages_.back()["role"] == "system") {
      std::string& sys = messages_.back()["content"].get_ref<std::string&>();
      sys += "\n\n";
      sys += text;
      return;
    }
    messages_.push_back({{"role", as}, {"content", text}});
  }

  void function_call(const ojson& item, const std::string& where) {
    std::string args = required_string(item, "arguments", where);
    if (args.empty()) args = "{}";
    ojson& a = assistant();
    if (!a.contains("tool_calls")) a["tool_calls"] = ojson::array();
    a["tool_calls"].push_back({{"id", required_string(item, "call_id", where)},
                               {"type", "function"},
                               {"function", {{"name", required_string(item, "name", where)}, {"arguments", args}}}});
  }

  void call_output(const ojson& item, const std::string& where) {
    const ojson* out = field(item, "output");
    if (!out) bad_request("input", where, ".output is required");
    flush();
    messages_.push_back({{"role", "tool"},
                         {"tool_call_id", required_string(item, "call_id", where)},
                         {"content", content_text(*out, where + ".output")}});
  }

  // The raw reasoning text (content) where there is one, else the summary.
  void reasoning(const ojson& item, const std::string& where) {
    std::string text;
    for (const char* key : {"content", "summary"}) {
      const ojson* parts = field(item, key);
      if (!parts) continue;
      if (!parts->is_array()) bad_request("input", where, ".", key, " must be an array");
      for (const auto& p : *parts) {
        const ojson* t = p.is_object() ? field(p, "text") : nullptr;
        if (!t || !t->is_string()) bad_request("input", where, ".", key, ": each part needs a string 'text'");
        if (!text.empty()) text += "\n\n";
        text += t->get<std::string>();
      }
      if (!text.empty()) break;
    }
    if (text.empty()) return;
    ojson& a = assistant();
    if (!a.contains("reasoning_content")) a["reasoning_content"] = "";
    std::string& r = a["reasoning_content"].get_ref<std::string&>();  // in place: many items stay linear
    if (!r.empty()) r += "\n\n";
    r += text;
  }

  ojson& assistant() {
    if (cur_.is_null()) cur_ = {{"role", "assistant"}, {"content", ""}};
    return cur_;
  }
  void flush() {
    if (cur_.is_null()) return;
    messages_.push_back(std::move(cur_));
    cur_ = nullptr;
  }

  ojson messages_ = ojson::array();
  ojson cur_;
};

// Function tools in the chat shape; other tool types are noted and left out. Returns the names
// of the tool types left out.
ojson convert_tools(const ojson* tools, std::vector<std::string>& ignored) {
  if (!tools) return nullptr;
  ojson out = ojson::array();
  for_each_tool(*tools, [&](const ojson& t, const std::string& where) {
    const ojson* type = field(t, "type");
    if (!type || !type->is_string()) bad_request("tools", where, ".type must be a string");
    if (*type != "function") {
      const std::string name = t.contains("name") && t["name"].is_string() ? " '" + t["name"].get<std::string>() + "'" : "";
      log_warn(where, ": the ", type->get<std::string>(), " tool", name, " is not one this server can run; left out of the prompt");
      ignored.push_back(type->get<std::string>());
      return;
    }
    ojson fn = ojson::object();
    for (const char* key : {"name", "description", "parameters"})
      if (t.contains(key) && !t[key].is_null()) fn[key] = t[key];
    if (const ojson* st = field(t, "strict"); st && !st->is_boolean()) bad_request("tools", where, ".strict must be a boolean");
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  });
  return validate_openai_tools(&out);
}

// Responses tool_choice -> the chat form check_tool_choice() takes; "allowed_tools" narrows
// `tools` to the ones it lists.
ojson convert_tool_choice(const ojson* tc, ojson& tools, const std::vector<std::string>& ignored) {
  if (!tc || tc->is_string()) return tc ? *tc : ojson(nullptr);
  if (!tc->is_object()) bad_request("tool_choice", "'tool_choice' must be a string or an object, got ", describe_type(*tc));
  const std::string type = opt_string(*tc, "type").value_or("");
  if (type == "function") {
    const ojson* name = field(*tc, "name");
    if (!name || !name->is_string()) bad_request("tool_choice", "tool_choice of type \"function\" needs a string 'name'");
    return {{"type", "function"}, {"function", {{"name", *name}}}};
  }
  if (type == "allowed_tools") {
    const std::string mode = opt_string(*tc, "mode").value_or("auto");
    if (mode != "auto" && mode != "required") bad_request("tool_choice", "'tool_choice.mode' must be \"auto\" or \"required\"");
    const ojson* allowed = field(*tc, "tools");
    if (!allowed || !allowed->is_array()) bad_request("tool_choice", "'tool_choice.tools' must be an array");
    std::unordered_set<std::string> names;
    for (const auto& a : *allowed)
      if (a.is_object() && a.contains("name") && a["name"].is_string()) names.insert(a["name"].get<std::string>());
    ojson kept = ojson::array();
    for (const auto& t : tools.is_null() ? ojson::array() : tools)
      if (names.count(t["function"]["name"].get<std::string>())) kept.push_back(t);
    tools = kept.empty() ? ojson(nullptr) : kept;
    return mode;
  }
  if (std::find(ignored.begin(), ignored.end(), type) != ignored.end())
    bad_request("tool_choice", "tool_choice asks for the ", type, " tool, which this server cannot run");
  bad_request("tool_choice", "'tool_choice.type' must be \"function\" or \"allowed_tools\", got \"", type, "\"");
}

}  // namespace

ResponsesRequest parse_responses_request(Service& svc, const ojson& req) {
  check_field_types(req, {{"user", "string"}, {"metadata", "object"}, {"parallel_tool_calls", "boolean"},
                          {"service_tier", "string"}, {"prompt_cache_key", "string"}, {"safety_identifier", "string"},
                          {"include", "array"}, {"stream_options", "object"}, {"client_metadata", "object"}});
  svc.check_model(opt_string(req, "model"));
  for (const char* key : {"conversation", "prompt"})
    if (field(req, key)) bad_request(key, "'", key, "' is not supported by this server (send the input items)");
  if (opt_bool(req, "background").value_or(false)) bad_request("background", "background responses are not supported");
  if (opt_int(req, "top_logprobs", 0, 20).value_or(0) > 0) bad_request("top_logprobs", "logprobs are not supported on /v1/responses");
  if (const ojson* inc = field(req, "include"))
    for (const auto& v : *inc) {
      if (!v.is_string()) bad_request("include", "'include' must hold only strings");
      if (v == "message.output_text.logprobs") bad_request("include", "logprobs are not supported on /v1/responses");
    }
  if (auto t = opt_string(req, "truncation"); t && *t != "auto" && *t != "disabled")
    bad_request("truncation", "'truncation' must be \"auto\" or \"disabled\"");

  ResponsesRequest out;
  out.stream = opt_bool(req, "stream").value_or(false);
  out.store = opt_bool(req, "store").value_or(true);
  out.max_output_tokens = opt_int(req, "max_output_tokens", 1, INT32_MAX);
  out.conversation = ojson::array();
  if (auto prev = opt_string(req, "previous_response_id")) {
    auto entry = svc.responses().get(*prev);
    if (!entry) bad_request("previous_response_id", "Previous response with id '", *prev, "' not found.");
    out.conversation = std::move(entry->conversation);
  }
  const ojson* input = field(req, "input");
  if (!input) bad_request("input", "'input' is required");
  if (input->is_string()) out.conversation.push_back({{"type", "message"}, {"role", "user"}, {"content", *input}});
  else if (input->is_array()) out.conversation.insert(out.conversation.end(), input->begin(), input->end());
  else bad_request("input", "'input' must be a string or an array of items, got ", describe_type(*input));

  ChatInput& in = out.in;
  in.variant = svc.config().variant;
  in.thinking = svc.config().default_thinking;
  Conversation conv;
  if (auto instr = opt_string(req, "instructions")) conv.add({{"role", "system"}, {"content", *instr}}, "instructions");
  for (size_t i = 0; i < out.conversation.size(); ++i) conv.add(out.conversation[i], cat("input[", i, "]"));
  in.messages = conv.finish();
  if (in.messages.empty()) bad_request("input", "'input' must not be empty");

  std::vector<std::string> ignored;
  in.tools = convert_tools(opt_array(req, "tools"), ignored);
  const ojson choice = convert_tool_choice(field(req, "tool_choice"), in.tools, ignored);
  if (!check_tool_choice(choice.is_null() ? nullptr : &choice, in.tools)) in.tools = nullptr;
  if (const ojson* text = opt_object(req, "text")) out.format = responses_text_format(field(*text, "format"));
  if (auto forced = forced_tool_name(choice.is_null() ? nullptr : &choice, in.tools)) out.format = forced_tool_call(in.tools, *forced);
  in.response_format = prompt_response_format(out.format);
  if (const ojson* r = opt_object(req, "reasoning"))
    if (auto effort = opt_string(*r, "effort")) apply_reasoning_effort(*effort, in);

  // What the Response object repeats of the request (absent or null: the API's default).
  auto given = [&](const ojson& obj, const char* key, ojson dflt) {
    const ojson* v = field(obj, key);
    return v ? *v : dflt;
  };
  ojson& e = out.echo;
  e = ojson::object();
  e["instructions"] = given(req, "instructions", nullptr);
  e["max_output_tokens"] = given(req, "max_output_tokens", nullptr);
  e["metadata"] = given(req, "metadata", ojson::object());
  e["parallel_tool_calls"] = given(req, "parallel_tool_calls", true);
  e["previous_response_id"] = given(req, "previous_response_id", nullptr);
  const ojson* r = opt_object(req, "reasoning");
  e["reasoning"] = {{"effort", r ? given(*r, "effort", nullptr) : ojson(nullptr)},
                    {"summary", r ? given(*r, "summary", nullptr) : ojson(nullptr)}};
  e["store"] = out.store;
  e["temperature"] = given(req, "temperature", 1.0);
  const ojson* text = opt_object(req, "text");
  e["text"] = {{"format", text ? given(*text, "format", {{"type", "text"}}) : ojson{{"type", "text"}}}};
  e["tool_choice"] = given(req, "tool_choice", "auto");
  e["tools"] = given(req, "tools", ojson::array());
  e["top_p"] = given(req, "top_p", 1.0);
  e["truncation"] = given(req, "truncation", "disabled");
  e["user"] = given(req, "user", nullptr);
  return out;
}

}  // namespace hs::server
