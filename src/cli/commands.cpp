#include "cli/commands.h"

namespace hs::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"inspect", "show a model's config, layer schedule, tensors, types and bytes", cmd_inspect},
      {"logits", "run a model over token ids and write the logits of every position (.npy)", cmd_logits},
      {"tokenize", "encode texts (JSON lines) to token ids with a GGUF or tokenizer.json", cmd_tokenize},
      {"detokenize", "decode token ids (JSON lines) back to text", cmd_detokenize},
      {"render", "print the DeepSeek-V4 prompt of a chat request (byte-exact)", cmd_render}, {"parse-completion", "split model output into reasoning, content and DSML tool calls (JSON)", cmd_parse_completion},
      {"convert", "convert an HF/official checkpoint (or GGUF) to a llama.cpp-style DeepSeek-V4 GGUF", cmd_convert},
      {"synth", "write a synthetic DeepSeek-V4 GGUF (tiny/flash/pro shapes, real quant mixes, random weights)", cmd_synth},
      {"serve", "serve a model over HTTP: OpenAI and Anthropic APIs, continuous batching", cmd_serve},
      {"run", "generate once from a prompt and print the answer (same path as serve)", cmd_run},
      {"bench", "prefill and decode tok/s, weight bytes per token, % of device copy bandwidth", cmd_bench},
      // @@COMMAND-TABLE@@ (helpers: add `{"name", "summary", cmd_x},` above this line)
  };
  return kCommands;
}

}  // namespace hs::cli
