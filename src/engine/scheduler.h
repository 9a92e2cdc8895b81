// Continuous batching over an Engine: up to max_seqs sequences in flight; each step is one
// Engine::step_batch that gives every decoding sequence one token and the prefilling ones
// chunks of at most prefill_chunk tokens (within max_step_tokens rows), so a long prompt never
// stalls the others and the weights are streamed once per step, not once per sequence.
//
// Admission is by state pages (engine/state_pool.h): a request starts when the pages of its
// prompt and a first stretch of output are free, counting what the running ones still need
// for theirs; its pages grow as it decodes. When a step finds the pool full, the newest running
// sequence is preempted: its pages go back, and once pages are free again it recomputes its
// state from its prompt and the tokens it had generated (no logits are sampled for that), then
// goes on, so its output is what it would have been. Requests talk to the scheduler through
// callbacks, called on the scheduler thread; a callback returning false (or cancel()) ends the
// request within one step.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/prefix_cache.h"
#include "engine/sampler.h"
#include "engine/speculative.h"
#include "engine/token_constraint.h"

namespace hs {

// Unavailable: the engine's pipeline of ranks went down (engine/rank_link.h PipelineDown); the
// server answers 503 and stops.
enum class FinishReason { Stop, Length, Cancelled, Error, Unavailable };
const char* finish_reason_name(FinishReason r);

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 256;
  SamplingParams sampling;
  // Whether on_token reads SampleResult::logprob (top needs sampling.top_logprobs > 0): only
  // the host sampler fills them, so such a request is never sampled on the device.
  bool logprobs = false;
  std::vector<int32_t> stop_tokens;  // generation ends after emitting one of these (e.g. EOS)
  // Structured output: masks the logits before sampling (so the request is sampled on the
  // host), is told every token, and ends the request once the output is complete.
  std::shared_ptr<TokenConstraint> constraint;
  // Called for each generated token; return false to stop (e.g. a stop string matched, or
  // the client went away). Runs on the scheduler thread: keep it short.
  std::function<bool(const SampleResult&)> on_token;
  // Called exactly once at the end.
  std::function<void(FinishReason, const std::string& error)> on_done;
  // Test-only hook: when set, replaces sampling (the tool-call tests force model output).
  std::function<int32_t(int64_t step)> forced_token;
  // Called after each token is chosen (sampled, or forced): a value >= 0 replaces it (a
  // thinking budget ends the reasoning with "</think>"); its logprob then reads 0.
  std::function<int32_t(int64_t step)> override_token;
  // Test-only hook: >= 0 makes the engine step of this request throw (as a failing engine
  // would) once this many tokens were generated; 0 fails in the prefill. The request ends
  // with FinishReason::Error and its slot is freed.
  int64_t test_fail_after = -1;
  // Prefix cache (SchedulerOptions::cache): positions inside the prompt worth a snapshot (the
  // chat-turn boundaries), besides the prompt's end and the generation's end, which always are.
  std::vector<int64_t> cache_points;
  bool use_cache = true;
  // Called once as the request starts, with how many prompt tokens came from the cache.
  std::function<void(int64_t cached)> on_start;
  // Speculative decoding (SchedulerOptions::draft_max): called after each verify step with the
  // tokens drafted and accepted in it (the per-request usage).
  std::function<void(int drafted, int accepted)> on_draft;
  // Test-only hook: drafts these tokens (at most k; q one-hot at each) instead of the drafter,
  // at the full --draft-max length, so a test can force acceptance (the true continuation) or
  // rejection. Works without a drafter.
  std::function<std::vector<int32_t>(int64_t generated, int k)> test_drafts;
  // Test-only hook: >= 0 makes the drafter's pass throw (as a failing drafter would) once this
  // many tokens were generated; the drafting requests then decode plainly.
  int64_t test_drafter_fail_after = -1;
};

struct SchedulerOptions {
  int max_seqs = 4;
  int prefill_chunk = 256;
  int64_t ctx_size = 0;             // prompt + max_tokens must fit; 0: the engine's (its pools' max context)
  // Rows (tokens) of one batched engine step over all slots; 0: prefill_chunk + max_seqs, so
  // every decoder gets its token and prompt chunks share the rest. (Last: callers brace-init
  // the fields above.)
  int64_t max_step_tokens = 0;
  // Sample on the device where the engine's last backend can (Engine::can_sample) and the
  // request allows it (no penalties, no logprobs, no forced_token): only the token ids are
  // downloaded, not each sequence's logits row. Off: every token is sampled on the host.
  bool device_sampling = true;
  // Restores prompts' cached prefixes and keeps snapshots (engine/prefix_cache.h); null: none.
  // Used on the scheduler's thread only; it must outlive the scheduler.
  PrefixCache* cache = nullptr;
  // Speculative decoding (engine/speculative.h) with the engine's drafter (Engine::drafter):
  // at most this many drafted tokens verified per step and sequence (the length adapts to each
  // request's acceptance); 0: off. At most the engine's rollback (EngineOptions::max_rollback).
  // Requests with penalties, logprobs, a constraint, forced or overridden tokens do not draft.
  int draft_max = 0;
  // The DSpark drafter's verify length (docs/speculative.md): drafts up to the first whose
  // confidence sigmoid is below this (0: the whole block, capped by draft_max).
  float draft_confidence = 0.5f;
  // Called once (on the scheduler's thread) when the engine's pipeline of ranks goes down: every
  // request then ends as Unavailable and submit refuses with PipelineDown (serve exits).
  std::function<void(const std::string& why)> on_down = nullptr;
};

struct SchedulerStats {
  int64_t requests_total = 0, requests_active = 0, queue_depth = 0;
  int64_t prompt_tokens_total = 0, generated_tokens_total = 0;
  double prefill_seconds = 0, decode_seconds = 0;  // time spent in each kind of step
  int64_t prefill_tokens = 0, decode_tokens = 0;
  int64_t device_sampled_tokens = 0;                // of generated_tokens_total: sampled on the device
  int64_t constrained_tokens = 0;                   // of generated_tokens_total: under a TokenConstraint
  double constraint_seconds = 0;                    // time in TokenConstraint::mask and accept
  StepGraphStats graphs;                            // decode steps as CUDA graphs (engine/step_graphs.h)
  size_t state_bytes = 0;                           // state pool memory the live sequences hold
  EngineStateStats pages;                           // the engine's state pools
  int64_t preemptions = 0;                          // sequences whose pages were taken back mid-run
  int64_t cached_prompt_tokens = 0;                 // of prompt_tokens_total: restored from the prefix cache
  PrefixCacheStats cache;                           // (refreshed at most every 200 ms)
  int64_t drafted_tokens = 0, accepted_tokens = 0;  // speculative decoding: drafted / of those accepted
  int64_t verify_steps = 0;                         // sequence-steps that verified drafts
  int64_t draft_probes = 0;                         // shadow probes of backed-off requests (not verified)
  int64_t decode_steps = 0;                         // engine steps with at least one decoding sequence
  int max_seqs = 0;
};

class Scheduler {
 public:
  Scheduler(Engine& engine, const SchedulerOptions& opts);
  ~Scheduler();  // stops the loop; in-flight requests finish as Cancelled

  // Checks the request (non-empty prompt, ids in the vocabulary, prompt + max_tokens <=
  // ctx_size and within what the state pool can hold) and queues it. Throws hs::Error with the
  // numbers when it cannot be admitted.
  uint64_t submit(GenerationRequest req);
  void cancel(uint64_t id);
  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return opts_; }
  // Stops taking requests; with finish=true waits for the running ones, else cancels them.
  void shutdown(bool finish);

 private:
  struct Slot;
  void loop();
  void step_once();
  bool admissible(const Slot& s, int64_t free_pages) const;   // the pages its next stretch needs are free
  int64_t pages_wanted(const Slot& s) const;                  // pages its next stretch will hold in all
  void preempt(Slot& s);
  void start(Slot& s, bool resumed);                         // restores its cached prefix, on_start
  void keep_snapshot(Slot& s, std::span<const int32_t> tokens);  // into the prefix cache
  void finish(Slot& s, FinishReason r, const std::string& err);  // ends the request, frees the slot
  void go_down(const std::string& why);  // the pipeline is gone: every request ends Unavailable
  // The chosen token goes out (counts, on_token, stop tokens, max_tokens); false once the request ended.
  bool emit(Slot& s, const SampleResult& r, bool device, bool constrained, double constraint_secs);
  // Speculative decoding (scheduler_draft.cpp).
  bool may_draft(const GenerationRequest& q) const;
  void make_drafts(const std::vector<Slot*>& live);             // step step_no_'s drafts of the decoders
  void feed_drafter(const std::vector<Slot*>& slots);           // complete pending rows into the drafter
  void keep_rows(Slot& s, const StepItem& item, bool prefill);  // a step's rows become pending drafter rows
  // The DSpark drafter (scheduler_dspark.cpp): blocks of at most k drafts for each (slot, k), in
  // one drafter pass; rows p0..p0+n-1 of this step (their taps, Slot::taps) queued for its
  // context, and the step's queued rows committed in one pass.
  void make_dspark_drafts(const std::vector<std::pair<Slot*, int>>& want);
  void dspark_context(Slot& s, int64_t p0, int64_t n);
  void flush_dspark_context();
  struct DsparkRows {
    Slot* slot;
    uint64_t id;  // the request's: a slot that finished meanwhile is skipped
    int64_t p0, n;
  };
  std::vector<DsparkRows> dspark_rows_;
  void verify(Slot& s);                                         // acceptance, rollback, the tokens out
  void shadow_probe(Slot& s, int32_t token);                    // a backed-off probe's outcome
  void stop_drafting(Slot& s, const std::exception& e);          // the drafter failed: plain decoding from here

  Engine& engine_;
  SchedulerOptions opts_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, GenerationRequest>> queue_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<uint64_t> cancelled_;
  SchedulerStats stats_;
  uint64_t next_id_ = 1;
  uint64_t next_admitted_ = 1;
  int64_t step_no_ = 0;  // engine steps run so far (the drafters' probes fall on multiples: DraftLength)
  // Where a new greedy request's acceptance estimate starts (at most DraftLength::kStart): the
  // running mean (weighted 3:1 to the newest) of the final estimates of the greedy requests that
  // drafted, so that on a server whose drafts keep failing a new request does not first spend its
  // early steps verifying failing drafts. (Greedy only: a sampled request's drafting must depend
  // on it alone, its seed's tokens do.)
  double draft_prior_ = DraftLength::kStart;
  int probe_prior_ = DraftLength::kProbeMin;  // the probe interval the last greedy drafting request ended at
  bool stop_ = false, draining_ = false;
  std::string down_;  // what submit answers once the pipeline went down (empty: it is up)
  std::thread thread_;
};

}  // namespace hs
