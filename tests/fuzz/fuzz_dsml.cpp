// The DSML parser of model output: the text streamed in deltas cut where the input says must
// give the same result as the whole text at once (dsml_parser.h: "splitting the same text into
// any deltas gives the same events' concatenation and result"), and the events must add up
// to the result. The first byte picks the options and the cut sizes; the rest is the text.
#include "fuzz_util.h"
#include "tokenizer/dsml_parser.h"

using namespace hs;

namespace {

std::string calls_of(const std::vector<ToolCall>& calls) {
  std::string s;
  for (const ToolCall& c : calls) s += c.id + "\x1f" + c.name + "\x1f" + c.arguments + "\x1e";
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t knob = data[0];
  const std::string_view text = fuzz::as_text(data + 1, size - 1);
  DsmlParserOptions o;
  o.start_in_reasoning = knob & 1;
  o.id_seed = 7;
  if (knob & 2)
    o.tools = ojson::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters":
      {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
      {"type": "function", "function": {"name": "run", "parameters": {"type": "object",
      "properties": {"cmd": {"type": "string"}}, "additionalProperties": true}}}])");
  const ParsedCompletion whole = parse_completion(text, o);

  DsmlParser p(o);
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  auto take = [&](const std::vector<ParseEvent>& ev) {
    for (const ParseEvent& e : ev) {
      if (e.kind == ParseEvent::Kind::reasoning_delta) reasoning += e.text;
      else if (e.kind == ParseEvent::Kind::content_delta) content += e.text;
      else calls.push_back(e.call);
    }
  };
  const size_t step = 1 + (knob >> 2);  // 1..64 bytes per delta, cutting inside characters too
  for (size_t i = 0; i < text.size(); i += step) take(p.feed(text.substr(i, step)));
  take(p.finish());
  const ParsedCompletion& r = p.result();
  if (r.reasoning_content != whole.reasoning_content || r.content != whole.content ||
      calls_of(r.tool_calls) != calls_of(whole.tool_calls) || r.saw_eos != whole.saw_eos)
    fuzz::broken("streamed deltas and the whole text parse differently");
  if (reasoning != r.reasoning_content || content != r.content || calls_of(calls) != calls_of(r.tool_calls))
    fuzz::broken("the events do not add up to the result");
  return 0;
}
