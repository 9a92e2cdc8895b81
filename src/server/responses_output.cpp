// The output items of a Response and the typed events that stream them: a reasoning item
// (content: one reasoning_text part), a message item (one output_text part), one function_call
// item per tool call. Each item is added, filled by deltas and done before the next one opens,
// in the order the OpenAI SDKs' stream accumulators check.
#include "server/responses_api.h"

namespace hs::server {

std::string ResponseOutput::event(ojson data) {
  data["sequence_number"] = seq_++;
  const std::string type = data["type"];
  return sse_event(type, data);
}

std::string ResponseOutput::open_item(Open kind) {
  std::string out = close();
  const bool reasoning = kind == Open::reasoning;
  ojson item = reasoning ? ojson{{"id", svc_.new_id("rs_")}, {"type", "reasoning"}, {"summary", ojson::array()}}
                         : ojson{{"id", svc_.new_id("msg_")}, {"type", "message"}, {"status", "in_progress"},
                                 {"role", "assistant"}, {"content", ojson::array()}};
  const size_t index = items_.size();
  out += event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  const ojson part = reasoning ? ojson{{"type", "reasoning_text"}, {"text", ""}}
                               : ojson{{"type", "output_text"}, {"text", ""}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
  out += event({{"type", "response.content_part.added"}, {"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}});
  items_.push_back(std::move(item));
  open_ = kind;
  text_.clear();
  return out;
}

std::string ResponseOutput::close() {
  if (open_ == Open::none) return {};
  ojson& item = items_.back();
  const size_t index = items_.size() - 1;
  const bool reasoning = open_ == Open::reasoning;
  const ojson part = reasoning ? ojson{{"type", "reasoning_text"}, {"text", text_}}
                               : ojson{{"type", "output_text"}, {"text", text_}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
  const ojson where = {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}};
  ojson done = where;
  done["type"] = reasoning ? "response.reasoning_text.done" : "response.output_text.done";
  done["text"] = text_;
  if (!reasoning) done["logprobs"] = ojson::array();
  std::string out = event(std::move(done));
  ojson part_done = where;
  part_done["type"] = "response.content_part.done";
  part_done["part"] = part;
  out += event(std::move(part_done));
  item["content"] = ojson::array({part});
  if (!reasoning) item["status"] = "completed";
  out += event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  open_ = Open::none;
  text_.clear();
  return out;
}

std::string ResponseOutput::add_call(const ToolCall& call) {
  std::string out = close();
  const size_t index = items_.size();
  ojson item = {{"id", svc_.new_id("fc_")}, {"type", "function_call"}, {"status", "in_progress"},
                {"call_id", call.id}, {"name", call.name}, {"arguments", ""}};
  out += event({{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  // The DSML parser hands over a call once it is whole: its arguments go out in one delta.
  out += event({{"type", "response.function_call_arguments.delta"}, {"item_id", item["id"]}, {"output_index", index},
                {"delta", call.arguments}});
  out += event({{"type", "response.function_call_arguments.done"}, {"item_id", item["id"]}, {"output_index", index},
                {"name", call.name}, {"arguments", call.arguments}});
  item["arguments"] = call.arguments;
  item["status"] = "completed";
  out += event({{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
  return out;
}

std::string ResponseOutput::feed(const GenBatch& b) {
  std::string out;
  for (size_t i = 0; i < b.events.size();) {
    const GenEvent& e = b.events[i];
    if (e.kind == GenEvent::Kind::tool_call) {
      out += add_call(e.call);
      ++i;
      continue;
    }
    // Consecutive deltas of one kind go out as one event.
    std::string text;
    const auto kind = e.kind;
    for (; i < b.events.size() && b.events[i].kind == kind; ++i) text += b.events[i].text;
    if (text.empty()) continue;
    const Open want = kind == GenEvent::Kind::reasoning ? Open::reasoning : Open::message;
    if (open_ != want) out += open_item(want);
    text_ += text;
    ojson delta = {{"type", want == Open::reasoning ? "response.reasoning_text.delta" : "response.output_text.delta"},
                   {"item_id", items_.back()["id"]},
                   {"output_index", items_.size() - 1},
                   {"content_index", 0},
                   {"delta", text}};
    if (want == Open::message) delta["logprobs"] = ojson::array();
    out += event(std::move(delta));
  }
  return out;
}

}  // namespace hs::server
