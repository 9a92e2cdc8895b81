// `hyperstream serve [MODEL | --synthetic PRESET]`: the OpenAI- and Anthropic-compatible HTTP
// server over the continuous-batching scheduler (docs/server.md). Also defines the model options
// `run` shares.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cli/args.h"
#include "cli/engine_args.h"
#include "cli/commands.h"
#include "cli/synthetic_args.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "server/api_key.h"
#include "server/http_server.h"
#include "server/model_loader.h"
#include "server/service.h"
#include "server/signals.h"
#include "util/error.h"

namespace hs::cli {

// The model options of `serve` and `run` (cmd_run.cpp declares these two).
std::vector<OptionSpec> model_option_specs();
server::ModelSpec model_spec_from(const ParsedArgs& a);
SchedulerOptions scheduler_options_from(const ParsedArgs& a, const Engine& engine, int default_max_seqs);

std::vector<OptionSpec> model_option_specs() {
  std::vector<OptionSpec> specs = {
      {"tokenizer", true, "tokenizer: a GGUF, a tokenizer.json, or a directory holding one (default: the model's)", "PATH"},
      {"model-name", true, "the served model id, in every answer (default: the file or directory name; built-in: hyperstream-builtin)", "NAME"},
      {"chat-variant", true, "reasoning-effort table: v4 or v4-0731 (default: v4-0731 when the name has 0731)", "V"},
      {"ctx-size", true, "tokens per sequence, prompt + output (default: the model's context; what the state pool "
                         "holds is checked per request)", "N"},
      {"prefill-chunk", true, "prompt tokens per sequence per step (default 256)", "N"},
      {"device-sampling", true, "on (default): sample on the GPU where the request allows it (no penalties, no "
                                "logprobs), downloading only the token ids; off: every token on the host", "on|off"},
  };
  for (auto& o : engine_option_specs("cpu (default) or cuda:N",
                                     "reference (f32) or model (bf16 activations, QAT round trips; default for "
                                     "model files and --synthetic)"))
    specs.push_back(o);
  for (auto& o : draft_option_specs()) specs.push_back(o);
  for (auto& o : distributed_option_specs()) specs.push_back(o);
  return specs;
}

server::ModelSpec model_spec_from(const ParsedArgs& a) {
  HS_CHECK(a.positionals().size() <= 1, "expected at most one MODEL argument, got ", a.positionals().size());
  server::ModelSpec m;
  if (!a.positionals().empty()) m.path = a.positionals()[0];
  HS_CHECK(!(m.path && a.has("synthetic")), "MODEL ('", m.path.value_or(""),
           "') and --synthetic are mutually exclusive: serve a model file or a synthetic model");
  m.tokenizer = a.get("tokenizer");
  m.name = a.get("model-name");
  if (m.name) HS_CHECK(!m.name->empty(), "--model-name must not be empty");
  m.variant = a.get("chat-variant");
  m.engine = engine_options(a, "cpu", m.path || a.has("synthetic") ? "model" : "reference");
  // The state pools are made for this many sequences of this context.
  m.engine.max_seqs = static_cast<int>(std::clamp<long long>(a.get_int("max-seqs", 8), 1, 4096));
  if (a.has("ctx-size")) {
    m.engine.max_context = a.get_int("ctx-size", 0);
    HS_CHECK(m.engine.max_context >= 2, "--ctx-size must be at least 2, got ", m.engine.max_context);
  }
  draft_options(a, m.engine);  // (the length again in scheduler_options_from)
  m.synthetic = synthetic_spec_from(a, m.engine);
  m.pipeline = distributed_options(a, m.engine);
  if (m.pipeline) {
    HS_CHECK(m.path, "--rank/--world: a pipeline of processes needs a MODEL file (every rank opens it)");
    HS_CHECK(!a.has("draft") || m.engine.draft == "off", "--draft ", m.engine.draft,
             ": speculative decoding does not run on a pipeline of processes (--rank) yet");
    m.engine.draft = "off";
  }
  return m;
}

SchedulerOptions scheduler_options_from(const ParsedArgs& a, const Engine& engine, int default_max_seqs) {
  SchedulerOptions s;
  s.ctx_size = a.get_int("ctx-size", engine.state_layout(0).max_context);
  HS_CHECK(s.ctx_size >= 2, "--ctx-size must be at least 2, got ", s.ctx_size);
  s.max_seqs = static_cast<int>(a.get_int("max-seqs", default_max_seqs));
  s.prefill_chunk = static_cast<int>(a.get_int("prefill-chunk", 256));
  s.device_sampling = a.get_on_off("device-sampling", true);
  EngineOptions eo;
  s.draft_max = engine.drafter() || engine.dspark() ? draft_options(a, eo) : 0;
  s.draft_confidence = draft_confidence(a);
  return s;
}

// The request limits of serve (server/http_limits.h), checked.
server::HttpLimits http_limits_from(const ParsedArgs& a) {
  server::HttpLimits l;
  auto bytes = [&](const char* name, size_t def, long long lo) {
    const long long v = a.get_int(name, static_cast<long long>(def));
    HS_CHECK(v >= lo && v <= (1LL << 40), "--", name, " must be between ", lo, " and 2^40, got ", v);
    return static_cast<size_t>(v);
  };
  l.max_header_bytes = bytes("max-header-bytes", l.max_header_bytes, 1024);
  l.max_headers = bytes("max-headers", l.max_headers, 8);
  l.max_body_bytes = bytes("max-body-bytes", l.max_body_bytes, 0);
  auto seconds = [&](const char* name, std::chrono::milliseconds def) {
    const double v = a.get_double(name, static_cast<double>(def.count()) / 1000.0);
    HS_CHECK(v > 0 && v <= 86400, "--", name, " must be more than 0 and at most 86400 seconds, got ", v);
    return std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(v * 1000)));
  };
  l.header_timeout = seconds("header-timeout", l.header_timeout);
  l.body_timeout = seconds("body-timeout", l.body_timeout);
  l.idle_timeout = seconds("idle-timeout", l.idle_timeout);
  l.send_timeout = seconds("send-timeout", l.send_timeout);
  return l;
}

int cmd_serve(const Args& args) {
  // First, before any thread exists: SIGTERM/SIGINT arrive through a signalfd.
  server::SignalWatcher signals;

  std::vector<OptionSpec> specs = {
      {"host", true, "address to listen on (default 127.0.0.1)", "ADDR"},
      {"port", true, "port (default 8000; 0: any free port, printed at start)", "N"},
      {"api-key", true, "require this key (Authorization: Bearer KEY or x-api-key: KEY) on the API (visible in ps: "
                        "prefer --api-key-file or HYPERSTREAM_API_KEY)", "KEY"},
      {"api-key-file", true, "require the key on the first line of PATH", "PATH"},
      {"cors", false, "allow cross-origin requests (Access-Control-Allow-Origin: *)"},
      {"max-seqs", true, "sequences decoded together (default 8; each has a slot in the state pools)", "N"},
      {"http-threads", true, "threads that run request handlers (JSON, tokenizing; default 4); idle connections "
                             "and streams hold none", "N"},
      {"io-threads", true, "event-loop threads reading and writing every connection (default 2)", "N"},
      {"listen-backlog", true, "connections the kernel queues before they are accepted (default 4096; capped by "
                               "net.core.somaxconn)", "N"},
      {"max-header-bytes", true, "request line and header fields, in bytes (default 65536; more: 431)", "N"},
      {"max-headers", true, "header fields per request (default 128; more: 431)", "N"},
      {"max-body-bytes", true, "request body in bytes, as sent and after gzip/deflate (default 67108864; more: 413)", "N"},
      {"header-timeout", true, "seconds from a request's first byte to the end of its header (default 10; then 408)", "S"},
      {"body-timeout", true, "seconds from the end of the header to the end of the body (default 60; then 408)", "S"},
      {"idle-timeout", true, "seconds a keep-alive connection may wait for its next request (default 60)", "S"},
      {"send-timeout", true, "seconds a write may wait for the client to read (default 60; then the connection is "
                             "closed)", "S"},
      {"default-thinking", false, "thinking mode for requests that do not choose (default: chat mode)"},
      {"shutdown-timeout", true, "seconds running requests get to finish on SIGTERM/SIGINT (default 30)", "S"},
      {"model-alias", true, "another id the model answers to, listed by /v1/models (repeatable)", "NAME"},
      {"strict-model-name", false, "refuse (404) a request naming a model other than --model-name or an alias "
                                   "(default: any name is accepted and answered with the served id)"},
      {"clamp-max-tokens", false, "shrink max_tokens to the room the context leaves instead of refusing the request"},
      {"keepalive", true, "seconds of silence (a long prefill) after which a stream gets a keep-alive event: "
                          "Anthropic ping, an empty chat chunk, a Responses keepalive (default 10; 0: none)", "S"},
      {"response-store", true, "responses of /v1/responses kept in memory for GET and previous_response_id "
                               "(default 256; 0: none)", "N"},
      {"prefix-cache", true, "on (default): keep snapshots of prompts and answers and prefill only what a request "
                             "adds to a cached prefix; off: none", "on|off"},
      {"prefix-cache-ram", true, "GiB of host memory for the prefix cache (default 8)", "GIB"},
      {"prefix-cache-dir", true, "also keep the prefix cache in files under DIR (found again after a restart)", "DIR"},
      {"prefix-cache-disk", true, "GiB the prefix cache's files may take (default 64)", "GIB"},
  };
  for (auto& s : synthetic_option_specs()) specs.push_back(s);
  for (auto& s : model_option_specs()) specs.push_back(s);
  const size_t shown = specs.size();
  // Test-only: every answer is this text (tokenized, then EOS), or the X-HS-Test-Force-Output
  // header's text; lets tests drive tool calls and stop sequences through a random model.
  specs.push_back({"test-force-output", true, "test only", "TEXT"});
  // Test-only: honour the X-HS-Test-* request headers (forced output, forced engine failure).
  specs.push_back({"test-hooks", false, "test only"});
  // Test-only: forced outputs chosen by the prompt's last user turn (server/forced_script.h).
  specs.push_back({"test-force-script", true, "test only", "FILE"});
  // Test-only: with forced output only the prompt's last N tokens are prefilled (GenerationSpec::prefill_tail).
  specs.push_back({"test-prefill-tail", true, "test only", "N"});
  ParsedArgs a("serve", args, specs);
  if (a.help()) {
    print_help("serve", "[MODEL | --synthetic PRESET [--layers N] [--quant MIX]] [options]",
               "Serve MODEL (a GGUF or a Hugging Face directory; none: the built-in synthetic model) over HTTP:\n"
               "OpenAI /v1/chat/completions, /v1/completions, /v1/responses(/{id}), /v1/models; Anthropic\n"
               "/v1/messages(/count_tokens); /tokenize, /detokenize, /health, /metrics. See docs/server.md.\n"
               "--synthetic serves random weights of a preset's real shapes (on a GPU made in device memory) with\n"
               "the built-in tokenizer, as model synthetic-PRESET-<layers>L-MIX: for throughput measurements\n"
               "without a model file (scripts/bench_serve.sh).",
               std::vector<OptionSpec>(specs.begin(), specs.begin() + static_cast<long>(shown)));
    return 0;
  }
  server::ModelSpec model_spec = model_spec_from(a);
  if (model_spec.pipeline && model_spec.pipeline->rank > 0)  // no HTTP: rank 0 serves
    return run_pipeline_rank("serve", *model_spec.path, model_spec.engine, *model_spec.pipeline);
  server::HttpOptions http;
  http.host = a.get_or("host", "127.0.0.1");
  http.port = static_cast<int>(a.get_int("port", 8000));
  HS_CHECK(http.port >= 0 && http.port <= 65535, "--port must be in [0, 65535], got ", http.port);
  http.api_key = server::resolve_api_key(a.get("api-key"), a.get("api-key-file"), std::getenv("HYPERSTREAM_API_KEY"));
  http.cors = a.has("cors");
  const int max_seqs = static_cast<int>(a.get_int("max-seqs", 8));
  HS_CHECK(max_seqs >= 1, "--max-seqs must be at least 1, got ", max_seqs);
  http.threads = static_cast<int>(a.get_int("http-threads", 4));
  HS_CHECK(http.threads >= 1 && http.threads <= 1024, "--http-threads must be between 1 and 1024, got ", http.threads);
  http.io_threads = static_cast<int>(a.get_int("io-threads", 2));
  HS_CHECK(http.io_threads >= 1 && http.io_threads <= 256, "--io-threads must be between 1 and 256, got ", http.io_threads);
  http.listen_backlog = static_cast<int>(std::clamp<long long>(a.get_int("listen-backlog", 4096), 0, 1 << 20));
  HS_CHECK(http.listen_backlog >= 1, "--listen-backlog must be at least 1");
  http.limits = http_limits_from(a);
  const double grace_s = a.get_double("shutdown-timeout", 30);
  HS_CHECK(grace_s >= 0, "--shutdown-timeout must be at least 0");
  const bool pc = a.get_on_off("prefix-cache", true);
  HS_CHECK(!model_spec.pipeline || !a.has("prefix-cache") || !pc,
           "--prefix-cache on: the prefix cache does not span the ranks of a pipeline of processes (--rank)");
  const bool prefix_cache = pc && !model_spec.pipeline;
  HS_CHECK(prefix_cache || !a.has("prefix-cache-dir"), "--prefix-cache-dir needs --prefix-cache on");
  PrefixCacheOptions cache_opts;
  const double ram_gib = a.get_double("prefix-cache-ram", 8.0), disk_gib = a.get_double("prefix-cache-disk", 64.0);
  HS_CHECK(ram_gib >= 0 && ram_gib <= 1 << 20 && disk_gib >= 0 && disk_gib <= 1 << 24,
           "--prefix-cache-ram and --prefix-cache-disk must be positive numbers of GiB");
  cache_opts.ram_bytes = static_cast<int64_t>(ram_gib * static_cast<double>(int64_t{1} << 30));
  cache_opts.disk_bytes = static_cast<int64_t>(disk_gib * static_cast<double>(int64_t{1} << 30));
  cache_opts.dir = a.get_or("prefix-cache-dir", "");

  // The API options, checked before the model loads.
  server::ServiceConfig cfg;
  cfg.default_thinking = a.has("default-thinking");
  cfg.model_aliases = a.get_all("model-alias");
  for (const auto& alias : cfg.model_aliases) HS_CHECK(!alias.empty(), "--model-alias must not be empty");
  cfg.strict_model_name = a.has("strict-model-name");
  cfg.clamp_max_tokens = a.has("clamp-max-tokens");
  const double keepalive_s = a.get_double("keepalive", 10);
  HS_CHECK(keepalive_s >= 0 && keepalive_s <= 3600, "--keepalive must be between 0 and 3600 seconds, got ", keepalive_s);
  cfg.keepalive = std::chrono::milliseconds(static_cast<int64_t>(keepalive_s * 1000));
  const long long store = a.get_int("response-store", 256);
  HS_CHECK(store >= 0 && store <= 1000000, "--response-store must be between 0 and 1000000, got ", store);
  cfg.stored_responses = static_cast<size_t>(store);
  cfg.forced_output = a.get("test-force-output");
  if (auto script = a.get("test-force-script")) cfg.forced_script = server::load_forced_script(*script);
  const long long tail = a.get_int("test-prefill-tail", 0);
  HS_CHECK(tail >= 0, "--test-prefill-tail must be at least 0, got ", tail);
  cfg.test_prefill_tail = static_cast<size_t>(tail);
  cfg.test_hooks = cfg.forced_output.has_value() || a.has("test-hooks");

  server::Metrics metrics;
  server::HttpServer srv(http, metrics);
  const int port = srv.start();
  std::fprintf(stderr, "hyperstream serve: listening on http://%s:%d (loading the model)\n", http.host.c_str(), port);

  const server::LoadedModel model = server::load_model(model_spec);
  SchedulerOptions sched_opts = scheduler_options_from(a, *model.engine, max_seqs);
  // A pipeline that goes down (in a step, or between steps: the idle watcher below) ends every
  // request with 503; then the server stops as on SIGTERM.
  const auto stop_serving = [](const std::string&) { ::kill(::getpid(), SIGTERM); };
  if (model.pipeline) sched_opts.on_down = stop_serving;
  std::unique_ptr<PrefixCache> cache;  // (before the scheduler: it outlives it)
  if (prefix_cache) {
    cache = std::make_unique<PrefixCache>(*model.engine, cache_opts);
    sched_opts.cache = cache.get();
  }
  Scheduler scheduler(*model.engine, sched_opts);
  cfg.model_name = model.name;
  cfg.variant = model.variant;
  server::Service service(scheduler, *model.tokenizer, cfg, &metrics);
  srv.set_service(&service);
  const EngineStateStats pages = model.engine->state_stats();
  std::fprintf(stderr,
               "hyperstream serve: ready: model %s, ctx %lld, max-seqs %d, prefill-chunk %d, sampling on %s; state pool "
               "%lld pages of %d positions (%lld tokens at most per sequence, %.0f B per token)\n",
               model.name.c_str(), static_cast<long long>(sched_opts.ctx_size), sched_opts.max_seqs,
               sched_opts.prefill_chunk, sched_opts.device_sampling && model.engine->can_sample() ? "device" : "host",
               static_cast<long long>(pages.pages_total / model.engine->n_shards()), model.engine->state_layout(0).page,
               static_cast<long long>(pages.token_capacity), static_cast<double>(pages.bytes_per_token));

  if (sched_opts.draft_max > 0)
    std::fprintf(stderr, "hyperstream serve: speculative decoding: %s drafter, up to %d drafted tokens per step "
                 "(adaptive)\n", model.engine->dspark() ? "DSpark" : "MTP", sched_opts.draft_max);
  else
    std::fprintf(stderr, "hyperstream serve: speculative decoding off%s\n",
                 model_spec.engine.draft == "auto" ? " (--draft auto: the model has no DSpark drafter or MTP block)" : "");
  if (model.pipeline) {
    model.pipeline->watch_when_idle(stop_serving);
    std::fprintf(stderr, "hyperstream serve: rank 0 of %d: layers [%d, %d) here, the rest on the other ranks\n",
                 model.pipeline->world(), model.pipeline->layer_begin(), model.pipeline->layer_end());
  }
  if (!cache) {
    std::fprintf(stderr, "hyperstream serve: prefix cache off%s\n",
                 model.pipeline ? " (it does not span the ranks of a pipeline)" : "");
  } else if (cache_opts.dir.empty()) {
    std::fprintf(stderr, "hyperstream serve: prefix cache: device pages, host %.1f GiB (no disk tier: --prefix-cache-dir)\n",
                 ram_gib);
  } else {
    const PrefixCacheStats cs = cache->stats();
    std::fprintf(stderr,
                 "hyperstream serve: prefix cache: device pages, host %.1f GiB, disk %s (%.1f GiB; %lld snapshots found, "
                 "%lld refused)\n",
                 ram_gib, cache_opts.dir.c_str(), disk_gib, static_cast<long long>(cs.disk_entries),
                 static_cast<long long>(cs.bad_files));
  }

  const int sig = signals.wait(-1);
  std::fprintf(stderr, "hyperstream serve: %s: stopping (running requests get %.0f s; again to cancel them)\n",
               server::signal_name(sig), grace_s);
  srv.shutdown(std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000)), [&] { return signals.wait(0) != 0; });
  scheduler.shutdown(false);
  if (model.pipeline && model.pipeline->down()) {
    std::fprintf(stderr, "hyperstream serve: stopped: the pipeline of processes went down\n");
    return 1;
  }
  std::fprintf(stderr, "hyperstream serve: stopped\n");
  return 0;
}

}  // namespace hs::cli
