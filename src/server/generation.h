// One generation over the Scheduler, as both the HTTP APIs and `hyperstream run` drive it:
// the generated ids are decoded incrementally (UTF-8 safe), matched against text stop
// sequences across token boundaries (a match ends the generation and is not emitted), and,
// for chat, split by the DSML parser into reasoning, content and tool calls.
//
// The text work runs in the scheduler's on_token callback (microseconds per token), so a stop
// sequence ends the sequence in the same step. Consumers pull batches of events from any
// thread with next(); cancel() (a client gone) frees the slot within one scheduler step.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/scheduler.h"
#include "server/output_format.h"
#include "server/stop_matcher.h"
#include "tokenizer/bpe.h"
#include "tokenizer/dsml_parser.h"

namespace hs::server {

struct GenerationSpec {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;         // no stop token: always max_tokens tokens (benchmarks)
  std::vector<std::string> stop;   // text stop sequences
  bool logprobs = false;           // report each token's logprob (+ sampling.top_logprobs alternatives)
  bool chat = false;               // parse the output as a DeepSeek-V4 assistant turn
  DsmlParserOptions parser;        // chat only
  OutputFormat format;             // what the output must be (text: unconstrained)
  // Prefix cache: whether the request may use it, and the positions of the prompt worth a
  // snapshot (after each chat-turn marker; Service::start fills them).
  bool use_cache = true;
  std::vector<int64_t> cache_points;
  // Chat with the output starting in reasoning: after this many reasoning tokens the next one
  // is "</think>" (Anthropic thinking.budget_tokens). < 0: no budget.
  int64_t reasoning_budget = -1;
  // The format compiled for the scheduler (Service::start fills it from `format`).
  std::shared_ptr<TokenConstraint> constraint;
  // Test-only: when set, the output is these ids (then EOS) instead of sampled ones.
  std::optional<std::vector<int32_t>> forced;
  // Test-only: >= 0 makes the engine fail after this many tokens (GenerationRequest::test_fail_after).
  int64_t fail_after = -1;
  // Test-only: the request reaches the scheduler only this long after start(), as if its
  // prefill took that long (keep-alive tests). Taken in by next(), so someone must call it.
  std::chrono::milliseconds hold_prefill{0};
  // Test-only: with forced output, only the prompt's last N tokens go through the engine (> 0).
  // The answer does not depend on them, and the agent-CLI tests' 30K-token prompts would
  // otherwise take minutes to prefill on the CPU. Usage still counts the whole prompt.
  size_t prefill_tail = 0;
};

struct TokenInfo {
  int32_t id = -1;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

struct GenEvent {
  enum class Kind { text, reasoning, tool_call };  // text: content (chat) or raw completion text
  Kind kind = Kind::text;
  std::string text;
  ToolCall call;
};

enum class Finish { stop, stop_sequence, length, tool_calls, cancelled, error };
const char* finish_name(Finish f);

struct GenOutcome {
  Finish finish = Finish::stop;
  std::string stop_sequence;  // Finish::stop_sequence: which one matched
  std::string error;          // Finish::error / cancelled: why
  int error_status = 500;     // Finish::error: the HTTP status (503: the engine's pipeline went down)
  int64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t reasoning_tokens = 0;  // of completion_tokens: generated inside the reasoning (chat)
  int64_t cached_tokens = 0;     // of prompt_tokens: restored from the prefix cache
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding (--draft): drafted, of those accepted
  double queue_s = 0;   // submit to first token, the prefill included
  double total_s = 0;   // submit to the end
  double decode_s = 0;  // first token to last token
  std::vector<std::string> warnings;  // of the DSML parser (malformed tool calls)
};

struct GenBatch {
  std::vector<GenEvent> events;
  std::vector<TokenInfo> tokens;  // logprobs of the tokens generated since the last batch
  bool done = false;
  GenOutcome outcome;             // valid when done
};

class Generation {
 public:
  // Submits the request; throws hs::Error when the scheduler rejects it (too long, shutting
  // down). `on_finish` (optional) runs once, on the scheduler thread, with the outcome.
  static std::shared_ptr<Generation> start(Scheduler& scheduler, const Tokenizer& tokenizer, GenerationSpec spec,
                                           std::function<void(const GenOutcome&)> on_finish = {});
  ~Generation();

  // Waits up to `timeout` for events or the end; returns what arrived (possibly nothing).
  GenBatch next(std::chrono::milliseconds timeout);
  // Called whenever events or the end arrive (on the scheduler thread, outside any lock of
  // this object), so an event loop can pull next(0) instead of blocking a thread in next();
  // it must be quick and must not call set_notify. Empty: none.
  void set_notify(std::function<void()> fn);
  // Stops the generation (idempotent); the outcome becomes `cancelled` unless it already ended.
  void cancel();
  bool cancelled() const;
  const std::vector<int32_t>& prompt() const { return spec_.prompt; }

  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

 private:
  struct Private {};

 public:
  Generation(Private, Scheduler& scheduler, const Tokenizer& tokenizer, GenerationSpec spec,
             std::function<void(const GenOutcome&)> on_finish);

 private:
  // A request held back by spec.hold_prefill goes to the scheduler once its time has come.
  void release_held();
  // Scheduler-thread side.
  bool on_token(const SampleResult& r);
  bool over_budget() const;
  void on_done(FinishReason reason, const std::string& error);
  void feed_text(const std::string& text, std::vector<GenEvent>& out);
  void end_text(std::vector<GenEvent>& out);
  void push(std::vector<GenEvent> events, std::optional<TokenInfo> token);

  Scheduler& scheduler_;
  const Tokenizer& tok_;
  GenerationSpec spec_;
  std::function<void(const GenOutcome&)> on_finish_;
  std::atomic<uint64_t> id_{0};
  std::chrono::steady_clock::time_point t_start_, t_first_, t_last_;

  // Touched only by the scheduler thread while the request runs.
  StreamDecoder decoder_;
  StopMatcher stops_;
  std::optional<DsmlParser> parser_;
  int64_t generated_ = 0;
  int64_t reasoning_tokens_ = 0;
  bool saw_eos_ = false;
  bool text_ended_ = false;

  // Shared with consumers.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<GenEvent> events_;
  std::vector<TokenInfo> tokens_;
  bool done_ = false;
  bool cancel_requested_ = false;
  GenOutcome outcome_;
  std::optional<GenerationRequest> held_;  // spec.hold_prefill: not yet submitted
  std::function<void()> notify_;
  std::chrono::steady_clock::time_point release_at_;
};

}  // namespace hs::server
