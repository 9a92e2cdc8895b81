// ModelSource: a model on disk (GGUF file, or HF directory with HF-transformers or official
// DeepSeek naming) seen through the canonical tensor inventory of model/tensors.h.
// Sources validate presence, shape and storage type of every tensor with errors that name
// the tensor, the expected and the found value, and hand out dequantised f32 data.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "format/ggml_types.h"
#include "model/config.h"
#include "model/tensors.h"

namespace hs {

// Stored bytes a GGUF writer can copy unchanged: a GGUF source's tensor data (the mapping's).
struct RawGgufTensor {
  GgmlType type = GgmlType::F32;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;
};

// One official FP4 expert matrix [rows, cols] as stored (pointers into the mapping): E2M1 codes
// two per byte (element 2j in the low nibble) and one E8M0 scale per 32 elements of a row.
struct Fp4Matrix {
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  int64_t rows = 0, cols = 0;
};

// A matrix or an expert stack ([E * rows, cols]) in its stored form, for a backend that
// computes on it directly (engine/weights.h WeightForm::Native).
struct NativeTensor {
  enum class Kind : uint8_t {
    None,        // not available in stored form: read it through read_f32
    Gguf,        // `data`: rows of `type` (GGUF blocks, or plain F32/F16/BF16 rows)
    Fp8Block,    // `data`: e4m3 [rows, cols]; `scales`: e8m0 [ceil(rows/128), ceil(cols/128)]
    DeviceFill,  // nothing stored: the device makes random weights of `type` (or FP8 when fp8)
  };
  Kind kind = Kind::None;
  GgmlType type = GgmlType::F32;
  bool fp8 = false;                 // DeviceFill: official FP8 with 128x128 block scales
  const uint8_t* data = nullptr;    // into the source's mapping, or into `owned`
  uint64_t nbytes = 0;
  const uint8_t* scales = nullptr;
  std::shared_ptr<const std::vector<uint8_t>> owned;  // bytes the source had to assemble
  uint64_t seed = 0;                // DeviceFill
  explicit operator bool() const { return kind != Kind::None; }
};

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
  // One matrix [out, in] of an Experts stack, so converters need not hold a whole stack
  // (8.6 GB of f32 per Flash layer). The default slices read_f32.
  virtual std::vector<float> read_expert_f32(const TensorSpec& spec, int64_t expert) const;
  // Raw access for lossless conversion; nullopt where the source does not store it that way.
  virtual std::optional<RawGgufTensor> raw_gguf(const TensorSpec&) const { return std::nullopt; }
  virtual std::optional<Fp4Matrix> fp4_expert(const TensorSpec&, int64_t) const { return std::nullopt; }
  // A Matrix or Experts tensor in stored form (checked like read_f32); Kind::None where the
  // source has no such form for it.
  virtual NativeTensor native(const TensorSpec&) const { return {}; }
  // Storage type name of a tensor of the inventory ("" when absent), for inspect.
  virtual std::string storage_type(const TensorSpec& spec) const = 0;
  // A 64-bit hash that differs between models whose weights differ (what a prefix-cache entry
  // on disk is checked against): the config, every stored tensor's name, type and shape, and
  // the stored bytes of every matrix sampled at 16 places (4 KiB each). Synthetic sources hash
  // their generator's parameters instead.
  virtual uint64_t fingerprint() const;

  // Checks every tensor of layers [begin, end) (+ globals); returns one message per problem.
  std::vector<std::string> validate(int begin, int end, bool with_embed, bool with_head) const;
  // The MTP block's inventory in the form this source stores it (mtp_tensor_specs: a fused
  // eh_proj or e_proj + h_proj); empty when the source has no MTP tensor at all. A source with
  // some MTP tensors but not all gets the full list, so validate_mtp() names what is missing.
  std::vector<TensorSpec> mtp_specs() const;
  bool has_mtp() const { return !mtp_specs().empty(); }
  // Checks every MTP tensor (presence, shape against the main model's config, type); one
  // message per problem, or one saying there is no MTP block.
  std::vector<std::string> validate_mtp() const;
  // The DSpark drafter (docs/speculative.md): its inventory for the stages this source holds
  // (config().dspark.stages, counted from the tensors where the config does not say); empty when
  // it has no DSpark tensor (no main_proj). validate_dspark(): the config checked against the
  // model, then every tensor; one message per problem.
  std::vector<TensorSpec> dspark_specs() const;
  bool has_dspark() const { return !dspark_specs().empty(); }
  std::vector<std::string> validate_dspark() const;

 protected:
  ModelConfig config_;
  std::string path_;
};

std::unique_ptr<ModelSource> open_hf_source(const std::string& dir);
std::unique_ptr<ModelSource> open_gguf_source(const std::string& path);
// A drafter GGUF apart from the model (antirez's MTP file, llama.cpp's MTP-only GGUF): its MTP
// tensors under main's config (mtp_specs, validate_mtp); throws naming the key when its metadata
// describes another model (widths, vocabulary, where its block sits).
std::unique_ptr<ModelSource> open_gguf_drafter(const std::string& path, const ModelConfig& main);

}  // namespace hs
