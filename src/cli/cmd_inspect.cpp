// `hyperstream inspect MODEL`: config, layer schedule, tensors, types, bytes, validation.
#include <cstdio>
#include <map>

#include "cli/args.h"
#include "engine/state_pool.h"
#include "format/gguf.h"
#include "model/gguf_check.h"
#include "model/source.h"
#include "util/error.h"

namespace hs::cli {

int cmd_inspect(const Args& args) {
  const std::vector<OptionSpec> specs = {
      {"tensors", false, "list every stored tensor with its type, shape and bytes"},
  };
  ParsedArgs a("inspect", args, specs);
  if (a.help()) {
    print_help("inspect", "MODEL [--tensors]",
               "Shows a DeepSeek-V4 model's configuration, layer schedule, tensor count, storage types and\n"
               "bytes, and validates every expected tensor (presence, shape, type). MODEL is a .gguf file or\n"
               "an HF directory (config.json + safetensors, HF or official DeepSeek naming).",
               specs);
    return 0;
  }
  HS_CHECK(a.positionals().size() == 1, "expected exactly one MODEL argument (see hyperstream inspect --help)");
  auto src = ModelSource::open(a.positionals()[0]);
  const ModelConfig& c = src->config();
  std::printf("model: %s\nformat: %s\n\nconfig:\n%s\nlayer schedule:\n%s\n", src->path().c_str(),
              src->format().c_str(), c.summary().c_str(), c.layer_schedule().c_str());
  std::printf("state per sequence:\n%s\n", describe_state_memory(c).c_str());
  auto stored = src->stored_tensors();
  std::map<std::string, std::pair<int, uint64_t>> by_type;
  uint64_t total = 0;
  for (const auto& t : stored) {
    by_type[t.type].first++;
    by_type[t.type].second += t.nbytes;
    total += t.nbytes;
  }
  std::printf("tensors: %zu stored, %.3f MiB\n", stored.size(), static_cast<double>(total) / (1 << 20));
  for (const auto& [type, v] : by_type)
    std::printf("  %-10s %6d tensors %12.3f MiB\n", type.c_str(), v.first, static_cast<double>(v.second) / (1 << 20));
  if (a.has("tensors")) {
    std::printf("\n");
    for (const auto& t : stored) {
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i) shape += cat(i ? "x" : "", t.shape[i]);
      std::printf("  %-60s %-8s %-20s %12llu\n", t.name.c_str(), t.type.c_str(), shape.c_str(),
                  static_cast<unsigned long long>(t.nbytes));
    }
  }
  if (src->format() == "gguf") {
    // Informational: hyperstream loads files llama.cpp would refuse (no tokenizer, 43-entry
    // ratios are fine for both), so this does not change the exit status.
    LlamaCppCheckOptions check;
    check.real_widths = c.dim >= 4096;
    const auto lc = check_llama_cpp_gguf(gguf::File(src->path()), check);
    std::printf("\nllama.cpp deepseek4 key check: %s\n", lc.empty() ? "ok" : cat(lc.size(), " problem(s)").c_str());
    for (const auto& p : lc) std::printf("  %s\n", p.c_str());
  }
  auto problems = src->validate(0, c.n_layers, true, true);
  if (problems.empty()) {
    std::printf("\nvalidation: ok (every expected tensor present with the expected shape and an allowed type)\n");
    return 0;
  }
  std::printf("\nvalidation: %zu problem(s)\n", problems.size());
  for (const auto& p : problems) std::printf("  %s\n", p.c_str());
  return 1;
}

}  // namespace hs::cli
