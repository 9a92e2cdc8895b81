// `hyperstream convert SRC OUT.gguf`: an HF/official directory (or a GGUF) -> a llama.cpp-style
// DeepSeek-V4 GGUF with the chosen storage types.
#include <cstdio>

#include "cli/args.h"
#include "format/ggml_types.h"
#include "model/gguf_export.h"
#include "util/error.h"
#include "util/progress.h"

namespace hs::cli {

namespace {
GgmlType parse_type(const std::string& opt, const std::string& s) {
  auto t = ggml_type_from_name(s);
  HS_CHECK(t.has_value(), opt, ": unknown type '", s, "' (e.g. f32, f16, bf16, q8_0, mxfp4, q4_k)");
  return *t;
}
}  // namespace

int cmd_convert(const Args& args) {
  const std::vector<OptionSpec> specs = {
      {"dense", true, "type of attention/shared-expert/embedding/output matrices (default bf16)", "TYPE"},
      {"experts", true, "type of routed experts (default mxfp4)", "TYPE"},
      {"name", true, "general.name written into the file", "NAME"},
  };
  ParsedArgs a("convert", args, specs);
  if (a.help()) {
    print_help("convert", "SRC OUT.gguf [--dense bf16|f16|f32|q8_0] [--experts mxfp4|q8_0|q4_k|...]",
               "Converts a DeepSeek-V4 model (HF directory with HF or official naming, or a GGUF) to a GGUF\n"
               "with llama.cpp's deepseek4 keys and tensor names. HC projections, norms and vectors stay F32.\n"
               "FP8 dense weights are exact in bf16 and FP4 experts are exact in mxfp4.",
               specs);
    return 0;
  }
  HS_CHECK(a.positionals().size() == 2, "expected SRC and OUT.gguf (see hyperstream convert --help)");
  auto src = ModelSource::open(a.positionals()[0]);
  GgufExportOptions o;
  o.dense = parse_type("--dense", a.get_or("dense", "bf16"));
  o.experts = parse_type("--experts", a.get_or("experts", "mxfp4"));
  o.name = a.get_or("name", "DeepSeek-V4");
  const auto& c = src->config();
  Progress bar("convert", model_tensor_specs(c, 0, c.n_layers, true, true).size());
  o.progress = [&](size_t done, size_t) { bar.update(done); };
  export_gguf(*src, a.positionals()[1], o);
  bar.done();
  std::printf("wrote %s (dense %s, experts %s)\n", a.positionals()[1].c_str(), ggml_type_name(o.dense),
              ggml_type_name(o.experts));
  return 0;
}

}  // namespace hs::cli
