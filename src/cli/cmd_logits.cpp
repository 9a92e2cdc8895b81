// `hyperstream logits MODEL --tokens FILE --out FILE.npy [--chunks SPEC]`: the parity tool.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/args.h"
#include "cli/engine_args.h"
#include "engine/engine.h"
#include "format/npy.h"
#include "util/error.h"
#include "util/mmap.h"

namespace hs::cli {

namespace {

std::vector<int32_t> read_tokens(const std::string& path) {
  std::string text = read_file(path);
  std::vector<int32_t> out;
  std::istringstream ss(text);
  std::string w;
  while (ss >> w) {
    long long v = parse_int(path + ": token #" + std::to_string(out.size()), w);
    HS_CHECK(v >= 0 && v <= INT32_MAX, path, ": token #", out.size(), " = ", v, " is not a valid token id");
    out.push_back(static_cast<int32_t>(v));
  }
  HS_CHECK(!out.empty(), path, ": no token ids (expected whitespace-separated integers)");
  return out;
}


void print_top(const float* last, int64_t V, int64_t T, long long k) {
  std::vector<int64_t> idx(static_cast<size_t>(V));
  for (int64_t i = 0; i < V; ++i) idx[static_cast<size_t>(i)] = i;
  const int64_t kk = std::min<int64_t>(k, V);
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int64_t x, int64_t y) { return last[x] > last[y]; });
  std::printf("top %lld next tokens after position %lld:\n", static_cast<long long>(kk), static_cast<long long>(T - 1));
  for (int64_t i = 0; i < kk; ++i)
    std::printf("  token %6lld  logit %9.4f\n", static_cast<long long>(idx[static_cast<size_t>(i)]), last[idx[static_cast<size_t>(i)]]);
}

void report(const std::string& out, int64_t T, size_t n_chunks, double secs, int64_t V) {
  std::fprintf(stderr, "logits: %lld tokens in %zu chunk(s), %.3f s (%.1f tok/s) -> %s [%lld x %lld]\n",
               static_cast<long long>(T), n_chunks, secs, static_cast<double>(T) / secs, out.c_str(),
               static_cast<long long>(T), static_cast<long long>(V));
}

// One rank of a pipeline of processes (engine/distributed.h). Rank 0 reads the tokens and writes
// the .npy; the others serve rank 0 until it says shutdown.
int run_rank(const ParsedArgs& a, const EngineOptions& opts, const DistributedOptions& d) {
  std::vector<int32_t> tokens;
  std::vector<int64_t> chunks;
  if (d.rank == 0) {
    HS_CHECK(a.has("tokens"), "missing --tokens FILE (rank 0 owns the tokens)");
    HS_CHECK(a.has("out"), "missing --out FILE.npy (rank 0 writes the results)");
    tokens = read_tokens(*a.get("tokens"));
    const int64_t T = static_cast<int64_t>(tokens.size());
    chunks = parse_chunk_spec(a.get_or("chunks", std::to_string(T)), T);
  }
  try {
    if (d.rank != 0) return run_pipeline_rank("logits", a.positionals()[0], opts, d);
    auto de = std::make_unique<DistributedEngine>(a.positionals()[0], opts, d);
    std::fprintf(stderr, "logits: rank %d/%d: layers [%d, %d) on %s; pipeline up\n", d.rank, d.world,
                 de->layer_begin(), de->layer_end(), opts.device.c_str());
    const int64_t T = static_cast<int64_t>(tokens.size());
    const int64_t V = de->config().vocab_size;
    std::vector<float> logits(static_cast<size_t>(T * V));
    const auto t0 = std::chrono::steady_clock::now();
    {
      Engine& eng = de->local();  // (every step of it runs through all the ranks)
      auto seq = eng.new_sequence();
      int64_t pos = 0;
      for (int64_t c : chunks) {
        eng.step(*seq, tokens.data() + pos, c, logits.data() + pos * V);
        pos += c;
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    de->shutdown();
    npy::write_f32(*a.get("out"), {T, V}, logits.data());
    report(*a.get("out"), T, chunks.size(), secs, V);
    if (const long long k = a.get_int("top", 0); k > 0) print_top(logits.data() + (T - 1) * V, V, T, k);
    return 0;
  } catch (const std::exception& e) {
    leave_after_pipeline_failure(cat("hyperstream logits: error: ", e.what()));
  }
}

}  // namespace

int cmd_logits(const Args& args) {
  std::vector<OptionSpec> specs = {
      {"tokens", true, "file of whitespace-separated token ids (required)", "FILE"},
      {"out", true, "output .npy file: float32 [T, vocab], row t = logits after token t (required)", "FILE"},
      {"chunks", true, "comma list of chunk sizes summing to T, or one k for chunks of k (default: one chunk)",
       "SPEC"},
      {"top", true, "also print the K most likely next tokens after the last position", "K"},
  };
  for (auto& o : engine_option_specs("cpu (default) or cuda:N",
                                     "reference (f32, default) or model (bf16 activations, QAT round trips)"))
    specs.push_back(o);
  for (auto& o : distributed_option_specs()) specs.push_back(o);
  ParsedArgs a("logits", args, specs);
  if (a.help()) {
    print_help("logits", "MODEL --tokens FILE --out FILE.npy [options]",
               "Runs MODEL over the token ids, prefilling them in the given chunks (a chunk of 1 is a decode\n"
               "step), and writes the logits after every token. Used to check the engine against reference\n"
               "logits: every chunk split must give the same result.\n\n"
               "With --rank/--world/--coordinator it is one process of a layer-split pipeline (one shard per\n"
               "process, NCCL between GPUs, TCP between CPUs; docs/multi-gpu.md): rank 0 reads --tokens and writes --out, the\n"
               "other ranks (which ignore --tokens/--out/--chunks/--top) run until rank 0 is done.",
               specs);
    return 0;
  }
  HS_CHECK(a.positionals().size() == 1, "expected exactly one MODEL argument (see hyperstream logits --help)");
  const EngineOptions opts = engine_options(a, "cpu", "reference");
  if (const auto d = distributed_options(a, opts)) return run_rank(a, opts, *d);
  HS_CHECK(a.has("tokens"), "missing --tokens FILE");
  HS_CHECK(a.has("out"), "missing --out FILE.npy");
  const std::vector<int32_t> tokens = read_tokens(*a.get("tokens"));
  const int64_t T = static_cast<int64_t>(tokens.size());
  const std::vector<int64_t> chunks = parse_chunk_spec(a.get_or("chunks", std::to_string(T)), T);

  Engine eng(a.positionals()[0], opts);
  const int64_t V = eng.config().vocab_size;
  for (int64_t t = 0; t < T; ++t)
    HS_CHECK(tokens[static_cast<size_t>(t)] < V, *a.get("tokens"), ": token #", t, " = ", tokens[static_cast<size_t>(t)],
             " is outside the vocabulary [0, ", V, ")");

  std::vector<float> logits(static_cast<size_t>(T * V));
  auto seq = eng.new_sequence();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t pos = 0;
  for (int64_t c : chunks) {
    eng.step(*seq, tokens.data() + pos, c, logits.data() + pos * V);
    pos += c;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  npy::write_f32(*a.get("out"), {T, V}, logits.data());
  report(*a.get("out"), T, chunks.size(), secs, V);
  if (const long long k = a.get_int("top", 0); k > 0) print_top(logits.data() + (T - 1) * V, V, T, k);
  return 0;
}

}  // namespace hs::cli
