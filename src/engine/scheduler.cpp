#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "util/error.h"
#include "util/log.h"
#include "engine/rank_link.h"
#include "engine/state_pool.h"
#include "engine/scheduler_slot.h"

namespace hs {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    case FinishReason::Unavailable: return "unavailable";
  }
  return "?";
}

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& opts) : engine_(engine), opts_(opts) {
  HS_CHECK(opts_.max_seqs >= 1, "--max-seqs must be at least 1, got ", opts_.max_seqs);
  HS_CHECK(opts_.prefill_chunk >= 1, "--prefill-chunk must be at least 1, got ", opts_.prefill_chunk);
  HS_CHECK(opts_.max_step_tokens >= 0, "max_step_tokens must be at least 0 (0: prefill_chunk + max_seqs), got ",
           opts_.max_step_tokens);
  if (opts_.ctx_size == 0) opts_.ctx_size = engine_.state_layout(0).max_context;
  const int rollback = engine_.state_layout(0).max_rollback;
  HS_CHECK(opts_.draft_max >= 0 && opts_.draft_max <= rollback, "--draft-max ", opts_.draft_max,
           ": at most ", rollback, " drafted tokens per step (what the state pools can roll back), at least 1; "
           "use --draft off for none");
  HS_CHECK(opts_.ctx_size >= 2, "--ctx-size must be at least 2, got ", opts_.ctx_size);
  HS_CHECK(opts_.ctx_size <= engine_.state_layout(0).max_context, "--ctx-size ", opts_.ctx_size,
           " is longer than the engine's state pools were made for (", engine_.state_layout(0).max_context,
           " tokens)");
  HS_CHECK(opts_.max_seqs <= engine_.state_stats().slots_total - engine_.state_stats().slots_used, "--max-seqs ",
           opts_.max_seqs, ": the engine's state pools have ", engine_.state_stats().slots_total - engine_.state_stats().slots_used,
           " free sequence slots (EngineOptions::max_seqs)");
  for (int i = 0; i < opts_.max_seqs; ++i) {
    auto s = std::make_unique<Slot>();
    s->seq = engine_.new_sequence();
    s->logits.resize(static_cast<size_t>(engine_.config().vocab_size));
    slots_.push_back(std::move(s));
  }
  stats_.max_seqs = opts_.max_seqs;
  stats_.pages = engine_.state_stats();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(false); }

uint64_t Scheduler::submit(GenerationRequest req) {
  HS_CHECK(!req.prompt.empty(), "the prompt is empty");
  HS_CHECK(req.max_tokens >= 1, "max_tokens must be at least 1, got ", req.max_tokens);
  const int64_t V = engine_.config().vocab_size;
  for (size_t i = 0; i < req.prompt.size(); ++i)
    HS_CHECK(req.prompt[i] >= 0 && req.prompt[i] < V, "prompt token #", i, " = ", req.prompt[i],
             " is outside the vocabulary [0, ", V, ")");
  const int64_t need = static_cast<int64_t>(req.prompt.size()) + req.max_tokens;
  HS_CHECK(need <= opts_.ctx_size, "the prompt has ", req.prompt.size(), " tokens and max_tokens is ", req.max_tokens,
           ": ", need, " tokens do not fit the context size of ", opts_.ctx_size);
  const EngineStateStats pages = engine_.state_stats();
  HS_CHECK(need <= pages.token_capacity, "the prompt has ", req.prompt.size(), " tokens and max_tokens is ",
           req.max_tokens, ": ", need, " tokens need ", engine_.pages_for(need), " state pages of ",
           engine_.state_layout(0).page, " positions, and the state pool holds ",
           pages.token_capacity / engine_.state_layout(0).page, " (", pages.token_capacity,
           " tokens; more with --state-memory)");
  std::lock_guard<std::mutex> lk(mu_);
  if (!down_.empty()) throw PipelineDown(down_);
  HS_CHECK(!draining_ && !stop_, "the server is shutting down");
  const uint64_t id = next_id_++;
  queue_.emplace_back(id, std::move(req));
  stats_.requests_total++;
  stats_.queue_depth = static_cast<int64_t>(queue_.size());
  cv_.notify_all();
  return id;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  cancelled_.push_back(id);
  cv_.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void Scheduler::shutdown(bool finish) {
  {
    std::unique_lock<std::mutex> lk(mu_);
    if (stop_ && !thread_.joinable()) return;
    draining_ = true;
    if (!finish) {
      for (auto& [id, r] : queue_) cancelled_.push_back(id);
      for (auto& s : slots_)
        if (s->busy) cancelled_.push_back(s->id);
    }
    cv_.notify_all();
    cv_.wait(lk, [&] {
      return queue_.empty() && std::none_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->busy; });
    });
    stop_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Scheduler::loop() {
  auto last_cache_stats = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  for (;;) {
    std::vector<std::pair<uint64_t, GenerationRequest>> cancelled_queued;
    std::vector<std::pair<Slot*, bool>> starting;  // admitted now (true: resumed after a preemption)
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] {
        return stop_ || !queue_.empty() || !cancelled_.empty() ||
               std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return s->busy; });
      });
      if (stop_) return;
      // Requests cancelled while still queued end here, without a slot.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (std::find(cancelled_.begin(), cancelled_.end(), it->first) != cancelled_.end()) {
          cancelled_queued.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      // Admit queued requests into free slots while their pages are free, counting what the
      // running ones still need for their next stretch: preempted ones first, then in order.
      int64_t free_pages = engine_.free_pages();
      for (auto& s : slots_)
        if (s->busy && !s->waiting)
          free_pages -= std::max<int64_t>(0, pages_wanted(*s) - static_cast<int64_t>(s->seq->shards.front()->cmp_pages().size()));
      std::vector<Slot*> waiting;
      for (auto& s : slots_)
        if (s->busy && s->waiting) waiting.push_back(s.get());
      std::sort(waiting.begin(), waiting.end(), [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
      // Pages the prefix cache holds are given back (down a tier) before anything waits for them.
      auto room_for = [&](const Slot& s) {
        if (admissible(s, free_pages) || !opts_.cache) return admissible(s, free_pages);
        const int64_t held = s.seq ? static_cast<int64_t>(s.seq->shards.front()->cmp_pages().size()) : 0;
        const int64_t before = engine_.free_pages();
        opts_.cache->make_room(before + pages_wanted(s) - held - free_pages);
        free_pages += engine_.free_pages() - before;
        return admissible(s, free_pages);
      };
      bool blocked = false;
      for (Slot* s : waiting) {
        if (!room_for(*s)) {
          blocked = true;  // keep the order: nothing newer goes before it
          break;
        }
        s->waiting = false;
        free_pages -= pages_wanted(*s);
        starting.emplace_back(s, true);
      }
      for (auto& s : slots_) {
        if (blocked || s->busy || queue_.empty()) continue;
        Slot probe;
        probe.req.prompt = queue_.front().second.prompt;
        probe.req.max_tokens = queue_.front().second.max_tokens;
        probe.feed = probe.req.prompt;
        if (!room_for(probe)) break;
        auto [id, req] = std::move(queue_.front());
        queue_.pop_front();
        s->busy = true;
        s->id = id;
        s->admitted = next_admitted_++;
        s->req = std::move(req);
        s->seq->reset();
        SamplingParams sp = s->req.sampling;
        sp.logprob = s->req.logprobs;  // (only such requests read it)
        s->sampler = std::make_unique<Sampler>(sp);
        s->feed = s->req.prompt;
        s->feed_done = 0;
        s->feed_samples = true;
        s->waiting = false;
        s->device_drawn = false;
        s->out.clear();
        s->last = -1;
        s->drafting = may_draft(s->req);
        // (A sampled request starts where its seed alone decides: see Slot::draft_clock.)
        s->draft_len = draws_uniform(s->req.sampling)
                           ? std::make_unique<DraftLength>(std::max(opts_.draft_max, 1))
                           : std::make_unique<DraftLength>(std::max(opts_.draft_max, 1),
                                                           std::min(DraftLength::kStart, draft_prior_), probe_prior_);
        s->clear_drafts();
        free_pages -= pages_wanted(*s);
        stats_.requests_active++;
        stats_.prompt_tokens_total += static_cast<int64_t>(s->req.prompt.size());
        starting.emplace_back(s.get(), false);
      }
      stats_.queue_depth = static_cast<int64_t>(queue_.size());
      // Forget cancellations of requests that are no longer anywhere (already finished).
      std::erase_if(cancelled_, [&](uint64_t id) {
        return std::none_of(slots_.begin(), slots_.end(), [&](const auto& s) { return s->busy && s->id == id; }) &&
               std::none_of(queue_.begin(), queue_.end(), [&](const auto& q) { return q.first == id; });
      });
    }
    for (auto& [id, req] : cancelled_queued)
      if (req.on_done) req.on_done(FinishReason::Cancelled, "");
    for (auto& [slot, resumed] : starting) start(*slot, resumed);
    step_once();
    const EngineStateStats pages = engine_.state_stats();  // (the pools are this thread's)
    const auto now = std::chrono::steady_clock::now();
    const bool refresh = opts_.cache && now - last_cache_stats > std::chrono::milliseconds(200);
    PrefixCacheStats cache;
    if (refresh) {
      cache = opts_.cache->stats();
      last_cache_stats = now;
    }
    std::lock_guard<std::mutex> lk(mu_);
    stats_.pages = pages;
    if (refresh) stats_.cache = cache;
    cv_.notify_all();  // shutdown() waits on progress
  }
}

// A request's cached prefix comes back (the prompt's last token is always computed: its logits
// are sampled); a resumed one's whole recompute may come from the cache.
void Scheduler::start(Slot& s, bool resumed) {
  int64_t got = 0;
  if (opts_.cache && s.req.use_cache && !s.feed.empty()) {
    const size_t limit = s.feed_samples ? s.feed.size() - 1 : s.feed.size();
    got = opts_.cache->restore(std::span<const int32_t>(s.feed.data(), s.feed.size()), static_cast<int64_t>(limit),
                               *s.seq);
    s.feed_done = static_cast<size_t>(got);
  }
  if (resumed) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.cached_prompt_tokens += got;
  }
  if (s.req.on_start) s.req.on_start(got);
}

void Scheduler::keep_snapshot(Slot& s, std::span<const int32_t> tokens) {
  try {
    opts_.cache->insert(tokens, *s.seq);
  } catch (const std::exception& e) {  // a cache that cannot keep it costs only the reuse
    log_warn("prefix cache: no snapshot of request ", s.id, ": ", e.what());
  }
}

// Nothing can run any more: the running requests and the queued ones end (503 in the server);
// later submits are refused.
void Scheduler::go_down(const std::string& why) {
  log_warn("the engine's pipeline went down: ", why);
  const std::string msg = cat("the model's pipeline of processes is down: ", why);
  std::deque<std::pair<uint64_t, GenerationRequest>> queued;
  {
    std::lock_guard<std::mutex> lk(mu_);
    down_ = msg;
    queued.swap(queue_);
    stats_.queue_depth = 0;
  }
  for (auto& s : slots_)
    if (s->busy) finish(*s, FinishReason::Unavailable, msg);
  for (auto& [id, req] : queued)
    if (req.on_done) req.on_done(FinishReason::Unavailable, msg);
  if (opts_.on_down) opts_.on_down(why);
}

void Scheduler::finish(Slot& s, FinishReason r, const std::string& err) {
  // The end of a generation is where the next turn of a conversation continues.
  if (opts_.cache && s.req.use_cache && (r == FinishReason::Stop || r == FinishReason::Length) &&
      s.seq->n_past() > static_cast<int64_t>(s.req.prompt.size())) {
    std::vector<int32_t> tokens = s.req.prompt;
    tokens.insert(tokens.end(), s.out.begin(), s.out.end());
    keep_snapshot(s, tokens);
  }
  if (s.drafting && s.draft_len && s.draft_len->judged() > 0 && !s.req.test_drafts &&
      !draws_uniform(s.req.sampling)) {
    draft_prior_ = 0.25 * draft_prior_ + 0.75 * s.draft_len->acceptance();
    probe_prior_ = s.draft_len->probe_every();
  }
  GenerationRequest req = std::move(s.req);
  s.sampler.reset();
  s.clear_drafts();
  s.seq->reset();  // its pages go back now
  const EngineStateStats pages = engine_.state_stats();
  {
    std::lock_guard<std::mutex> lk(mu_);
    s.busy = false;
    stats_.requests_active--;
    stats_.pages = pages;  // (before on_done: whoever it wakes sees the pages back)
  }
  if (req.on_done) req.on_done(r, err);
}

// The pages a slot's next stretch holds in all: its feed, plus up to a page of output beyond
// what it has generated (at most its max_tokens).
int64_t Scheduler::pages_wanted(const Slot& s) const {
  const int64_t page = engine_.state_layout(0).page;
  const int64_t prompt = static_cast<int64_t>(s.req.prompt.size());
  const int64_t upto = std::min<int64_t>(prompt + s.req.max_tokens, prompt + s.generated() + page);
  return engine_.pages_for(std::max<int64_t>(upto, static_cast<int64_t>(s.feed.size())));
}

bool Scheduler::admissible(const Slot& s, int64_t free_pages) const {
  const int64_t held = s.seq ? static_cast<int64_t>(s.seq->shards.front()->cmp_pages().size()) : 0;
  return pages_wanted(s) - held <= free_pages;
}

// The newest sequence gives its pages back: it recomputes its state once pages are free
// (prompt + generated tokens but the last, without sampling), then decodes on.
void Scheduler::preempt(Slot& s) {
  s.seq->reset();
  s.clear_drafts();
  s.feed = s.req.prompt;
  s.feed_samples = s.out.empty();
  if (!s.out.empty()) s.feed.insert(s.feed.end(), s.out.begin(), s.out.end() - 1);
  s.feed_done = 0;
  s.waiting = true;
  std::lock_guard<std::mutex> lk(mu_);
  stats_.preemptions++;
  log_info("request ", s.id, " preempted at ", s.generated(), " generated tokens: the state pool is full");
}

// One engine step over every busy slot: cancelled requests end first, a request whose test
// hook fires ends with Error before the step (so the batch it would have broken runs without
// it), then one Engine::step_batch gives each decoding slot one token and the prefilling ones
// their next chunks, and every slot whose prompt is done samples its next token.
void Scheduler::step_once() {
  std::vector<Slot*> live;
  for (auto& sp : slots_) {
    Slot& s = *sp;
    bool cancelled = false;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (!s.busy) continue;
      auto it = std::find(cancelled_.begin(), cancelled_.end(), s.id);
      if (it != cancelled_.end()) {
        cancelled_.erase(it);
        cancelled = true;
      }
    }
    if (cancelled) {
      finish(s, FinishReason::Cancelled, "");
    } else if (s.req.test_fail_after >= 0 && s.generated() >= s.req.test_fail_after) {
      const std::string e = cat("engine failure forced by a test hook after ", s.generated(), " tokens");
      log_warn("request ", s.id, " failed: ", e);
      finish(s, FinishReason::Error, e);
    } else if (!s.waiting) {
      live.push_back(&s);
    }
  }
  if (live.empty()) return;
  // Decoders first (one row each, always), then prompt chunks in admission order while the row
  // budget lasts (the oldest prompt gets at least one row, so prompts always progress): a long
  // prompt takes at most prefill_chunk rows of a step and never stalls decoding.
  std::stable_sort(live.begin(), live.end(), [](const Slot* a, const Slot* b) {
    const bool pa = a->feed_done < a->feed.size(), pb = b->feed_done < b->feed.size();
    return pa != pb ? pb : a->admitted < b->admitted;
  });
  std::vector<StepItem> items;
  std::vector<Slot*> stepped;
  int64_t prefill_rows = 0, decode_rows = 0;
  auto plan = [&] {
    items.clear();
    stepped.clear();
    prefill_rows = decode_rows = 0;
    int64_t budget = opts_.max_step_tokens > 0 ? opts_.max_step_tokens : int64_t{opts_.prefill_chunk} + opts_.max_seqs;
    for (Slot* s : live) {
      const size_t left = s->feed.size() - s->feed_done;
      const int64_t room = prefill_rows == 0 ? std::max<int64_t>(budget, 1) : budget;
      int64_t n = left == 0 ? 1 : std::min<int64_t>({opts_.prefill_chunk, static_cast<int64_t>(left), room});
      if (left > 0 && opts_.cache && s->req.use_cache)  // a chunk ends at the next snapshot point
        for (int64_t p : s->req.cache_points)
          if (p > static_cast<int64_t>(s->feed_done)) {
            n = std::min<int64_t>(n, p - static_cast<int64_t>(s->feed_done));
            break;
          }
      if (n <= 0) break;  // (only prompt chunks run out of budget: decoders come first)
      const int32_t* tokens = left == 0 ? &s->last : s->feed.data() + s->feed_done;
      StepItem item{s->seq.get(), tokens, n, s->logits.data(), false};
      const int64_t V = engine_.config().vocab_size, per = engine_.config().hc_mult * engine_.config().dim;
      if (left == 0 && !s->drafts.empty()) {  // a verify step: the last token and the drafts, every row's logits
        s->verify.assign(1, s->last);
        s->verify.insert(s->verify.end(), s->drafts.begin(), s->drafts.end());
        n = static_cast<int64_t>(s->verify.size());
        s->verify_logits.resize(static_cast<size_t>(n * V));
        item = StepItem{s->seq.get(), s->verify.data(), n, s->verify_logits.data(), true};
      }
      const bool rows = s->wants_rows(engine_, step_no_);
      if (rows && s->feeds_drafter(engine_)) {  // the MTP drafter continues from these rows
        s->hidden.resize(static_cast<size_t>(n * per));
        item.hidden = s->hidden.data();
      }
      if (rows && s->feeds_dspark(engine_)) {  // the DSpark drafter's context: the rows' taps
        s->taps.resize(static_cast<size_t>(n * engine_.dspark()->tap_width()));
        item.taps = s->taps.data();
      }
      // A chunk before the feed's last, or a recompute's last, has no head to run.
      item.output = left == 0 || (n == static_cast<int64_t>(left) && s->feed_samples);
      // The step that ends the prompt, and every decode step, samples a token: on the device
      // where the request allows it, with this token's uniform from the request's generator
      // (drawn once per token, in the order the tokens are sampled; see the retry below).
      if (item.output && !item.all_positions) {
        const GenerationRequest& q = s->req;
        const SamplingParams& p = q.sampling;
        if (opts_.device_sampling && !q.logprobs && p.top_logprobs == 0 && !q.forced_token &&
            p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) {
          if (!s->device_drawn) {
            s->device = StepSample{{p.temperature, p.top_k, p.top_p, p.min_p, s->sampler->next_uniform()}};
            if (q.constraint) {  // the mask of this token goes with it (computed once, kept across a retry)
              q.constraint->allowed(s->allowed, engine_.config().vocab_size);
              s->device.spec.allowed = s->allowed.data();
            }
            s->device_drawn = true;
          }
          s->device.sampled = false;
          item.sample = &s->device;
        }
      }
      items.push_back(item);
      stepped.push_back(s);
      (left == 0 ? decode_rows : prefill_rows) += n;
      budget -= n;
    }
  };
  try {
    make_drafts(live);
  } catch (const std::exception& e) {  // the drafter's pass is batched: every drafting request stops drafting
    for (Slot* s : live) stop_drafting(*s, e);
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    plan();
    try {
      engine_.step_batch(items);
      break;
    } catch (const StatePoolFull& e) {
      // Nothing ran. Pages the prefix cache holds go first; else the newest sequence gives its
      // pages back and waits; the rest try again.
      if (opts_.cache && opts_.cache->make_room(engine_.free_pages() + 1) > 0) continue;
      Slot* victim = *std::max_element(stepped.begin(), stepped.end(),
                                       [](const Slot* a, const Slot* b) { return a->admitted < b->admitted; });
      if (stepped.size() == 1) {
        log_warn("request ", victim->id, " failed: ", e.what());
        finish(*victim, FinishReason::Error, e.what());
        return;
      }
      preempt(*victim);
      live.erase(std::find(live.begin(), live.end(), victim));
    } catch (const PipelineDown& e) {
      go_down(e.what());
      return;
    } catch (const std::exception& e) {
      // A failure inside the step leaves every sequence of the batch half-advanced: all of them end.
      for (Slot* s : stepped) {
        log_warn("request ", s->id, " failed: ", e.what());
        finish(*s, FinishReason::Error, e.what());
      }
      return;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ++step_no_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    // A mixed step's time is shared out by rows.
    const double rows = static_cast<double>(prefill_rows + decode_rows);
    stats_.prefill_seconds += secs * static_cast<double>(prefill_rows) / rows;
    stats_.decode_seconds += secs * static_cast<double>(decode_rows) / rows;
    stats_.prefill_tokens += prefill_rows;
    stats_.decode_tokens += decode_rows;
    if (decode_rows > 0) stats_.decode_steps++;
    size_t bytes = 0;
    for (const auto& o : slots_)
      if (o->busy)
        for (const auto& st : o->seq->shards) bytes += static_cast<size_t>(st->bytes());
    stats_.state_bytes = bytes;
    stats_.pages = engine_.state_stats();
    stats_.graphs = engine_.graph_stats();
  }
  dspark_rows_.clear();  // (flushed at the end of this loop: rows of this step only)
  for (size_t i = 0; i < stepped.size(); ++i) {
    Slot& s = *stepped[i];
    if (s.drafts.empty()) keep_rows(s, items[i], s.feed_done < s.feed.size());
    // A prompt chunk's or a decode step's rows are committed: into the DSpark context (a verify
    // step's accepted ones go in verify()).
    if (s.drafts.empty() && items[i].taps) {
      try {
        dspark_context(s, s.seq->n_past() - items[i].n, items[i].n);
      } catch (const std::exception& e) {
        stop_drafting(s, e);
      }
    }
    if (s.feed_done < s.feed.size()) {
      s.feed_done += static_cast<size_t>(items[i].n);
      const auto& pts = s.req.cache_points;
      if (opts_.cache && s.req.use_cache &&
          (s.feed_done == s.feed.size() || std::binary_search(pts.begin(), pts.end(), static_cast<int64_t>(s.feed_done))))
        keep_snapshot(s, s.feed);
      if (s.feed_done < s.feed.size() || !s.feed_samples) continue;  // more chunks to go, or a recompute
    }
    s.device_drawn = false;
    try {
      if (!s.drafts.empty()) {
        verify(s);
        continue;
      }
      // A device request that fell back (no sampler on the backend) uses the uniform it drew.
      const StepSample* dev = items[i].sample;
      TokenConstraint* constraint = s.req.constraint.get();
      const auto tc = std::chrono::steady_clock::now();
      // (A token sampled on the device was drawn under the mask already.)
      if (constraint && !(dev && dev->sampled)) constraint->mask(s.logits.data(), engine_.config().vocab_size);
      double constraint_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - tc).count();
      SampleResult r;
      if (dev && dev->sampled) r.token = dev->token;
      else if (dev) r = s.sampler->sample(s.logits.data(), engine_.config().vocab_size, dev->spec.u);
      else r = s.sampler->sample(s.logits.data(), engine_.config().vocab_size);
      if (s.req.forced_token) {
        r.token = s.req.forced_token(s.generated());
        r.top.clear();
      }
      if (s.req.override_token) {
        if (const int32_t t = s.req.override_token(s.generated()); t >= 0 && t != r.token) {
          r.token = t;
          r.logprob = 0;
          r.top.clear();
        }
      }
      if (constraint) {  // throws when a forced token breaks the format: the request fails
        const auto ta = std::chrono::steady_clock::now();
        constraint->accept(r.token);
        constraint_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - ta).count();
      }
      shadow_probe(s, r.token);
      emit(s, r, dev && dev->sampled, constraint != nullptr, constraint_secs);
    } catch (const std::exception& e) {
      log_warn("request ", s.id, " failed: ", e.what());
      finish(s, FinishReason::Error, e.what());
    }
  }
  try {
    feed_drafter(stepped);  // prompt chunks whose rows are complete
  } catch (const std::exception& e) {
    for (Slot* s : stepped) stop_drafting(*s, e);
  }
  flush_dspark_context();
}

bool Scheduler::emit(Slot& s, const SampleResult& r, bool device, bool constrained, double constraint_secs) {
  s.sampler->accept(r.token);
  s.last = r.token;
  s.out.push_back(r.token);
  {
    std::lock_guard<std::mutex> lk(mu_);
    stats_.generated_tokens_total++;
    if (device) stats_.device_sampled_tokens++;
    if (constrained) {
      stats_.constrained_tokens++;
      stats_.constraint_seconds += constraint_secs;
    }
  }
  const bool go_on = !s.req.on_token || s.req.on_token(r);
  const bool is_stop = std::find(s.req.stop_tokens.begin(), s.req.stop_tokens.end(), r.token) != s.req.stop_tokens.end();
  // A complete structured output ends the request without waiting for EOS.
  const TokenConstraint* constraint = s.req.constraint.get();
  if (!go_on || is_stop || (constraint && constraint->finished())) finish(s, FinishReason::Stop, "");
  else if (s.generated() >= s.req.max_tokens) finish(s, FinishReason::Length, "");
  else return true;
  return false;
}

}  // namespace hs
