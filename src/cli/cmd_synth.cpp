// `hyperstream synth --preset tiny|flash|pro [--layers N] [--quant MIX] [--seed S] OUT.gguf`:
// a synthetic DeepSeek-V4 GGUF in the real shapes and quant mixes (model/synthetic.h).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "cli/args.h"
#include "format/gguf.h"
#include "model/gguf_check.h"
#include "model/synthetic.h"
#include "util/error.h"
#include "util/progress.h"

namespace hs::cli {

int cmd_synth(const Args& args) {
  const std::vector<OptionSpec> specs = {
      {"preset", true, "tiny (the test fixture's widths), flash (V4-Flash) or pro (V4-Pro); default tiny", "NAME"},
      {"layers", true, "number of layers (default: the preset's 6 / 43 / 61)", "N"},
      {"quant", true, "f32, q8, mxfp4, q2, q4k or native (default f32)", "MIX"},
      {"seed", true, "random seed of the weights (default 1)", "S"},
      {"vocab", true, "vocabulary size (default: tiny the synthetic tokenizer's, flash/pro 129280)", "V"},
      {"draft", true, "mtp: also write an MTP block (speculative decoding) of the real layout; dspark: a DSpark "
       "drafter (V4-Flash-0731's: 3 stages, blocks of 5, the last three layers tapped) in ds4's mtp.<s>.* names", "KIND"},
      {"draft-layout", true, "how the MTP block is named: nextn (llama.cpp's converter, blk.<n>.*, default), "
       "nextn-counted (the same counted in block_count, Unsloth) or mtp0 (antirez's mtp.0.*)", "L"},
      {"draft-only", false, "with --draft: write the drafter alone (with the model's metadata), a file for --draft-model"},
  };
  ParsedArgs a("synth", args, specs);
  if (a.help()) {
    print_help(
        "synth", "[--preset tiny|flash|pro] [--layers N] [--quant q2|q4k|mxfp4|q8|native|f32] [--seed S] [--draft mtp [--draft-layout nextn|nextn-counted|mtp0] | --draft dspark] OUT.gguf",
        "Writes a DeepSeek-V4 GGUF with deterministic random weights in the real architecture, with llama.cpp's\n"
        "deepseek4 keys, a small byte-level BPE tokenizer holding every DS4 special token, and the V4 chat\n"
        "template. Quant mixes: q8 = all matrices Q8_0; mxfp4 / q4k = experts MXFP4 / Q4_K, other matrices\n"
        "Q8_0; q2 = antirez's mix: gate/up experts IQ2_XXS, down experts Q2_K, attention/shared/output Q8_0,\n"
        "token_embd, router, HC projections, compressors and indexer F16; native = FP8-grid matrices written\n"
        "BF16 and FP4-grid experts written MXFP4, as converted from an official checkpoint. HC projections and\n"
        "vectors stay F32 (except as noted). Rows too short for a 256-block fall back to Q4_0 / Q5_0 like\n"
        "llama-quantize. Memory use is small whatever the preset: tensors are made and written in bands.",
        specs);
    return 0;
  }
  HS_CHECK(a.positionals().size() == 1, "expected exactly one OUT.gguf argument (see hyperstream synth --help)");
  SyntheticSpec s;
  s.preset = a.get_or("preset", "tiny");
  s.layers = static_cast<int>(a.get_int("layers", -1));
  s.quant = a.get_or("quant", "f32");
  const long long seed = a.get_int("seed", 1);
  HS_CHECK(seed >= 0, "--seed: expected a non-negative integer, got ", seed);
  s.seed = static_cast<uint64_t>(seed);
  s.vocab = a.get_int("vocab", -1);
  s.draft = a.get_or("draft", "");
  HS_CHECK(s.draft.empty() || s.draft == "mtp" || s.draft == "dspark", "--draft: synth writes mtp or dspark "
           "drafters (got '", s.draft, "')");
  HS_CHECK(!a.has("draft-layout") || s.draft == "mtp", "--draft-layout is for --draft mtp (a DSpark drafter is "
           "written in ds4's layout)");
  HS_CHECK(!a.has("draft-layout") || !s.draft.empty(), "--draft-layout needs --draft mtp");
  s.draft_layout = a.get_or("draft-layout", "nextn");
  s.draft_only = a.has("draft-only");
  HS_CHECK(!s.draft_only || !s.draft.empty(), "--draft-only needs --draft mtp or dspark");
  const std::string& out = a.positionals()[0];
  const ModelConfig c = synthetic_config(s);  // reports a bad preset/quant/layers before any work

  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Progress> bar;
  write_synthetic_gguf(s, out, [&](uint64_t done, uint64_t total) {
    if (!bar) bar = std::make_unique<Progress>("synth " + s.preset, total >> 20);
    bar->update(done >> 20);
  });
  if (bar) bar->done();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s: %s, %d layers%s, vocab %lld, quant %s, seed %llu, %.1f MiB in %.1f s\n", out.c_str(),
              s.preset.c_str(), c.n_layers, s.draft.empty() ? "" : s.draft == "dspark" ? " + DSpark (3 stages)" : (" + MTP (" + s.draft_layout + ")").c_str(), static_cast<long long>(c.vocab_size), s.quant.c_str(),
              static_cast<unsigned long long>(s.seed), static_cast<double>(std::filesystem::file_size(out)) / (1 << 20),
              secs);
  if (s.draft_only) return 0;  // (no main model to check)
  LlamaCppCheckOptions check;
  check.real_widths = s.preset != "tiny";
  const auto problems = check_llama_cpp_gguf(gguf::File(out), check);
  if (problems.empty()) std::printf("llama.cpp deepseek4 key check: ok\n");
  for (const auto& p : problems) std::printf("llama.cpp deepseek4 key check: %s\n", p.c_str());
  return problems.empty() ? 0 : 1;
}

}  // namespace hs::cli
