// What llama.cpp's deepseek4 loader requires of a GGUF (shared/docs/gguf-ds4.md §1 and §7),
// checked without llama.cpp: every required key with the exact type LC reads, the tokenizer
// keys (non-empty merges), expert_gating_func == 4, hc == 4, indexer dims, no router bias on
// hash layers, and a token count that matches token_embd.
#pragma once
#include <string>
#include <vector>

namespace hs {

namespace gguf {
class File;
}

struct LlamaCppCheckOptions {
  // Also what LC's fast paths hard-code for the real widths: compress ratios only 0, 4 or 128,
  // and the fused indexer's 64 heads x 128 dims. Off for small test models (tiny uses ratio 8
  // and a 8 x 16 indexer, which LC's generic path takes).
  bool real_widths = false;
};

// One message per problem, each naming the key or tensor, what LC expects and what was found;
// empty when the file would pass LC's deepseek4 loader checks.
std::vector<std::string> check_llama_cpp_gguf(const gguf::File& f, const LlamaCppCheckOptions& opts = {});

}  // namespace hs
