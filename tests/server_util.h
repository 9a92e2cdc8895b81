// The built-in model behind a Service, for the server tests below HTTP (one engine per test
// binary), and helpers to run a generation through it.
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "model/synthetic.h"
#include "server/generation.h"
#include "server/service.h"

namespace hs::server {

// A Service over the built-in model (one engine for the whole test binary).
inline EngineOptions one_thread() {
  EngineOptions o;
  o.threads = 1;
  return o;
}

struct Builtin {
  Engine engine{builtin_source(), one_thread()};
  Tokenizer tok = builtin_tokenizer();
  Scheduler sched{engine, SchedulerOptions{2, 16, 1024}};
  Service svc{sched, tok, ServiceConfig{}};
};
inline Builtin& builtin() {
  static Builtin b;
  return b;
}

// Runs a generation to the end; returns all events and the outcome.
inline std::pair<std::vector<GenEvent>, GenOutcome> drain(const std::shared_ptr<Generation>& g) {
  std::vector<GenEvent> ev;
  for (;;) {
    GenBatch b = g->next(std::chrono::milliseconds(100));
    ev.insert(ev.end(), b.events.begin(), b.events.end());
    if (b.done) return {ev, b.outcome};
  }
}

inline GenerationSpec forced_chat(const std::string& output) {
  Builtin& b = builtin();
  GenerationSpec s;
  s.prompt = b.tok.encode("<｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜></think>");
  s.max_tokens = 200;
  s.chat = true;
  s.forced = b.tok.encode(output);
  return s;
}

}  // namespace hs::server
