// Writes a model (any ModelSource) as a llama.cpp-style DeepSeek-V4 GGUF: deepseek4.* keys of
// ../shared/docs/gguf-ds4.md §1 and the canonical tensor names, dense matrices and routed
// experts stored in the chosen types, the tokenizer and the V4 chat template. Streamed: one
// tensor (one expert of a stack) is held at a time, so a 160 GB checkpoint converts in a few GB.
//
// Lossless paths: official FP4 experts -> MXFP4 is a byte repack (no decoding); a GGUF
// source's tensor is copied byte for byte when its type is kept; FP8 (e4m3 x 2^k) and BF16
// values are exact in BF16. Everything else goes through f32 and the type's quantizer.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "model/source.h"

namespace hs {

struct GgufExportOptions {
  // nullopt = auto: the narrowest type holding the source exactly (a GGUF source's own type;
  // FP4 experts MXFP4; FP8 and BF16 matrices BF16; F16 F16; anything else F32).
  std::optional<GgmlType> dense;    // attention/shared-expert/embedding/output/router matrices
  std::optional<GgmlType> experts;  // routed experts
  std::string name = "DeepSeek-V4";
  // A tokenizer.json, model directory or GGUF to embed as tokenizer.ggml.*; "" embeds none.
  std::string tokenizer;
  // tokenizer.chat_template: the source GGUF's own, else llama.cpp's V4 template (model/data).
  bool chat_template = true;
  // Called after each tensor with (done, total) for a progress bar.
  std::function<void(size_t, size_t)> progress;
};

struct GgufExportStats {
  size_t tensors = 0;
  size_t repacked_fp4 = 0;  // expert stacks repacked FP4 -> MXFP4 from the packed bytes
  size_t copied = 0;        // tensors copied byte for byte from a GGUF source
  size_t quantized = 0;     // tensors written through f32
  int tokenizer_tokens = 0; // 0 when no tokenizer was embedded
};

// The deepseek4.* metadata of a config (shared by export and synthetic models).
// mtp_counted: block_count includes the MTP block (Unsloth's files), which sits at blk.<n_layers>.
void write_config_metadata(const ModelConfig& c, gguf::Writer& w, bool mtp_counted = false);

// The tokenizer export_gguf would embed by default: SRC/tokenizer.json for a directory, SRC
// itself for a GGUF with tokenizer.ggml.tokens; "" when there is none.
std::string default_tokenizer_path(const ModelSource& src);

GgufExportStats export_gguf(const ModelSource& src, const std::string& out_path, const GgufExportOptions& opts);

}  // namespace hs
