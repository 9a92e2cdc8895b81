#include "server/generation.h"

#include "tokenizer/chat_tokens.h"
#include "util/error.h"

namespace hs::server {

const char* finish_name(Finish f) {
  switch (f) {
    case Finish::stop: return "stop";
    case Finish::stop_sequence: return "stop_sequence";
    case Finish::length: return "length";
    case Finish::tool_calls: return "tool_calls";
    case Finish::cancelled: return "cancelled";
    case Finish::error: return "error";
  }
  return "?";
}

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

Generation::Generation(Private, Scheduler& scheduler, const Tokenizer& tokenizer, GenerationSpec spec,
                       std::function<void(const GenOutcome&)> on_finish)
    : scheduler_(scheduler),
      tok_(tokenizer),
      spec_(std::move(spec)),
      on_finish_(std::move(on_finish)),
      decoder_(tokenizer.stream_decoder()),
      stops_(spec_.stop) {
  if (spec_.chat) parser_.emplace(spec_.parser);
}

Generation::~Generation() = default;

std::shared_ptr<Generation> Generation::start(Scheduler& scheduler, const Tokenizer& tokenizer, GenerationSpec spec,
                                              std::function<void(const GenOutcome&)> on_finish) {
  auto g = std::make_shared<Generation>(Private{}, scheduler, tokenizer, std::move(spec), std::move(on_finish));
  const int32_t eos = tokenizer.special_ids().eos;
  GenerationRequest req;
  req.prompt = g->spec_.prompt;
  if (const size_t tail = g->spec_.prefill_tail; g->spec_.forced && tail > 0 && req.prompt.size() > tail)
    req.prompt.erase(req.prompt.begin(), req.prompt.end() - static_cast<std::ptrdiff_t>(tail));
  req.max_tokens = g->spec_.max_tokens;
  req.sampling = g->spec_.sampling;
  if (!g->spec_.logprobs) req.sampling.top_logprobs = 0;
  req.logprobs = g->spec_.logprobs;  // (else the token may be sampled on the device, without a logprob)
  if (!g->spec_.ignore_eos && eos >= 0) req.stop_tokens = {eos};
  req.test_fail_after = g->spec_.fail_after;
  req.constraint = g->spec_.constraint;
  req.on_token = [g](const SampleResult& r) { return g->on_token(r); };
  req.on_done = [g](FinishReason reason, const std::string& error) { g->on_done(reason, error); };
  // (A test's prefill tail is not the prompt's state: nothing of it is cached.)
  req.use_cache = g->spec_.use_cache && req.prompt.size() == g->spec_.prompt.size();
  req.cache_points = g->spec_.cache_points;
  req.on_start = [g](int64_t cached) {
    std::lock_guard<std::mutex> lk(g->mu_);
    g->outcome_.cached_tokens = cached;
  };
  req.on_draft = [g](int drafted, int accepted) {
    std::lock_guard<std::mutex> lk(g->mu_);
    g->outcome_.drafted_tokens += drafted;
    g->outcome_.accepted_tokens += accepted;
  };
  if (g->spec_.forced) {
    req.forced_token = [ids = *g->spec_.forced, eos](int64_t step) -> int32_t {
      if (step < static_cast<int64_t>(ids.size())) return ids[static_cast<size_t>(step)];
      return eos >= 0 ? eos : (ids.empty() ? 0 : ids.back());
    };
  }
  if (const int32_t think_end = tokenizer.special_ids().think_end; g->parser_ && g->spec_.reasoning_budget >= 0 && think_end >= 0)
    req.override_token = [g, think_end](int64_t) { return g->over_budget() ? think_end : -1; };
  g->t_start_ = std::chrono::steady_clock::now();
  if (g->spec_.hold_prefill.count() > 0) {
    g->release_at_ = g->t_start_ + g->spec_.hold_prefill;
    g->held_ = std::move(req);
    return g;
  }
  g->id_ = scheduler.submit(std::move(req));
  return g;
}

void Generation::release_held() {
  std::optional<GenerationRequest> req;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!held_ || std::chrono::steady_clock::now() < release_at_) return;
    req = std::move(held_);
    held_.reset();
  }
  try {
    id_ = scheduler_.submit(std::move(*req));
  } catch (const std::exception& e) {  // (the shutdown began while it was held)
    on_done(FinishReason::Error, e.what());
    return;
  }
  if (cancelled()) scheduler_.cancel(id_);  // cancel() ran while it was being submitted
}

// Runs on the scheduler thread before each token is taken, after the previous one was parsed.
bool Generation::over_budget() const {
  return parser_->in_reasoning() && reasoning_tokens_ >= spec_.reasoning_budget;
}

bool Generation::on_token(const SampleResult& r) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (cancel_requested_) return false;
  }
  const auto now = std::chrono::steady_clock::now();
  if (generated_++ == 0) t_first_ = now;
  t_last_ = now;
  std::vector<GenEvent> ev;
  const int32_t eos = tok_.special_ids().eos;
  if (r.token == eos && !spec_.ignore_eos) {  // the stop token: the scheduler ends the request
    saw_eos_ = true;
    end_text(ev);
    push(std::move(ev), std::nullopt);
    return true;
  }
  if (parser_ && parser_->in_reasoning()) ++reasoning_tokens_;
  std::optional<TokenInfo> info;
  if (spec_.logprobs) info = TokenInfo{r.token, r.logprob, r.top};
  std::string piece;
  if (r.token >= 0 && r.token < tok_.vocab_size() && r.token != eos) piece = decoder_.push(r.token);
  feed_text(stops_.push(piece), ev);
  const bool go_on = !stops_.matched();
  if (!go_on) end_text(ev);
  push(std::move(ev), std::move(info));
  return go_on;
}

namespace {
void append_parsed(std::vector<ParseEvent> parsed, std::vector<GenEvent>& out) {
  for (auto& e : parsed) {
    switch (e.kind) {
      case ParseEvent::Kind::reasoning_delta: out.push_back({GenEvent::Kind::reasoning, std::move(e.text), {}}); break;
      case ParseEvent::Kind::content_delta: out.push_back({GenEvent::Kind::text, std::move(e.text), {}}); break;
      case ParseEvent::Kind::tool_call: out.push_back({GenEvent::Kind::tool_call, {}, std::move(e.call)}); break;
    }
  }
}
}  // namespace

void Generation::feed_text(const std::string& text, std::vector<GenEvent>& out) {
  if (text.empty()) return;
  if (parser_) append_parsed(parser_->feed(text), out);
  else out.push_back({GenEvent::Kind::text, text, {}});
}

// The end of the text (EOS, a stop sequence, or the end of the request): releases what the
// decoder, the stop matcher and the parser held back.
void Generation::end_text(std::vector<GenEvent>& out) {
  if (text_ended_) return;
  text_ended_ = true;
  std::string tail = stops_.push(decoder_.flush());
  tail += stops_.flush();
  feed_text(tail, out);
  if (!parser_) return;
  if (saw_eos_) feed_text(std::string(ds4::kEos), out);
  append_parsed(parser_->finish(), out);
}

void Generation::push(std::vector<GenEvent> events, std::optional<TokenInfo> token) {
  if (events.empty() && !token) return;
  std::function<void()> notify;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : events) events_.push_back(std::move(e));
    if (token) tokens_.push_back(std::move(*token));
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
}

void Generation::set_notify(std::function<void()> fn) {
  std::lock_guard<std::mutex> lk(mu_);
  notify_ = std::move(fn);
}

void Generation::on_done(FinishReason reason, const std::string& error) {
  std::vector<GenEvent> ev;
  std::string failure;
  try {
    end_text(ev);
  } catch (const std::exception& e) {  // on the scheduler thread: never throw out of here
    failure = e.what();
  }
  GenOutcome o;
  std::function<void()> notify;
  bool cancel_requested;
  {
    std::lock_guard<std::mutex> lk(mu_);
    cancel_requested = cancel_requested_;
  }
  const bool has_calls = parser_ && !parser_->result().tool_calls.empty();
  if (reason == FinishReason::Error || reason == FinishReason::Unavailable || !failure.empty()) {
    o.finish = Finish::error;
    o.error = !error.empty() ? error : !failure.empty() ? failure : "generation failed";
    if (reason == FinishReason::Unavailable) o.error_status = 503;
  } else if (reason == FinishReason::Cancelled || (cancel_requested && !saw_eos_ && !stops_.matched())) {
    o.finish = Finish::cancelled;
    o.error = "the request was cancelled";
  } else if (stops_.matched()) {
    o.finish = Finish::stop_sequence;
    o.stop_sequence = stops_.which();
  } else if (has_calls) {
    o.finish = Finish::tool_calls;
  } else if (reason == FinishReason::Length) {
    o.finish = Finish::length;
  } else {
    o.finish = Finish::stop;
  }
  o.prompt_tokens = static_cast<int64_t>(spec_.prompt.size());
  o.completion_tokens = generated_;
  o.reasoning_tokens = reasoning_tokens_;
  const auto end = std::chrono::steady_clock::now();
  o.total_s = seconds(end - t_start_);
  if (generated_ > 0) {
    o.queue_s = seconds(t_first_ - t_start_);
    o.decode_s = seconds(t_last_ - t_first_);
  }
  if (parser_ && failure.empty()) o.warnings = parser_->result().warnings;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (auto& e : ev) events_.push_back(std::move(e));
    o.cached_tokens = outcome_.cached_tokens;  // (set when the request started)
    o.drafted_tokens = outcome_.drafted_tokens;  // (counted as it went)
    o.accepted_tokens = outcome_.accepted_tokens;
    outcome_ = o;
    done_ = true;
    notify = notify_;
  }
  cv_.notify_all();
  if (notify) notify();
  if (on_finish_) on_finish_(o);
}

GenBatch Generation::next(std::chrono::milliseconds timeout) {
  release_held();
  GenBatch b;
  std::unique_lock<std::mutex> lk(mu_);
  auto until = std::chrono::steady_clock::now() + timeout;
  if (held_) until = std::min(until, release_at_);
  cv_.wait_until(lk, until, [&] { return done_ || !events_.empty() || !tokens_.empty(); });
  b.events.swap(events_);
  b.tokens.swap(tokens_);
  if (done_) {
    b.done = true;
    b.outcome = outcome_;
  }
  return b;
}

void Generation::cancel() {
  bool was_held = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (done_ || cancel_requested_) return;
    cancel_requested_ = true;
    was_held = held_.has_value();
    held_.reset();
  }
  if (was_held) on_done(FinishReason::Cancelled, "");  // the scheduler never saw it
  else scheduler_.cancel(id_);
}

bool Generation::cancelled() const {
  std::lock_guard<std::mutex> lk(mu_);
  return cancel_requested_;
}

}  // namespace hs::server
