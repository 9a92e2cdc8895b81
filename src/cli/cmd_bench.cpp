// `hyperstream bench MODEL | --synthetic flash [--layers N] [--quant MIX]`: prefill and decode
// speed of the engine, with the decode roofline (weight bytes per token, GB/s, % of the
// device's measured copy bandwidth). Prints a table; --json writes the same numbers.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/bench_cache.h"
#include "cli/bench_draft.h"
#include "cli/bench_timing.h"
#include "cli/engine_args.h"
#include "cli/synthetic_args.h"
#include "engine/engine.h"
#include "util/error.h"

namespace hs::cli {

namespace {



// Deterministic token ids spread over the vocabulary (hash-routed layers see varied ids).
std::vector<int32_t> bench_tokens(int64_t n, int64_t vocab, uint64_t salt) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull ^ salt;
  for (auto& v : t) {
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    v = static_cast<int32_t>((x * 2685821657736338717ull >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

struct Result {
  std::string test;    // pp512, tg128@4096, tg64x8 (8 sequences decoding together), ...
  int64_t tokens = 0;  // tokens timed (over all sequences)
  int64_t depth = 0;   // context before the timed tokens
  double seconds = 0;  // median over the repetitions
  int64_t seqs = 1;    // sequences decoding together (one batched step each)
  size_t graph_nodes = 0;  // operations of the latest captured decode step (0: none captured)
  double tok_s() const { return static_cast<double>(tokens) / seconds; }
};

}  // namespace

int cmd_bench(const Args& args) {
  std::vector<OptionSpec> specs = synthetic_option_specs();
  const std::vector<OptionSpec> bench_specs = {
      {"pp", true, "prefill lengths to time (default 512,4096; 0 for none)", "N,N,..."},
      {"chunk", true, "prefill chunk size (default 512)", "N"},
      {"tg", true, "decode tokens to time per depth (default 128; 0 for none)", "N"},
      {"depth", true, "context lengths before decoding (default 0,4096)", "N,N,..."},
      {"reps", true, "repetitions of each prefill measurement, median reported (default 3)", "N"},
      {"json", true, "also write the results as JSON", "FILE"},
      {"profile", false, "after the runs, print the device time per op of one pp and 16 decode steps (and of 16 "
       "steps of the widest --seqs batch)"},
      {"seqs", true, "also time decode with N sequences stepping together (continuous batching; tgTxN: "
       "aggregate tok/s of N sequences after a 16-token prompt each)", "N,N,..."},
      {"cache-turn", true, "also time the next turn of an N-token conversation (K new tokens, default 256) cold "
       "and from the prefix cache", "N[,K]"},
      {"cache-dir", true, "with --cache-turn: also through files under DIR, found again by a new cache", "DIR"},
  };
  specs.insert(specs.end(), bench_specs.begin(), bench_specs.end());
  const std::string default_device = gpu_count() > 0 ? "cuda:0" : "cpu";
  for (auto& o : engine_option_specs("cpu or cuda:N (default: cuda:0 when a GPU is present, else cpu)",
                                     "model (default: the inference numerics, BF16 tensor cores in prefill) or "
                                     "reference (f32 everywhere, the parity mode)"))
    specs.push_back(o);
  for (auto& o : draft_option_specs()) specs.push_back(o);
  for (auto& o : distributed_option_specs()) specs.push_back(o);
  ParsedArgs a("bench", args, specs);
  if (a.help()) {
    print_help("bench", "MODEL | --synthetic flash [--layers N] [--quant MIX] [options]",
               "Times prefill (ppN: N prompt tokens in chunks, tok/s) and batch-1 decode (tgN@D: N tokens after a\n"
               "context of D, tok/s) end to end through the engine, logits included. For decode it also prints\n"
               "the weight bytes one token reads (every dense matrix, k of E experts, the output head), the GB/s\n"
               "that makes, and that as a % of the device's measured copy bandwidth (read + write).\n"
               "--synthetic builds random weights of the real shapes; on a GPU they are made in device memory.\n"
               "With --rank/--world/--coordinator every rank runs the same bench command (its own --rank and\n"
               "--device); rank 0 times the whole pipeline and prints the results (docs/multi-gpu.md).",
               specs);
    return 0;
  }
  HS_CHECK(a.has("synthetic") != (a.positionals().size() == 1),
           "expected exactly one MODEL argument or --synthetic PRESET (see hyperstream bench --help)");
  EngineOptions opts = engine_options(a, default_device, "model");
  draft_options(a, opts);  // --draft: the verify-step table after the runs
  const std::optional<SyntheticSpec> synthetic = synthetic_spec_from(a, opts);

  std::vector<int> pps = parse_int_list("--pp", a.get_or("pp", "512,4096"));
  std::vector<int> depths = parse_int_list("--depth", a.get_or("depth", "0,4096"));
  const int64_t tg = a.get_int("tg", 128), chunk = a.get_int("chunk", 512), reps = a.get_int("reps", 3);
  HS_CHECK(chunk > 0 && reps > 0 && tg >= 0, "--chunk and --reps must be positive, --tg non-negative");
  // State pool slots for the widest batch (and the batch-1 sequence beside it), of the longest run.
  std::vector<int> batches = a.has("seqs") ? parse_int_list("--seqs", *a.get("seqs")) : std::vector<int>{};
  for (int B : batches) opts.max_seqs = std::max(opts.max_seqs, B + 1);
  int64_t longest = 64;
  for (int pp : pps) longest = std::max<int64_t>(longest, pp);
  for (int d : depths) longest = std::max<int64_t>(longest, d + tg + 8);
  // a 16-token prompt, 4 warm-up steps (and --profile's 16 steps)
  if (!batches.empty()) longest = std::max<int64_t>(longest, 16 + std::max<int64_t>(tg, 16) + 8);
  if (a.has("profile")) longest = std::max<int64_t>(longest, (pps.empty() || pps.front() <= 0 ? 512 : pps.front()) + 16);
  int64_t cache_n = 0, cache_k = 256;
  if (a.has("cache-turn")) {
    const std::vector<int> ck = parse_int_list("--cache-turn", *a.get("cache-turn"));
    HS_CHECK(!ck.empty() && ck.size() <= 2 && ck[0] > 0 && (ck.size() == 1 || ck[1] > 0),
             "--cache-turn: expected N or N,K (positive), got '", *a.get("cache-turn"), "'");
    cache_n = ck[0];
    if (ck.size() == 2) cache_k = ck[1];
    longest = std::max<int64_t>(longest, cache_n + cache_k);
  }
  HS_CHECK(!a.has("cache-dir") || cache_n > 0, "--cache-dir needs --cache-turn");
  opts.max_context = std::max<int64_t>(opts.max_context, longest);

  const auto pipe = distributed_options(a, opts);
  if (pipe) {
    HS_CHECK(!a.has("cache-turn"), "--cache-turn: the prefix cache does not span the ranks of a pipeline (--rank)");
    HS_CHECK(!a.has("draft") || opts.draft == "off", "--draft ", opts.draft,
             ": speculative decoding does not run on a pipeline of processes (--rank) yet");
    opts.draft = "off";
  }
  const auto t_load = BenchClock::now();
  std::unique_ptr<DistributedEngine> pipeline;  // (before what uses its engine)
  std::unique_ptr<Engine> own;
  Engine* eng = nullptr;
  const std::string model_name = synthetic ? synthetic_model_name(*synthetic) : a.positionals()[0];
  if (pipe && pipe->rank > 0) {  // rank 0 times and prints
    if (synthetic) return run_pipeline_rank("bench", make_synthetic_source(*synthetic), model_name, opts, *pipe);
    return run_pipeline_rank("bench", model_name, opts, *pipe);
  }
  if (pipe) {
    pipeline = synthetic ? std::make_unique<DistributedEngine>(make_synthetic_source(*synthetic), model_name, opts, *pipe)
                         : std::make_unique<DistributedEngine>(model_name, opts, *pipe);
    eng = &pipeline->local();
  } else {
    own = synthetic ? std::make_unique<Engine>(make_synthetic_source(*synthetic), opts)
                    : std::make_unique<Engine>(model_name, opts);
    eng = own.get();
  }
  const ModelConfig& c = eng->config();
  const double load_s = seconds_since(t_load);
  const int64_t wbytes = eng->weight_bytes_per_token();
  const double copy_gbs = eng->copy_bandwidth_gbs();
  std::string devices;
  for (int i = 0; i < eng->n_shards(); ++i) devices += (i ? "," : "") + eng->shard_device(i);
  std::printf("bench: %s, %d layers, vocab %lld, devices %s, numerics %s, loaded in %.1f s\n", model_name.c_str(),
              c.n_layers, static_cast<long long>(c.vocab_size), devices.c_str(),
              opts.numerics == Numerics::Reference ? "reference" : "model", load_s);
  if (pipeline)
    std::printf("pipeline of %d processes: rank 0 holds layers [%d, %d); the weight bytes and %% of bandwidth below "
                "are rank 0's\n", pipeline->world(), pipeline->layer_begin(), pipeline->layer_end());
  std::printf("decode reads %.3f GB of weights per token", static_cast<double>(wbytes) / 1e9);
  if (copy_gbs > 0) std::printf("; device copy bandwidth %.0f GB/s (read + write, 1 GiB, median of 20)", copy_gbs);
  std::printf("\nstate per sequence:\n%s\n", describe_state_memory(c).c_str());
  const StateLayout state = model_state_layout(c, opts.numerics == Numerics::Model);

  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  auto seq = eng->new_sequence();
  auto prefill = [&](const std::vector<int32_t>& toks) {
    for (size_t p = 0; p < toks.size(); p += static_cast<size_t>(chunk)) {
      const int64_t n = std::min<int64_t>(chunk, static_cast<int64_t>(toks.size() - p));
      eng->step(*seq, toks.data() + p, n, logits.data(), false);
    }
  };

  std::vector<Result> results;
  for (int pp : pps) {
    if (pp <= 0) continue;
    const auto toks = bench_tokens(pp, c.vocab_size, static_cast<uint64_t>(pp));
    std::vector<double> t;
    for (int64_t r = 0; r < reps + 1; ++r) {  // the first run warms up (allocations, cuBLAS plans)
      seq->reset();
      const auto t0 = BenchClock::now();
      prefill(toks);
      if (r > 0) t.push_back(seconds_since(t0));
    }
    results.push_back({"pp" + std::to_string(pp), pp, 0, median(t), 1});
    std::fprintf(stderr, "  %s: %.1f tok/s\n", results.back().test.c_str(), results.back().tok_s());
  }
  if (tg > 0) {
    for (int depth : depths) {
      if (depth < 0) continue;
      seq->reset();
      prefill(bench_tokens(depth, c.vocab_size, 7));
      const auto toks = bench_tokens(tg + 4, c.vocab_size, 11);
      for (int i = 0; i < 4; ++i) eng->step(*seq, &toks[static_cast<size_t>(i)], 1, logits.data(), false);  // warm-up
      const auto t0 = BenchClock::now();
      for (int64_t i = 0; i < tg; ++i) eng->step(*seq, &toks[static_cast<size_t>(4 + i)], 1, logits.data(), false);
      results.push_back({"tg" + std::to_string(tg) + "@" + std::to_string(depth), tg, depth + 4, seconds_since(t0), 1,
                         eng->graph_stats().nodes});
      std::fprintf(stderr, "  %s: %.1f tok/s\n", results.back().test.c_str(), results.back().tok_s());
    }
  }

  // B sequences after a 16-token prompt each, stepping together: step(i) decodes token i of a
  // shared list for all of them in one batched step.
  struct Batch {
    std::vector<std::unique_ptr<Sequence>> seqs;
    std::vector<std::vector<float>> logits;
    std::vector<StepItem> items;
  };
  const auto batch_toks = bench_tokens(std::max<int64_t>(tg, 16) + 4, c.vocab_size, 13);
  auto make_batch = [&](int B) {
    Batch bt;
    bt.logits.assign(static_cast<size_t>(B), std::vector<float>(logits.size()));
    for (int b = 0; b < B; ++b) {
      bt.seqs.push_back(eng->new_sequence());
      const auto prompt = bench_tokens(16, c.vocab_size, 100 + static_cast<uint64_t>(b));
      eng->step(*bt.seqs.back(), prompt.data(), 16, bt.logits[static_cast<size_t>(b)].data(), false);
    }
    bt.items.resize(static_cast<size_t>(B));
    return bt;
  };
  auto batch_step = [&](Batch& bt, int64_t i) {
    for (size_t b = 0; b < bt.seqs.size(); ++b)
      bt.items[b] = {bt.seqs[b].get(), &batch_toks[static_cast<size_t>(i)], 1, bt.logits[b].data(), false};
    eng->step_batch(bt.items);
  };
  if (tg > 0 && a.has("seqs")) {
    for (int B : batches) {
      if (B < 1) continue;
      Batch bt = make_batch(B);
      for (int64_t i = 0; i < 4; ++i) batch_step(bt, i);  // warm-up
      const auto t0 = BenchClock::now();
      for (int64_t i = 0; i < tg; ++i) batch_step(bt, 4 + i);
      Result r{"tg" + std::to_string(tg) + "x" + std::to_string(B), tg * B, 20, seconds_since(t0), B,
               eng->graph_stats().nodes};
      results.push_back(r);
      std::fprintf(stderr, "  %s: %.1f tok/s aggregate\n", r.test.c_str(), r.tok_s());
    }
  }

  // Split cost: each shard's part of a decode step timed alone (its device waited for), summed,
  // against the plain step (the first tg result).
  std::string split_report;
  nlohmann::ordered_json split_json;
  const auto plain = std::find_if(results.begin(), results.end(), [](const Result& r) {
    return r.test.rfind("tg", 0) == 0 && r.seqs == 1;
  });
  if (eng->n_shards() >= 2 && plain != results.end()) {
    seq->reset();
    prefill(bench_tokens(plain->depth - 4, c.vocab_size, 7));
    const auto toks = bench_tokens(tg, c.vocab_size, 11);
    eng->set_stage_timing(true);
    for (int64_t i = 0; i < tg; ++i) eng->step(*seq, &toks[static_cast<size_t>(i)], 1, logits.data(), false);
    const std::vector<double> st = eng->stage_seconds();
    eng->set_stage_timing(false);
    double sum = 0;
    split_report = "split (decode, ms per token): ";
    split_json["shard_ms"] = nlohmann::ordered_json::array();
    for (size_t i = 0; i < st.size(); ++i) {
      const double ms = 1e3 * st[i] / static_cast<double>(tg);
      sum += ms;
      char part[96];
      std::snprintf(part, sizeof part, "shard %zu (%s) %.3f, ", i, eng->shard_device(static_cast<int>(i)).c_str(), ms);
      split_report += part;
      split_json["shard_ms"].push_back(ms);
    }
    const double step_ms = 1e3 * plain->seconds / static_cast<double>(plain->tokens);
    char buf[160];
    std::snprintf(buf, sizeof buf, "sum of shards alone %.3f; %s step %.3f; split overhead %+.1f%%", sum,
                  plain->test.c_str(), step_ms, 100.0 * (step_ms / sum - 1.0));
    split_report += buf;
    split_json["sum_ms"] = sum;
    split_json["step_ms"] = step_ms;
    split_json["overhead_pct"] = 100.0 * (step_ms / sum - 1.0);
    std::printf("%s\n\n", split_report.c_str());
  }

  std::string profile;
  if (a.has("profile")) {  // separate runs: the event pairs slow the timed ones down
    const int64_t pp = pps.empty() || pps.front() <= 0 ? 512 : pps.front();
    seq->reset();
    eng->set_profiling(true);
    prefill(bench_tokens(pp, c.vocab_size, 3));
    profile += "prefill of " + std::to_string(pp) + " tokens (chunks of " + std::to_string(chunk) + "):\n" +
               eng->profile_report();
    const auto toks = bench_tokens(16, c.vocab_size, 5);
    for (int i = 0; i < 16; ++i) eng->step(*seq, &toks[static_cast<size_t>(i)], 1, logits.data(), false);
    profile += "\n16 decode steps after it:\n" + eng->profile_report();
    eng->set_profiling(false);
    // Batched decode: the widest --seqs batch, 16 steps after 4 unprofiled ones.
    const int widest = batches.empty() ? 0 : *std::max_element(batches.begin(), batches.end());
    if (widest > 1) {
      Batch bt = make_batch(widest);
      for (int64_t i = 0; i < 4; ++i) batch_step(bt, i);
      eng->set_profiling(true);
      for (int64_t i = 0; i < 16; ++i) batch_step(bt, 4 + i);
      profile += "\n16 decode steps of " + std::to_string(widest) + " sequences together:\n" + eng->profile_report();
      eng->set_profiling(false);
    }
    std::printf("%s\n", profile.c_str());
  }

  nlohmann::ordered_json draft_json;
  if (eng->drafter() || eng->dspark())
    draft_json = bench_draft(*eng, depths.empty() || depths.back() <= 0 ? 64 : depths.back(), std::max<int64_t>(reps, 5),
                             synthetic.has_value());
  else if (opts.draft == "auto")
    std::printf("--draft auto: the model has no DSpark drafter or MTP block; no speculative decoding table\n\n");

  nlohmann::ordered_json cache_json;
  if (cache_n > 0) cache_json = bench_cache_turn(*eng, cache_n, cache_k, chunk, a.get_or("cache-dir", ""));

  const StepGraphStats graphs = eng->graph_stats();  // over every shard and run (decode steps only)
  if (graphs.captured + graphs.replayed + graphs.eager > 0)
    std::printf("decode steps per shard: %lld replayed as CUDA graphs, %lld captured (the latest: %zu operations "
                "over the shards), %lld op by op%s\n\n",
                static_cast<long long>(graphs.replayed), static_cast<long long>(graphs.captured), graphs.nodes,
                static_cast<long long>(graphs.eager), graphs.failed ? " (a capture failed)" : "");
  std::string ops_per_step;
  std::printf("| test | tokens | seconds | tok/s | weight GB/token | GB/s | %% of copy |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  nlohmann::ordered_json jr = nlohmann::ordered_json::array();
  for (const auto& r : results) {
    const bool decode = r.test.rfind("tg", 0) == 0 && r.seqs == 1;
    const double gbs = decode ? static_cast<double>(wbytes) * r.tok_s() / 1e9 : 0.0;
    std::printf("| %s | %lld | %.3f | %.1f |", r.test.c_str(), static_cast<long long>(r.tokens), r.seconds, r.tok_s());
    if (r.graph_nodes) ops_per_step += (ops_per_step.empty() ? "" : ", ") + r.test + ": " + std::to_string(r.graph_nodes);
    if (decode) {
      std::printf(" %.3f | %.0f |", static_cast<double>(wbytes) / 1e9, gbs);
      if (copy_gbs > 0) std::printf(" %.1f |\n", 100.0 * gbs / copy_gbs);
      else std::printf(" - |\n");
    } else {
      std::printf(" | | |\n");
    }
    nlohmann::ordered_json j = {{"test", r.test}, {"tokens", r.tokens}, {"depth", r.depth}, {"seconds", r.seconds},
                                {"tok_s", r.tok_s()}, {"sequences", r.seqs}};
    if (r.graph_nodes) j["graph_operations_per_step"] = r.graph_nodes;
    if (decode) {
      j["weight_bytes_per_token"] = wbytes;
      j["gb_s"] = gbs;
      if (copy_gbs > 0) j["pct_of_copy"] = 100.0 * gbs / copy_gbs;
    }
    jr.push_back(j);
  }
  if (!ops_per_step.empty()) std::printf("\ncaptured decode step, operations over the shards: %s\n", ops_per_step.c_str());
  if (a.has("json")) {
    nlohmann::ordered_json out = {{"model", model_name},
                                  {"state_bytes_per_token", state.cmp_page_bytes / state.page},
                                  {"state_bytes_128k", state.sequence_bytes(131072)},
                                  {"state_bytes_1m", state.sequence_bytes(int64_t{1} << 20)},
                                  {"cache_turn", cache_json},
                                  {"layers", c.n_layers},
                                  {"devices", devices},
                                  {"numerics", opts.numerics == Numerics::Reference ? "reference" : "model"},
                                  {"prefill_chunk", chunk},
                                  {"load_seconds", load_s},
                                  {"weight_bytes_per_token", wbytes},
                                  {"copy_gb_s", copy_gbs},
                                  {"results", jr}};
    if (!split_json.empty()) out["split"] = split_json;
    if (!draft_json.empty()) out["draft"] = draft_json;
    out["decode_steps"] = {{"graph_replays", graphs.replayed}, {"graph_captures", graphs.captured},
                           {"op_by_op", graphs.eager}, {"capture_failures", graphs.failed},
                           {"graph_operations", graphs.nodes}};
    std::ofstream f(*a.get("json"));
    HS_CHECK(f, "--json: cannot write ", *a.get("json"));
    f << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace hs::cli
