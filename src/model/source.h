// ModelSource: a model on disk (GGUF file, or HF directory with HF-transformers or official
// DeepSeek naming) seen through the canonical tensor inventory of model/tensors.h.
// Sources validate presence, shape and storage type of every tensor with errors that name
// the tensor, the expected and the found value, and hand out dequantised f32 data.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/tensors.h"

namespace hs {

struct StoredTensor {
  std::string name;
  std::string type;              // storage type name (F32, BF16, F8_E4M3, Q8_0, ...)
  std::vector<int64_t> shape;    // outermost first
  uint64_t nbytes = 0;
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  // Opens a .gguf file or an HF directory (config.json + safetensors).
  static std::unique_ptr<ModelSource> open(const std::string& path);

  const ModelConfig& config() const { return config_; }
  const std::string& path() const { return path_; }
  virtual std::string format() const = 0;  // "gguf", "hf", "official"
  virtual std::vector<StoredTensor> stored_tensors() const = 0;

  // Throws hs::Error if the tensor is missing, has the wrong shape or an unsupported type.
  virtual void check(const TensorSpec& spec) const = 0;
  virtual std::vector<float> read_f32(const TensorSpec& spec) const = 0;
  virtual std::vector<int32_t> read_i32(const TensorSpec& spec) const = 0;
  // Storage type name of a tensor of the inventory ("" when absent), for inspect.
  virtual std::string storage_type(const TensorSpec& spec) const = 0;

  // Checks every tensor of layers [begin, end) (+ globals); returns one message per problem.
  std::vector<std::string> validate(int begin, int end, bool with_embed, bool with_head) const;

 protected:
  ModelConfig config_;
  std::string path_;
};

std::unique_ptr<ModelSource> open_hf_source(const std::string& dir);
std::unique_ptr<ModelSource> open_gguf_source(const std::string& path);

}  // namespace hs
