#include "server/model_loader.h"

#include <filesystem>

#include "util/error.h"
#include "util/log.h"

namespace hs::server {

namespace fs = std::filesystem;

namespace {

std::unique_ptr<Tokenizer> load_tokenizer(const ModelSpec& spec) {
  if (spec.tokenizer) return std::make_unique<Tokenizer>(Tokenizer::load(*spec.tokenizer));
  const std::string& path = *spec.path;
  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "tokenizer.json"))
    fail("'", path, "' has no tokenizer.json; pass --tokenizer PATH (a tokenizer.json, a directory holding one, or a GGUF)");
  try {
    return std::make_unique<Tokenizer>(Tokenizer::load(path));
  } catch (const Error& e) {
    fail("cannot load the tokenizer of '", path, "' (", e.what(), "); pass --tokenizer PATH");
  }
}

std::string default_name(const std::string& path) {
  fs::path p(path);
  while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  std::string name = p.filename().string();
  if (p.extension() == ".gguf") name = p.stem().string();
  return name.empty() ? "model" : name;
}

}  // namespace

LoadedModel load_model(const ModelSpec& spec) {
  LoadedModel m;
  HS_CHECK(!(spec.path && spec.synthetic), "a model file and a synthetic model at once");
  if (spec.path) {
    HS_CHECK(fs::exists(*spec.path), "MODEL '", *spec.path, "' does not exist (a GGUF file or a Hugging Face directory)");
    m.tokenizer = load_tokenizer(spec);
    if (spec.pipeline) {
      m.pipeline = std::make_unique<DistributedEngine>(*spec.path, spec.engine, *spec.pipeline);
      m.engine = &m.pipeline->local();
    } else {
      m.own = std::make_unique<Engine>(*spec.path, spec.engine);
      m.engine = m.own.get();
    }
    m.name = spec.name.value_or(default_name(*spec.path));
  } else {
    HS_CHECK(!spec.pipeline, "a pipeline of processes (--rank) needs a MODEL file: every rank opens it");
    m.tokenizer = std::make_unique<Tokenizer>(spec.tokenizer ? Tokenizer::load(*spec.tokenizer) : builtin_tokenizer());
    m.own = std::make_unique<Engine>(
        spec.synthetic ? make_synthetic_source(*spec.synthetic) : builtin_source(), spec.engine);
    m.engine = m.own.get();
    m.name = spec.name.value_or(spec.synthetic ? synthetic_model_name(*spec.synthetic) : "hyperstream-builtin");
  }
  const int64_t vocab = m.engine->config().vocab_size;
  HS_CHECK(m.tokenizer->vocab_size() <= vocab, "the tokenizer has ", m.tokenizer->vocab_size(),
           " tokens but the model's vocabulary is ", vocab, ": they do not belong together");
  HS_CHECK(m.tokenizer->special_ids().eos >= 0, "the tokenizer has no EOS token (<｜end▁of▁sentence｜>)");
  if (spec.variant) m.variant = parse_chat_variant(*spec.variant);
  else if (m.name.find("0731") != std::string::npos) m.variant = ChatVariant::v4_0731;
  return m;
}

}  // namespace hs::server
