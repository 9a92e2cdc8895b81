// `hyperstream convert SRC OUT.gguf`: an HF/official directory (or a GGUF) -> a llama.cpp-style
// DeepSeek-V4 GGUF with the chosen storage types, the tokenizer and the V4 chat template, then
// the llama.cpp deepseek4 key check on the result.
#include <cstdio>
#include <optional>

#include "cli/args.h"
#include "format/ggml_types.h"
#include "format/gguf.h"
#include "model/gguf_check.h"
#include "model/gguf_export.h"
#include "util/error.h"
#include "util/progress.h"

namespace hs::cli {

namespace {
std::optional<GgmlType> parse_type(const std::string& opt, const std::string& s) {
  if (s == "auto") return std::nullopt;
  auto t = ggml_type_from_name(s);
  HS_CHECK(t.has_value(), opt, ": unknown type '", s, "' (auto, or e.g. f32, f16, bf16, q8_0, mxfp4, q4_k)");
  return *t;
}
}  // namespace

int cmd_convert(const Args& args) {
  const std::vector<OptionSpec> specs = {
      {"dense", true, "type of attention/shared-expert/embedding/output/router matrices (default auto)", "TYPE"},
      {"experts", true, "type of routed experts (default auto)", "TYPE"},
      {"name", true, "general.name written into the file", "NAME"},
      {"tokenizer", true, "tokenizer.json, directory or GGUF to embed (default: SRC's; 'none' for none)", "PATH"},
      {"strict", false, "exit 1 when the llama.cpp key check reports a problem"},
  };
  ParsedArgs a("convert", args, specs);
  if (a.help()) {
    print_help("convert", "SRC OUT.gguf [--dense auto|bf16|f16|f32|q8_0|...] [--experts auto|mxfp4|q8_0|q4_k|...]",
               "Converts a DeepSeek-V4 model (HF directory with HF or official naming, or a GGUF) to a GGUF with\n"
               "llama.cpp's deepseek4 keys and tensor names, the tokenizer (SRC/tokenizer.json) and the V4 chat\n"
               "template. auto keeps every value exactly: official FP4 experts are repacked to MXFP4 byte for\n"
               "byte, FP8 and BF16 matrices become BF16, a GGUF's tensors are copied as stored. HC projections\n"
               "and vectors are F32 (a GGUF's are copied). Tensors are streamed: memory stays at a few GB.",
               specs);
    return 0;
  }
  HS_CHECK(a.positionals().size() == 2, "expected SRC and OUT.gguf (see hyperstream convert --help)");
  auto src = ModelSource::open(a.positionals()[0]);
  const std::string& out = a.positionals()[1];
  GgufExportOptions o;
  o.dense = parse_type("--dense", a.get_or("dense", "auto"));
  o.experts = parse_type("--experts", a.get_or("experts", "auto"));
  o.name = a.get_or("name", "DeepSeek-V4");
  const std::string tok = a.get_or("tokenizer", "");
  o.tokenizer = tok == "none" ? "" : tok.empty() ? default_tokenizer_path(*src) : tok;
  const auto& c = src->config();
  Progress bar("convert", model_tensor_specs(c, 0, c.n_layers, true, true).size());
  o.progress = [&](size_t done, size_t) { bar.update(done); };
  const GgufExportStats st = export_gguf(*src, out, o);
  bar.done();
  const auto type_name = [](const std::optional<GgmlType>& t) { return t ? ggml_type_name(*t) : "auto"; };
  std::printf("wrote %s: %zu tensors (dense %s, experts %s): %zu expert stacks repacked FP4 -> MXFP4, %zu copied, "
              "%zu through f32\n",
              out.c_str(), st.tensors, type_name(o.dense), type_name(o.experts), st.repacked_fp4, st.copied,
              st.quantized);
  if (st.tokenizer_tokens > 0) std::printf("tokenizer: %d tokens from %s\n", st.tokenizer_tokens, o.tokenizer.c_str());
  else std::printf("tokenizer: none embedded (SRC has no tokenizer.json; pass --tokenizer PATH)\n");
  LlamaCppCheckOptions check;
  check.real_widths = c.dim >= 4096;  // the real Flash/Pro widths; small test models use others
  const auto problems = check_llama_cpp_gguf(gguf::File(out), check);
  if (problems.empty()) std::printf("llama.cpp deepseek4 key check: ok\n");
  for (const auto& p : problems) std::printf("llama.cpp deepseek4 key check: %s\n", p.c_str());
  return problems.empty() || !a.has("strict") ? 0 : 1;
}

}  // namespace hs::cli
