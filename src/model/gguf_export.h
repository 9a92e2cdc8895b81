// Writes a model (any ModelSource) as a llama.cpp-style DeepSeek-V4 GGUF: deepseek4.* keys of
// ../shared/docs/gguf-ds4.md §1 and the canonical tensor names, dense matrices and routed
// experts stored in the chosen types (HC projections, norms and vectors stay F32).
#pragma once
#include <functional>
#include <string>

#include "format/ggml_types.h"
#include "format/gguf.h"
#include "model/source.h"

namespace hs {

struct GgufExportOptions {
  GgmlType dense = GgmlType::F32;    // attention/shared-expert/embedding/output matrices
  GgmlType experts = GgmlType::F32;  // routed experts
  std::string name = "DeepSeek-V4";
  // Called after each tensor with (done, total) for a progress bar.
  std::function<void(size_t, size_t)> progress;
};

// The deepseek4.* metadata of a config (shared by export and synthetic models).
void write_config_metadata(const ModelConfig& c, gguf::Writer& w);

void export_gguf(const ModelSource& src, const std::string& out_path, const GgufExportOptions& opts);

}  // namespace hs
