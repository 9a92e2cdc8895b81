// GGUF reader and what is read from it: every metadata getter on every key, the DeepSeek-V4
// config (range checks before casts), the tokenizer, and the llama.cpp compatibility check.
#include <vector>

#include "format/gguf.h"
#include "fuzz_util.h"
#include "model/config.h"
#include "model/gguf_check.h"
#include "tokenizer/bpe.h"

using namespace hs;

namespace {

template <typename Fn>
void quietly(Fn&& fn) {
  try {
    fn();
  } catch (const Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file(data, size, ".gguf");
  try {
    const gguf::File f(path);
    for (const std::string& k : f.keys()) {
      quietly([&] { f.get_u32(k); });
      quietly([&] { f.get_u64(k); });
      quietly([&] { f.get_i32(k); });
      quietly([&] { f.get_f32(k); });
      quietly([&] { f.get_bool(k); });
      quietly([&] { f.get_string(k); });
      quietly([&] { f.get_string_array(k); });
      quietly([&] { f.get_int_array(k); });
      quietly([&] { f.get_f32_array(k); });
    }
    for (const auto& t : f.tensors()) {
      if (t.nbytes != gguf::tensor_nbytes(t.type, t.ne)) fuzz::broken("tensor " + t.name + ": nbytes disagrees with its shape");
      if (f.data_offset() + t.offset + t.nbytes > size) fuzz::broken("tensor " + t.name + " runs past the file");
      (void)t.n_elements();
    }
    quietly([&] {
      const ModelConfig c = config_from_gguf(f);
      (void)c.summary();
      (void)c.layer_schedule();
    });
    quietly([&] {
      const Tokenizer tok = Tokenizer::from_gguf(f);
      const std::vector<int32_t> ids = tok.encode("Hello, <｜User｜> world 123");
      (void)tok.decode(ids);
    });
    quietly([&] { (void)check_llama_cpp_gguf(f); });
  } catch (const Error&) {
  }
  return 0;
}
