// Loads what `serve` and `run` serve: the Engine and its tokenizer, from a GGUF (tokenizer
// embedded), a Hugging Face directory (tokenizer.json beside the weights), an explicit
// --tokenizer, or, with no model file, a synthetic model (model/synthetic.h): the built-in one
// or a preset's (`serve --synthetic`), with the built-in tokenizer.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "engine/distributed.h"
#include "engine/engine.h"
#include "model/synthetic.h"
#include "tokenizer/bpe.h"
#include "tokenizer/chat.h"

namespace hs::server {

struct ModelSpec {
  std::optional<std::string> path;         // none: `synthetic`, or else the built-in model
  std::optional<SyntheticSpec> synthetic;  // not with `path`
  std::optional<std::string> tokenizer;    // GGUF, tokenizer.json or a directory holding one
  std::optional<std::string> name;         // the served model id (default: from the path or the spec)
  std::optional<std::string> variant;      // chat variant "v4" | "v4-0731" (default: from the name)
  EngineOptions engine;
  // Rank 0 of a pipeline of processes (--rank 0 --world N --coordinator; engine/distributed.h):
  // the engine holds the first shard and steps every rank. Needs `path`.
  std::optional<DistributedOptions> pipeline;
};

struct LoadedModel {
  std::unique_ptr<DistributedEngine> pipeline;  // ModelSpec::pipeline: it owns the engine
  std::unique_ptr<Engine> own;
  Engine* engine = nullptr;  // own, or the pipeline's
  std::unique_ptr<Tokenizer> tokenizer;
  std::string name;
  ChatVariant variant = ChatVariant::v4;
};

// Throws hs::Error naming what is missing (e.g. a model without a tokenizer).
LoadedModel load_model(const ModelSpec& spec);

}  // namespace hs::server
