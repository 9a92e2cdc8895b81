// DeepSeek's encode_messages() (encoding_dsv4.py shipped with V4-Flash), step by step:
// merge tool results into user turns, reorder them by call order, drop old reasoning, then
// render each message and the transition after it. Quirks are kept on purpose, since the
// model was trained on exactly this text (see docs/chat-format.md §2-§5).
#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "tokenizer/chat_messages.h"
#include "tokenizer/chat_tokens.h"
#include "util/error.h"

namespace hs::chat_detail {
namespace {

bool is_user_like(const Msg& m) { return m.role == "user" || m.role == "developer"; }

// merge_tool_messages(): a tool message becomes a tool_result block of the user turn before
// it (or of a new one); a user message joins a preceding user turn unless that has a task.
std::vector<Msg> merge_tool_messages(std::vector<Msg> msgs) {
  std::vector<Msg> merged;
  for (Msg& m : msgs) {
    const bool prev_user = !merged.empty() && merged.back().role == "user";
    if (m.role == "tool") {
      Block b{true, std::move(m.content), std::move(m.tool_call_id)};
      if (prev_user) {
        merged.back().blocks.push_back(std::move(b));
      } else {
        Msg u;
        u.role = "user";
        u.blocks.push_back(std::move(b));
        merged.push_back(std::move(u));
      }
    } else if (m.role == "user") {
      Block b{false, m.content, {}};
      if (prev_user && !merged.back().task) {
        merged.back().blocks.push_back(std::move(b));  // (this message's task is lost, as upstream)
      } else {
        m.blocks.push_back(std::move(b));
        m.tools = nullptr;  // upstream rebuilds user messages without their other fields
        m.response_format = nullptr;
        merged.push_back(std::move(m));
      }
    } else {
      merged.push_back(std::move(m));
    }
  }
  return merged;
}

// sort_tool_results_by_call_order(): results of a user turn follow the order of the calls of
// the last assistant message with calls; unknown ids sort as position 0; text stays put.
// Positions come from a hash map and the results are placed by a stable counting sort, so a
// turn costs O(results + calls) (an agent may send thousands of results in one turn).
void sort_tool_results(std::vector<Msg>& msgs) {
  std::unordered_map<std::string_view, size_t> order;  // id -> position (later duplicates win)
  size_t n_calls = 0;
  for (Msg& m : msgs) {
    if (m.role == "assistant" && !m.tool_calls.empty()) {
      order.clear();
      n_calls = m.tool_calls.size();
      // The views point into this message, which outlives its use here (msgs is not resized).
      for (size_t i = 0; i < n_calls; ++i)
        if (!m.tool_calls[i].id.empty()) order[m.tool_calls[i].id] = i;
    } else if (m.role == "user") {
      std::vector<size_t> slots, pos;  // the result blocks' indices and their call positions
      for (size_t k = 0; k < m.blocks.size(); ++k) {
        if (!m.blocks[k].is_tool_result) continue;
        slots.push_back(k);
        auto it = order.find(m.blocks[k].tool_use_id);
        pos.push_back(it == order.end() ? 0 : it->second);
      }
      if (slots.size() <= 1 || order.empty()) continue;
      std::vector<size_t> start(n_calls + 1, 0);  // counting sort: stable, by position
      for (size_t p : pos) ++start[p + 1];
      for (size_t i = 1; i <= n_calls; ++i) start[i] += start[i - 1];
      std::vector<Block> sorted(slots.size());
      for (size_t i = 0; i < slots.size(); ++i) sorted[start[pos[i]]++] = std::move(m.blocks[slots[i]]);
      for (size_t i = 0; i < slots.size(); ++i) m.blocks[slots[i]] = std::move(sorted[i]);
    }
  }
}

int last_user_index(const std::vector<Msg>& msgs) {
  for (size_t i = msgs.size(); i-- > 0;)
    if (is_user_like(msgs[i])) return static_cast<int>(i);
  return -1;
}

// _drop_thinking_messages(): before the last user turn, assistants lose their reasoning and
// developer messages disappear.
std::vector<Msg> drop_thinking_messages(const std::vector<Msg>& msgs) {
  const int last_user = last_user_index(msgs);
  std::vector<Msg> out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Msg& m = msgs[i];
    const bool keep_role = m.role == "user" || m.role == "system" || m.role == "latest_reminder";
    if (keep_role || static_cast<int>(i) >= last_user) {
      out.push_back(m);
    } else if (m.role == "assistant") {
      out.push_back(m);
      out.back().reasoning.clear();
    }
  }
  return out;
}

std::string_view effort_text(const ChatOptions& opts) {
  const auto& e = opts.reasoning_effort;
  if (opts.variant == ChatVariant::v4) {
    HS_CHECK(!e || *e == "high" || *e == "max", "reasoning_effort: the v4 encoder accepts high or max, got '",
             *e, "'");
    return e && *e == "max" ? ds4::kEffortAbsoluteMax : std::string_view();
  }
  HS_CHECK(!e || *e == "low" || *e == "high" || *e == "max",
           "reasoning_effort: the v4-0731 encoder accepts low, high or max, got '", *e, "'");
  if (e && *e == "high") return ds4::kEffortAbsoluteMax;
  if (e && *e == "max") return ds4::kEffortBeyondMax;
  return {};
}

// The tools block: the template's text around the client's schemas (literal: a description may
// say anything, it never becomes a control token).
void render_tools(PromptText& out, const ojson& functions) {
  out.tmpl(ds4::kToolsBlockPrefix);
  for (size_t i = 0; i < functions.size(); ++i) {
    if (i) out.tmpl("\n");
    out.lit(py_json_dumps(functions[i]));
  }
  out.tmpl(ds4::kToolsBlockSuffix);
}

// The "\n\n"-separated tools and response-format sections of a system/developer message.
void append_system_extras(PromptText& out, const Msg& m) {
  if (!m.tools.is_null()) {
    out.tmpl("\n\n");
    render_tools(out, m.tools);
  }
  if (!m.response_format.is_null()) {
    out.tmpl("\n\n");
    out.tmpl(ds4::kResponseFormatPrefix);
    out.lit(py_json_dumps(m.response_format));
  }
}

struct Rendered {
  PromptText body;
  std::string transition;  // what follows the message when the model speaks next (template only)
};

Rendered render_message(size_t index, const std::vector<Msg>& msgs, const ChatOptions& opts, bool drop_thinking,
                        int last_user) {
  const Msg& m = msgs[index];
  const bool thinking = opts.thinking_mode == ThinkingMode::thinking;
  Rendered r;
  PromptText& p = r.body;
  if (index == 0 && thinking) p.tmpl(effort_text(opts));

  if (m.role == "system") {
    p.lit(m.content);
    append_system_extras(p, m);
  } else if (m.role == "developer") {
    p.tmpl(ds4::kUser);
    p.lit(m.content);
    append_system_extras(p, m);
  } else if (m.role == "user") {
    p.tmpl(ds4::kUser);
    for (size_t k = 0; k < m.blocks.size(); ++k) {
      if (k) p.tmpl("\n\n");
      const Block& b = m.blocks[k];
      if (b.is_tool_result) {
        p.tmpl(ds4::kToolResultOpen);
        p.lit(b.text);
        p.tmpl(ds4::kToolResultClose);
      } else {
        p.lit(b.text);
      }
    }
  } else if (m.role == "latest_reminder") {
    p.tmpl(ds4::kLatestReminder);
    p.lit(m.content);
  } else if (m.role == "assistant") {
    // After a task message the assistant turn is the task's answer: never a reasoning part.
    const bool prev_task = index > 0 && msgs[index - 1].task.has_value();
    if (thinking && !prev_task && (!drop_thinking || static_cast<int>(index) > last_user)) {
      p.lit(m.reasoning);
      p.tmpl(ds4::kThinkEnd);
    }
    p.lit(m.content);
    std::vector<DsmlCall> calls;
    for (const auto& tc : m.tool_calls) calls.push_back(tc.call);
    std::vector<TextSpan> spans;
    const std::string block = render_dsml_block(calls, &spans);
    p.append(block, spans);
    if (!m.wo_eos) p.tmpl(ds4::kEos);
  } else {
    fail("messages: role '", m.role, "' cannot be rendered");
  }

  // The transition is written only where the model speaks next: at the end, or before an
  // assistant / latest_reminder message.
  if (index + 1 < msgs.size() && msgs[index + 1].role != "assistant" && msgs[index + 1].role != "latest_reminder")
    return r;
  std::string& t = r.transition;
  size_t turn = index;  // the message whose turn the transition ends
  if (opts.system_in_user_turn && m.role == "system") {
    while (turn > 0 && msgs[turn - 1].role == "system") --turn;
    if (turn > 0 && is_user_like(msgs[turn - 1]) && !msgs[turn - 1].task) {
      --turn;
    } else if (index + 1 == msgs.size()) {
      t += assistant_prefix(opts.thinking_mode);  // nothing to answer but the system text
      return r;
    }
  }
  if (m.task) {
    std::string_view token;
    for (const auto& tt : ds4::kTaskTokens)
      if (tt.task == *m.task) token = tt.token;
    if (*m.task == "action") {
      t += ds4::kAssistant;
      t += thinking ? ds4::kThinkStart : ds4::kThinkEnd;
    }
    t += token;
  } else if (is_user_like(msgs[turn])) {
    t += ds4::kAssistant;
    const bool open = thinking && (!drop_thinking || static_cast<int>(turn) >= last_user);
    t += open ? ds4::kThinkStart : ds4::kThinkEnd;
  }
  return r;
}

}  // namespace

ChatPrompt render_messages(std::vector<Msg> context, std::vector<Msg> messages, const ChatOptions& opts) {
  effort_text(opts);  // validate even when nothing gets rendered in thinking mode
  context = merge_tool_messages(std::move(context));
  messages = merge_tool_messages(std::move(messages));
  std::vector<Msg> full = context;
  full.insert(full.end(), messages.begin(), messages.end());
  sort_tool_results(full);  // the order of calls carries over from the context

  PromptText text;
  if (opts.add_bos && context.empty()) text.tmpl(ds4::kBos);

  bool drop = opts.drop_thinking;
  for (const Msg& m : full) drop = drop && m.tools.is_null();  // tools anywhere: keep reasoning

  size_t first = context.size();
  if (opts.thinking_mode == ThinkingMode::thinking && drop) {
    // As upstream: the new messages are those beyond the length the context has after its
    // own dropping (a developer message ending the context can shift this by one; kept).
    full = drop_thinking_messages(full);
    first = std::min(drop_thinking_messages(context).size(), full.size());
  }
  const int last_user = last_user_index(full);
  ChatPrompt out;
  for (size_t i = first; i < full.size(); ++i) {
    Rendered r = render_message(i, full, opts, drop, last_user);
    text.append(r.body);
    text.tmpl(r.transition);
    out.generation_prefix = r.transition;
  }
  out.text = std::move(text.text);
  out.literal = std::move(text.literal);
  out.starts_in_reasoning = out.generation_prefix == assistant_prefix(ThinkingMode::thinking);
  return out;
}

}  // namespace hs::chat_detail
