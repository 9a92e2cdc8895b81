#include "tokenizer/dsml_parser.h"

#include <algorithm>

#include "tokenizer/chat_tokens.h"
#include "util/log.h"

namespace hs {
namespace {

constexpr std::string_view kInvokeCloseNl = "</｜DSML｜invoke>\n";
constexpr std::string_view kNlParamOpen = "\n<｜DSML｜parameter";
constexpr std::string_view kNlInvokeCloseNl = "\n</｜DSML｜invoke>\n";

// Longest suffix of `text` that is a proper prefix of `stop`: the bytes that might still
// become `stop` when more text arrives.
size_t partial_suffix(std::string_view text, std::string_view stop) {
  for (size_t k = std::min(text.size(), stop.size() - 1); k > 0; --k)
    if (text.substr(text.size() - k) == stop.substr(0, k)) return k;
  return 0;
}

std::string excerpt(std::string_view s) {
  constexpr size_t kMax = 40;
  std::string out;
  py_json_quote_to(out, s.substr(0, kMax));
  return s.size() > kMax ? out + "..." : out;
}

}  // namespace

ojson tool_call_to_openai(const ToolCall& call) {
  return ojson{{"id", call.id},
               {"type", "function"},
               {"function", ojson{{"name", call.name}, {"arguments", call.arguments}}}};
}

DsmlParser::DsmlParser(DsmlParserOptions opts)
    : opts_(std::move(opts)), mode_(opts_.start_in_reasoning ? Mode::reasoning : Mode::content) {
  if (opts_.tools.is_null()) return;
  HS_CHECK(opts_.tools.is_array(), "DSML parser: tools must be an array");
  check_schemas_ = true;
  for (const ojson& t : opts_.tools) {
    const ojson& fn = t.contains("function") ? t["function"] : t;  // OpenAI shape or bare
    HS_CHECK(fn.is_object() && fn.contains("name") && fn["name"].is_string(),
             "DSML parser: a tool without a function name");
    Schema s;
    s.name = fn["name"].get<std::string>();
    const ojson params = fn.value("parameters", ojson());
    if (params.is_object() && params.contains("properties") && params["properties"].is_object()) {
      const ojson extra = params.value("additionalProperties", ojson(false));
      s.any_param = extra.is_object() || extra == true;
      for (const auto& [k, _] : params["properties"].items()) s.params.push_back(k);
    }
    schemas_.push_back(std::move(s));
  }
}

std::vector<ParseEvent> DsmlParser::feed(std::string_view delta) {
  std::vector<ParseEvent> ev;
  if (finished_ || delta.empty()) return ev;
  if (mode_ == Mode::done) {
    end_at_eos(delta);
    return ev;
  }
  (mode_ == Mode::tools ? block_ : pending_).append(delta);
  run(false, ev);
  return ev;
}

std::vector<ParseEvent> DsmlParser::finish() {
  std::vector<ParseEvent> ev;
  if (finished_) return ev;
  finished_ = true;
  run(true, ev);
  if (mode_ != Mode::done) {
    if (mode_ == Mode::reasoning) warn("output ended inside reasoning (no </think>)");
    mode_ = Mode::done;
    final_checks();
  }
  return ev;
}

void DsmlParser::run(bool final, std::vector<ParseEvent>& ev) {
  for (;;) {
    if (mode_ == Mode::done) return;
    if (mode_ == Mode::tools) {
      run_tools(final, ev);
      if (mode_ == Mode::tools) return;
    } else if (!run_text(final, ev)) {
      return;
    }
  }
}

// Reasoning, content and raw (after a failed block) text: emit up to the first stop string,
// hold back a tail that could still become one. Returns true when the mode changed.
bool DsmlParser::run_text(bool final, std::vector<ParseEvent>& ev) {
  std::vector<std::string_view> stops;
  if (mode_ == Mode::reasoning) stops = {ds4::kThinkEnd, ds4::kEos};
  else if (mode_ == Mode::content) stops = {ds4::kEos, ds4::kBlockStart};
  else stops = {ds4::kEos};

  size_t at = std::string::npos;
  std::string_view stop;
  for (auto s : stops) {
    size_t q = pending_.find(s);
    if (q < at) {
      at = q;
      stop = s;
    }
  }
  if (at != std::string::npos) {
    emit_text(std::string_view(pending_).substr(0, at), ev);
    std::string rest = pending_.substr(at + stop.size());
    pending_.clear();
    if (stop == ds4::kThinkEnd) {
      mode_ = Mode::content;
      pending_ = std::move(rest);
    } else if (stop == ds4::kEos) {
      if (mode_ == Mode::reasoning) warn("end of sentence inside reasoning (no </think>)");
      end_at_eos(rest);
    } else {  // a tool-call block starts
      mode_ = Mode::tools;
      block_ = std::string(ds4::kBlockStart) + rest;
      pos_ = ds4::kBlockStart.size();
      t_ = T::open_nl;
      eos_at_ = std::string::npos;
      eos_scanned_ = pos_;
      calls_.clear();
    }
    return true;
  }
  size_t hold = 0;
  if (!final) {
    for (auto s : stops) hold = std::max(hold, partial_suffix(pending_, s));
  }
  size_t take = pending_.size() - hold;
  if (!final) take -= utf8_incomplete_tail(std::string_view(pending_).substr(0, take));
  emit_text(std::string_view(pending_).substr(0, take), ev);
  pending_.erase(0, take);
  return false;
}

void DsmlParser::emit_text(std::string_view text, std::vector<ParseEvent>& ev) {
  if (text.empty()) return;
  const bool reasoning = mode_ == Mode::reasoning;
  (reasoning ? result_.reasoning_content : result_.content).append(text);
  const auto kind = reasoning ? ParseEvent::Kind::reasoning_delta : ParseEvent::Kind::content_delta;
  if (!ev.empty() && ev.back().kind == kind) {
    ev.back().text.append(text);
  } else {
    ParseEvent e;
    e.kind = kind;
    e.text = std::string(text);
    ev.push_back(std::move(e));
  }
}

void DsmlParser::warn(std::string msg) {
  log_warn("DSML parser: ", msg);
  result_.warnings.push_back(std::move(msg));
}

void DsmlParser::end_at_eos(std::string_view rest) {
  if (mode_ != Mode::done) {
    mode_ = Mode::done;
    result_.saw_eos = true;
    final_checks();
  }
  if (!rest.empty() && !ignored_tail_) {
    ignored_tail_ = true;
    warn("text after the end of sentence ignored");
  }
}

// DeepSeek's parser rejects these strings in reasoning and content; a failed block has
// already been reported.
void DsmlParser::final_checks() {
  if (checked_) return;
  checked_ = true;
  if (block_failed_) return;
  for (auto tok : {ds4::kBos, ds4::kThinkStart, ds4::kThinkEnd, ds4::kDsml}) {
    if (result_.reasoning_content.find(tok) != std::string::npos)
      warn(cat("reasoning contains the special string ", tok));
    if (result_.content.find(tok) != std::string::npos) warn(cat("content contains the special string ", tok));
  }
}

void DsmlParser::run_tools(bool final, std::vector<ParseEvent>& ev) {
  // The model stops at EOS, so an EOS inside the block ends it: parse only up to there.
  if (eos_at_ == std::string::npos) {
    const size_t from = eos_scanned_ > ds4::kEos.size() ? eos_scanned_ - ds4::kEos.size() : 0;
    eos_at_ = block_.find(ds4::kEos, from);
    eos_scanned_ = block_.size();
  }
  // Until EOS is seen, a tail that may become EOS is not parsed either, so that a failure
  // is found at the same place (and reported alike) however the text is split.
  const size_t open_limit = std::max(pos_, block_.size() - (final ? 0 : partial_suffix(block_, ds4::kEos)));
  Step s = Step::advanced;
  while (s == Step::advanced) {
    // After the closing tag only EOS may follow; it is matched as text (limit = all).
    const size_t limit = t_ == T::after_block ? block_.size() : eos_at_ == std::string::npos ? open_limit : eos_at_;
    if (t_ == T::after_block && pos_ == eos_at_) break;
    s = tools_step(limit);
  }
  const bool at_eos = t_ == T::after_block && pos_ == eos_at_;
  const bool at_end = final && t_ == T::after_block && pos_ == block_.size();  // cut off before EOS
  if (s != Step::failed && (at_eos || at_end)) {
    for (ToolCall& c : calls_) {
      c.id = make_tool_call_id(opts_.id_seed, result_.tool_calls.size());
      result_.tool_calls.push_back(c);
      ParseEvent e;
      e.kind = ParseEvent::Kind::tool_call;
      e.call = std::move(c);
      ev.push_back(std::move(e));
    }
    calls_.clear();
    const std::string rest = at_eos ? block_.substr(pos_ + ds4::kEos.size()) : std::string();
    block_.clear();
    if (at_eos) {
      end_at_eos(rest);
    } else {
      mode_ = Mode::done;
      final_checks();
    }
    return;
  }
  if (s == Step::need_more) {
    if (eos_at_ != std::string::npos) fail_block("end of sentence inside the tool-call block");
    else if (!final) return;
    else if (t_ == T::after_block) fail_block("text after the tool-call block");
    else fail_block("the tool-call block is not closed (output cut off)");
  }
  // Malformed: the whole block, as generated, becomes content.
  warn("malformed DSML tool-call block (" + fail_why_ + "); returned as content");
  block_failed_ = true;
  calls_.clear();
  mode_ = Mode::raw;
  pending_ = std::move(block_);
  block_.clear();
}

DsmlParser::Step DsmlParser::fail_block(std::string why) {
  fail_why_ = std::move(why);
  return Step::failed;
}

DsmlParser::Step DsmlParser::expect(size_t limit, std::initializer_list<std::string_view> alts, int& which) {
  const std::string_view avail = std::string_view(block_).substr(pos_, limit - pos_);
  bool partial = false;
  which = 0;
  for (std::string_view a : alts) {
    if (avail.size() >= a.size()) {
      if (avail.substr(0, a.size()) == a) {
        pos_ += a.size();
        return Step::advanced;
      }
    } else if (a.substr(0, avail.size()) == avail) {
      partial = true;
    }
    ++which;
  }
  if (partial) return Step::need_more;
  // (The position, not the text found there: how much of it has arrived depends on the split.)
  std::string want;
  for (std::string_view a : alts) want += (want.empty() ? "" : " or ") + excerpt(a);
  return fail_block(cat("expected ", want, " at byte ", pos_, " of the block"));
}

DsmlParser::Step DsmlParser::read_until(size_t limit, std::string_view stop, std::string& into) {
  const std::string_view avail = std::string_view(block_).substr(pos_, limit - pos_);
  const size_t q = avail.find(stop);
  if (q != std::string_view::npos) {
    into.append(avail.substr(0, q));
    pos_ += q + stop.size();
    return Step::advanced;
  }
  const size_t take = avail.size() - partial_suffix(avail, stop);
  into.append(avail.substr(0, take));
  pos_ += take;
  return Step::need_more;
}

DsmlParser::Step DsmlParser::finish_name() {
  if (name_.empty()) return fail_block("a tool call without a name");
  if (!check_schemas_) return Step::advanced;
  for (const Schema& s : schemas_)
    if (s.name == name_) return Step::advanced;
  return fail_block("call to unknown tool " + excerpt(name_));
}

DsmlParser::Step DsmlParser::finish_param() {
  for (const DsmlParam& p : params_)
    if (p.key == key_) return fail_block("duplicate parameter " + excerpt(key_) + " in " + excerpt(name_));
  if (!value_is_string_ && !ojson::accept(value_))
    return fail_block("parameter " + excerpt(key_) + " has string=\"false\" but its value is not JSON: " +
                      excerpt(value_));
  if (check_schemas_) {
    for (const Schema& s : schemas_) {
      if (s.name != name_ || s.any_param) continue;
      if (std::find(s.params.begin(), s.params.end(), key_) == s.params.end())
        return fail_block("unknown parameter " + excerpt(key_) + " for tool " + excerpt(name_));
    }
  }
  params_.push_back(DsmlParam{key_, value_, value_is_string_});
  return Step::advanced;
}

void DsmlParser::close_invoke() {
  calls_.push_back(ToolCall{{}, name_, dsml_arguments_json(params_)});
  params_.clear();
  t_ = T::item;
}

// One step of the block grammar (chat-format.md §6, as DeepSeek's parser accepts it).
DsmlParser::Step DsmlParser::tools_step(size_t limit) {
  int which = 0;
  Step s = Step::advanced;
  switch (t_) {
    case T::open_nl:  // "\n\n<｜DSML｜tool_calls" was consumed
      if ((s = expect(limit, {">\n"}, which)) == Step::advanced) t_ = T::item;
      return s;
    case T::item:
      if ((s = expect(limit, {ds4::kInvokeOpen, ds4::kBlockClose}, which)) == Step::advanced) {
        // DeepSeek's parser accepts a block without invokes; it would swallow text for nothing.
        if (which == 1 && calls_.empty()) return fail_block("a tool-call block without calls");
        t_ = which == 0 ? T::invoke_ws : T::after_block;
        name_.clear();
        params_.clear();
      }
      return s;
    case T::invoke_ws:  // the official regex allows any whitespace before name=
      while (pos_ < limit && std::string_view(" \t\n\r\f\v").find(block_[pos_]) != std::string_view::npos) ++pos_;
      if (pos_ == limit) return Step::need_more;
      t_ = T::invoke_attr;
      return Step::advanced;
    case T::invoke_attr:
      if ((s = expect(limit, {"name=\""}, which)) == Step::advanced) t_ = T::invoke_name;
      return s;
    case T::invoke_name:
      if ((s = read_until(limit, "\"", name_)) == Step::advanced) {
        s = finish_name();
        t_ = T::invoke_name_end;
      }
      return s;
    case T::invoke_name_end:
      if ((s = expect(limit, {">\n"}, which)) == Step::advanced) t_ = T::invoke_first;
      return s;
    case T::invoke_first:  // an optional blank line, then a parameter or the end of the call
      if ((s = expect(limit, {kNlParamOpen, ds4::kParamOpen, kNlInvokeCloseNl, kInvokeCloseNl}, which)) ==
          Step::advanced) {
        if (which < 2) t_ = T::param_attr;
        else close_invoke();
      }
      return s;
    case T::param_attr:
      if ((s = expect(limit, {" name=\""}, which)) == Step::advanced) {
        t_ = T::param_name;
        key_.clear();
      }
      return s;
    case T::param_name:
      if ((s = read_until(limit, "\"", key_)) == Step::advanced) t_ = T::param_string;
      return s;
    case T::param_string:
      if ((s = expect(limit, {" string=\""}, which)) == Step::advanced) t_ = T::param_kind;
      return s;
    case T::param_kind:
      if ((s = expect(limit, {"true\">", "false\">"}, which)) == Step::advanced) {
        value_is_string_ = which == 0;
        value_.clear();
        t_ = T::param_value;
      }
      return s;
    case T::param_value:
      if ((s = read_until(limit, ds4::kParamClose, value_)) == Step::advanced) t_ = T::param_end;
      return s;
    case T::param_end:
      if ((s = expect(limit, {">\n"}, which)) == Step::advanced) {
        s = finish_param();
        t_ = T::after_param;
      }
      return s;
    case T::after_param:
      if ((s = expect(limit, {ds4::kParamOpen, kInvokeCloseNl}, which)) == Step::advanced) {
        if (which == 0) t_ = T::param_attr;
        else close_invoke();
      }
      return s;
    case T::after_block:
      if ((s = expect(limit, {ds4::kEos}, which)) == Step::advanced) pos_ -= ds4::kEos.size();
      return s == Step::failed ? fail_block("text after the tool-call block") : Step::need_more;
  }
  return Step::need_more;
}

ParsedCompletion parse_completion(std::string_view text, const DsmlParserOptions& opts) {
  DsmlParser p(opts);
  p.feed(text);
  p.finish();
  return p.result();
}

}  // namespace hs
