#include "server/output_format.h"

#include "server/api_error.h"
#include "server/validation.h"

namespace hs::server {

namespace {

// {name, schema, strict} of a json_schema format, at `where` (for messages) in `obj`.
OutputFormat json_schema_format(const ojson& obj, const std::string& where, const char* param) {
  OutputFormat f;
  f.kind = OutputFormat::Kind::json_schema;
  if (const ojson* n = field(obj, "name")) {
    if (!n->is_string()) bad_request(param, "'", where, ".name' must be a string, got ", describe_type(*n));
    f.name = n->get<std::string>();
  }
  if (const ojson* d = field(obj, "description"); d && !d->is_string())
    bad_request(param, "'", where, ".description' must be a string, got ", describe_type(*d));
  if (const ojson* st = field(obj, "strict")) {
    if (!st->is_boolean()) bad_request(param, "'", where, ".strict' must be a boolean, got ", describe_type(*st));
    f.strict = st->get<bool>();
  }
  const ojson* schema = field(obj, "schema");
  if (!schema) {  // a named format without a schema: any JSON object
    f.kind = OutputFormat::Kind::json_object;
    return f;
  }
  if (!schema->is_object()) bad_request(param, "'", where, ".schema' must be a JSON Schema object, got ", describe_type(*schema));
  f.schema = *schema;
  return f;
}

std::string type_of(const ojson& obj, const char* where, const char* param) {
  const ojson* t = field(obj, "type");
  if (!t || !t->is_string()) bad_request(param, "'", where, ".type' must be a string");
  return t->get<std::string>();
}

// The OpenAI types "text" | "json_object" | "json_schema" at `param`; a json_schema's fields
// sit under "json_schema" (chat) or beside the type (`flat`: the Responses API).
OutputFormat openai_typed_format(const ojson* v, const char* param, bool flat) {
  if (!v) return {};
  if (!v->is_object()) bad_request(param, "'", param, "' must be an object, got ", describe_type(*v));
  const std::string type = type_of(*v, param, param);
  if (type == "text") return {};
  if (type == "json_object") return {OutputFormat::Kind::json_object, nullptr, {}, false};
  if (type != "json_schema")
    bad_request(param, "'", param, ".type' must be \"text\", \"json_object\" or \"json_schema\", got \"", type, "\"");
  if (flat) return json_schema_format(*v, param, param);
  const ojson* js = field(*v, "json_schema");
  if (!js || !js->is_object()) bad_request(param, "'", param, ".json_schema' must be an object");
  return json_schema_format(*js, cat(param, ".json_schema"), param);
}

}  // namespace

OutputFormat openai_response_format(const ojson* rf) { return openai_typed_format(rf, "response_format", false); }

OutputFormat responses_text_format(const ojson* format) { return openai_typed_format(format, "text.format", true); }

OutputFormat anthropic_output_format(const ojson* format, const char* param) {
  if (!format) return {};
  if (!format->is_object()) bad_request(param, "'", param, "' must be an object, got ", describe_type(*format));
  const std::string type = type_of(*format, param, param);
  if (type != "json_schema") bad_request(param, "'", param, ".type' must be \"json_schema\", got \"", type, "\"");
  OutputFormat f = json_schema_format(*format, param, param);
  if (f.kind != OutputFormat::Kind::json_schema) bad_request(param, "'", param, ".schema' is required");
  f.strict = true;  // Anthropic's structured outputs always hold to the schema
  return f;
}

std::optional<std::string> forced_tool_name(const ojson* tool_choice, const ojson& tools) {
  if (!tool_choice || tools.is_null()) return std::nullopt;
  if (tool_choice->is_string()) {
    if (*tool_choice == "required" && tools.size() == 1) return tools[0]["function"]["name"].get<std::string>();
    return std::nullopt;
  }
  if (const ojson* fn = field(*tool_choice, "function"); fn && fn->is_object())
    if (const ojson* name = field(*fn, "name"); name && name->is_string()) return name->get<std::string>();
  return std::nullopt;
}

OutputFormat forced_tool_call(const ojson& tools, const std::string& name) {
  OutputFormat f;
  f.kind = OutputFormat::Kind::tool_call;
  f.name = name;
  for (const auto& t : tools)
    if (t["function"]["name"] == name) {
      if (const ojson* p = field(t["function"], "parameters")) f.schema = *p;
      return f;
    }
  bad_request("tool_choice", "tool_choice names the function '", name, "', which is not among the tools");
}

ojson prompt_response_format(const OutputFormat& f) {
  switch (f.kind) {
    case OutputFormat::Kind::json_object: return {{"type", "json_object"}};
    case OutputFormat::Kind::json_schema: {
      ojson js = ojson::object();
      if (!f.name.empty()) js["name"] = f.name;
      js["schema"] = f.schema;
      if (f.strict) js["strict"] = true;
      return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
    }
    default: return nullptr;
  }
}

}  // namespace hs::server
