// safetensors header parsing and config.json: each input is read both as a .safetensors file and
// as config.json text (the seed corpus holds both kinds), so one target covers a model
// directory's two parsers.
#include "format/safetensors.h"
#include "fuzz_util.h"
#include "model/config.h"

using namespace hs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file(data, size, ".safetensors");
  try {
    const st::File f(path);
    for (const auto& [name, t] : f.tensors()) {
      const uint64_t want = static_cast<uint64_t>(t.n_elements()) * static_cast<uint64_t>(st::dtype_size(t.dtype));
      if (t.nbytes != want) fuzz::broken("tensor " + name + ": nbytes disagrees with dtype x shape");
    }
  } catch (const Error&) {
  }
  try {
    const ModelConfig c = config_from_hf_json(std::string(fuzz::as_text(data, size)), "config.json");
    (void)c.summary();
    (void)c.layer_schedule();
  } catch (const Error&) {
  }
  return 0;
}
