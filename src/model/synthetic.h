// Synthetic DeepSeek-V4 models: the real architecture at the tiny-fixture, V4-Flash or V4-Pro
// widths, with deterministic random weights made on demand (nothing on disk, nothing held), a
// small byte-level BPE tokenizer with every DS4 special token, and a GGUF writer for them.
// They serve `synth` (benchmark/loader files in the real shapes and quant mixes), the built-in
// model `run`/`serve` use without MODEL, and tests.
//
// Weights follow shared/tools/gen_hf_fixtures.py `randomise()`: matrices N(0, 1/sqrt(in)),
// norms N(1, 0.1), HC scale U(0.5, 1.5), HC base N(0, 0.5), sinks and the embedding N(0, 1),
// router bias N(0, 0.1), tid2eid distinct random experts per token. "Normal" is Irwin-Hall(4)
// (same mean and variance, tails cut at 3.46 sigma): one hash per value keeps Flash-sized
// tensors fast to make. Values depend only on (seed, tensor name, element index).
//
// Quant mixes (values are dequantize(quantize(random)), so a GGUF of them is lossless):
//   f32     everything F32
//   q8      matrices and experts Q8_0
//   mxfp4   experts MXFP4, matrices Q8_0
//   q2      antirez's ds4 q2 file: gate/up experts IQ2_XXS, down experts Q2_K; attention, shared
//           experts and output Q8_0; token embedding, router, HC projections, compressors (ape
//           too) and indexer F16; norms, sinks, HC base/scale, router bias F32.
//   q4k     experts Q4_K, matrices Q8_0
//   native  official-checkpoint-like: the official FP8 matrices (attention, shared experts,
//           indexer q) on the e4m3 grid with 128x128 power-of-two block scales (reported
//           F8_E4M3, written BF16, which holds them exactly); the other matrices and the norms
//           BF16-rounded; experts FP4 e2m1 with per-32 E8M0 scales (reported F4_E2M1, written MXFP4).
// Other than in q2, HC projections and vectors stay F32 (norms BF16-exact in `native`); tid2eid
// is I32. A row whose length is not a whole number of the type's blocks (the tiny widths under
// the 256-element types) falls back like llama-quantize: IQ2_XXS, Q2_K -> Q4_0 (llama.cpp
// picks IQ4_NL, which has no quantizer here; same block and size), Q4_K -> Q5_0, and F16 for a
// row that is not a whole number of 32 either.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "format/ggml_types.h"
#include "model/config.h"
#include "model/source.h"
#include "model/tensors.h"
#include "tokenizer/bpe.h"

namespace hs {

namespace gguf {
class Writer;
}

struct SyntheticSpec {
  std::string preset = "tiny";  // tiny | flash | pro
  int layers = -1;              // -1: the preset's count; else the schedule cut or extended
  std::string quant = "f32";    // f32 | q8 | mxfp4 | q2 | q4k | native
  uint64_t seed = 1;
  int64_t vocab = -1;  // -1: tiny -> the synthetic tokenizer's size, flash/pro -> 129280
  // Matrices and experts are not made on the host at all: native() asks the device backend
  // to fill them (random quantised rows of the mix's types; `bench --synthetic`). read_f32
  // still generates the host values, which then differ from the device's.
  bool device_fill = false;
  // "mtp": the model also has an MTP block (ds4-model-spec.md §7; random weights like the rest),
  // stored in GGUFs as `draft_layout` says: "nextn" llama.cpp's converter (blk.<n>.*, fused
  // blk.<n>.nextn.eh_proj, past block_count), "nextn-counted" the same counted in block_count
  // (Unsloth), "mtp0" antirez's mtp.0.* (separate e_proj and h_proj). "": no drafter.
  std::string draft;
  std::string draft_layout = "nextn";
  // GGUF only: write the drafter alone (an MTP-only file, for --draft-model), with the model's metadata.
  bool draft_only = false;
};

// The preset's config with the overrides applied (validated); throws hs::Error naming a bad
// preset, layer count or vocabulary size.
ModelConfig synthetic_config(const SyntheticSpec& spec);

// A short id of the model, e.g. "synthetic-flash-8L-mxfp4" (the served model name, bench's
// label); throws like synthetic_config.
std::string synthetic_model_name(const SyntheticSpec& spec);

// How one tensor is stored in a quant mix: the GGUF type written, and the storage type the
// in-memory source reports (equal except for `native`: "F8_E4M3", "F4_E2M1", "BF16").
struct SyntheticStorage {
  GgmlType gguf = GgmlType::F32;
  std::string reported;
};
// Throws hs::Error on an unknown quant name (listing the valid ones).
SyntheticStorage synthetic_storage(const TensorSpec& spec, const std::string& quant);

// An in-memory ModelSource (format() "synthetic"); every read generates the tensor afresh.
std::unique_ptr<ModelSource> make_synthetic_source(const SyntheticSpec& spec);

// The synthetic tokenizer as a Hugging Face tokenizer.json. vocab_size <= 0: its natural size
// (ids 0-2 BOS/EOS/pad, 256 byte tokens, the merges, then the added tokens). A larger size
// pads with unused ids and puts the added tokens at their real V4 ids when it is >= 129280,
// else at the top of the range. Throws hs::Error when vocab_size is below the natural size.
std::string synthetic_tokenizer_json(int64_t vocab_size = 0);
int64_t synthetic_tokenizer_size();  // the natural size
// synthetic_tokenizer_json() loaded through Tokenizer::from_hf_json.
Tokenizer make_synthetic_tokenizer(int64_t vocab_size = 0);

// llama.cpp's deepseek-ai-DeepSeek-V4.jinja (src/model/data/README.md), written into GGUFs.
std::string_view synthetic_chat_template();

// Every GGUF key of a synthetic model: deepseek4.*, general.*, the tokenizer and the template.
void write_synthetic_metadata(const SyntheticSpec& spec, gguf::Writer& w);

// Called with (bytes of tensor data written, total bytes), often enough for a progress bar.
using SyntheticProgress = std::function<void(uint64_t done, uint64_t total)>;
// Writes the model as a llama.cpp-style GGUF with the mix's real GGUF types. Streams: memory
// stays at a few bands of rows per thread whatever the preset. The file appears at `path`
// only when complete (it is built as path + ".partial").
void write_synthetic_gguf(const SyntheticSpec& spec, const std::string& path, const SyntheticProgress& progress = {});

// The built-in model of `run`/`serve` without MODEL: tiny preset, f32, kBuiltinSeed, its
// vocabulary exactly the synthetic tokenizer's.
inline constexpr uint64_t kBuiltinSeed = 20260801;
SyntheticSpec builtin_spec();
std::unique_ptr<ModelSource> builtin_source();
Tokenizer builtin_tokenizer();

}  // namespace hs
