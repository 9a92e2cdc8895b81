// The .npy reader (logits files): shape parsing and its arithmetic against the file size.
#include "format/npy.h"
#include "fuzz_util.h"

using namespace hs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::scratch_file(data, size, ".npy");
  try {
    const npy::ArrayF32 a = npy::read_f32(path);
    uint64_t n = 1;
    for (int64_t d : a.shape) {
      if (d < 0) fuzz::broken("negative dimension");
      n *= static_cast<uint64_t>(d);
    }
    if (n != a.data.size() || n * 4 > size) fuzz::broken("element count disagrees with the shape or the file");
  } catch (const Error&) {
  }
  return 0;
}
