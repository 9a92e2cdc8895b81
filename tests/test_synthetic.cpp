// Synthetic DeepSeek-V4 models (model/synthetic.h): presets, the in-memory source, the GGUF
// writer (lossless round trip, llama.cpp key check), the tokenizer, the built-in model through
// the engine, Flash shapes without Flash memory, and the `synth` command.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>

#include "cli_util.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "format/gguf.h"
#include "format/quants.h"
#include "model/gguf_check.h"
#include "model/synthetic.h"
#include "model/synthetic_impl.h"  // the band generator, to check one Flash-width band
#include "tokenizer/chat_tokens.h"
#include "util/error.h"
#include "util/fp.h"

using namespace hs;

namespace {

SyntheticSpec spec_of(const std::string& preset, const std::string& quant = "f32", int layers = -1) {
  SyntheticSpec s;
  s.preset = preset;
  s.quant = quant;
  s.layers = layers;
  return s;
}

const TensorSpec& find_spec(const std::vector<TensorSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name) return s;
  throw Error("no tensor " + name);
}

std::string temp_path(const std::string& name) { return testing::TempDir() + "/hs_synth_" + name; }

// Resident memory of this process, from /proc/self/status.
int64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

// ------------------------------------------------------------------ (a) presets and inventory

TEST(SyntheticPresets, ConfigsValidateAndHaveTheRealWidths) {
  const ModelConfig tiny = synthetic_config(spec_of("tiny"));
  EXPECT_EQ(tiny.dim, 64);
  EXPECT_EQ(tiny.n_layers, 6);
  EXPECT_EQ(tiny.index_head_dim, 16);
  EXPECT_EQ(tiny.compress_ratios, (std::vector<int>{0, 0, 4, 8, 4, 8}));
  EXPECT_EQ(tiny.vocab_size, synthetic_tokenizer_size());
  EXPECT_EQ(tiny.yarn.original_ctx, 64);

  const ModelConfig flash = synthetic_config(spec_of("flash"));
  EXPECT_EQ(flash.vocab_size, 129280);
  EXPECT_EQ(flash.dim, 4096);
  EXPECT_EQ(flash.n_layers, 43);
  EXPECT_EQ(flash.n_heads, 64);
  EXPECT_EQ(flash.head_dim, 512);
  EXPECT_EQ(flash.n_experts, 256);
  EXPECT_EQ(flash.index_topk, 512);
  EXPECT_EQ(flash.ratio(0), 0);
  EXPECT_EQ(flash.ratio(3), 128);
  EXPECT_EQ(flash.ratio(42), 4);  // as in the official schedule (its 44th entry is the MTP block's)

  const ModelConfig pro = synthetic_config(spec_of("pro"));
  EXPECT_EQ(pro.dim, 7168);
  EXPECT_EQ(pro.n_layers, 61);
  EXPECT_EQ(pro.n_experts, 384);
  EXPECT_EQ(pro.q_lora_rank, 1536);
  EXPECT_EQ(pro.index_topk, 1024);
  EXPECT_FLOAT_EQ(pro.route_scale, 2.5f);
  EXPECT_EQ(pro.ratio(0), 128);
  EXPECT_EQ(pro.ratio(2), 4);

  EXPECT_EQ(synthetic_config(spec_of("flash", "q8", 5)).compress_ratios, (std::vector<int>{0, 0, 4, 128, 4}));
  EXPECT_EQ(synthetic_config(spec_of("tiny", "f32", 2)).n_hash_layers, 2);
  EXPECT_EQ(synthetic_config(spec_of("tiny", "f32", 9)).compress_ratios, (std::vector<int>{0, 0, 4, 8, 4, 8, 4, 8, 4}));
  EXPECT_THROW(synthetic_config(spec_of("huge")), Error);
  EXPECT_THROW(synthetic_config(spec_of("tiny", "q3")), Error);
  EXPECT_THROW(synthetic_config(spec_of("tiny", "f32", 0)), Error);
}

TEST(SyntheticPresets, SourceInventoryMatchesTheTensorTable) {
  for (const char* preset : {"tiny", "flash", "pro"}) {
    auto src = make_synthetic_source(spec_of(preset, "q8"));
    const ModelConfig& c = src->config();
    const auto specs = model_tensor_specs(c, 0, c.n_layers, true, true);
    const auto stored = src->stored_tensors();
    ASSERT_EQ(stored.size(), specs.size()) << preset;
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(stored[i].shape, specs[i].shape) << specs[i].name;
      EXPECT_EQ(stored[i].name.rfind(specs[i].name + ".", 0), 0u) << stored[i].name;
      EXPECT_EQ(stored[i].type, src->storage_type(specs[i]));
    }
    EXPECT_TRUE(src->validate(0, c.n_layers, true, true).empty()) << preset;
    EXPECT_EQ(src->format(), "synthetic");
  }
}

TEST(SyntheticPresets, QuantMixTypes) {
  const ModelConfig flash = synthetic_config(spec_of("flash", "q2", 4));
  const auto fs = model_tensor_specs(flash, 0, 4, true, true);
  const auto& gate = find_spec(fs, "blk.0.ffn_gate_exps");
  const auto& qa = find_spec(fs, "blk.0.attn_q_a");
  const auto& norm = find_spec(fs, "blk.0.attn_norm");
  EXPECT_EQ(synthetic_storage(gate, "q4k").gguf, GgmlType::Q4_K);
  EXPECT_EQ(synthetic_storage(gate, "mxfp4").gguf, GgmlType::MXFP4);
  // q2 is antirez's ds4 q2 file, tensor by tensor (gguf-ds4.md §2).
  const std::vector<std::pair<const char*, GgmlType>> q2 = {
      {"blk.0.ffn_gate_exps", GgmlType::IQ2_XXS}, {"blk.0.ffn_up_exps", GgmlType::IQ2_XXS},
      {"blk.0.ffn_down_exps", GgmlType::Q2_K},    {"blk.0.attn_q_a", GgmlType::Q8_0},
      {"blk.0.attn_q_b", GgmlType::Q8_0},         {"blk.0.attn_kv", GgmlType::Q8_0},
      {"blk.0.attn_output_a", GgmlType::Q8_0},    {"blk.0.attn_output_b", GgmlType::Q8_0},
      {"blk.0.ffn_gate_shexp", GgmlType::Q8_0},   {"blk.0.ffn_down_shexp", GgmlType::Q8_0},
      {"output", GgmlType::Q8_0},                 {"token_embd", GgmlType::F16},
      {"output_hc_fn", GgmlType::F16},            {"blk.0.hc_attn_fn", GgmlType::F16},
      {"blk.0.hc_ffn_fn", GgmlType::F16},         {"blk.0.ffn_gate_inp", GgmlType::F16},
      {"blk.2.attn_compressor_kv", GgmlType::F16}, {"blk.2.attn_compressor_gate", GgmlType::F16},
      {"blk.2.attn_compressor_ape", GgmlType::F16}, {"blk.3.attn_compressor_ape", GgmlType::F16},
      {"blk.2.indexer.attn_q_b", GgmlType::F16},  {"blk.2.indexer.proj", GgmlType::F16},
      {"blk.2.indexer_compressor_kv", GgmlType::F16}, {"blk.2.indexer_compressor_ape", GgmlType::F16},
      {"blk.2.attn_compressor_norm", GgmlType::F32}, {"blk.2.indexer_compressor_norm", GgmlType::F32},
      {"blk.0.attn_norm", GgmlType::F32},         {"blk.0.attn_sinks", GgmlType::F32},
      {"blk.0.hc_attn_base", GgmlType::F32},      {"blk.0.hc_attn_scale", GgmlType::F32},
      {"output_hc_base", GgmlType::F32},          {"output_norm", GgmlType::F32},
      {"blk.3.exp_probs_b", GgmlType::F32},       {"blk.0.ffn_gate_tid2eid", GgmlType::I32}};
  for (const auto& [name, type] : q2) {
    EXPECT_EQ(synthetic_storage(find_spec(fs, name), "q2").gguf, type) << name;
    EXPECT_EQ(synthetic_storage(find_spec(fs, name), "q2").reported, ggml_type_name(type)) << name;
  }
  auto src = make_synthetic_source(spec_of("flash", "q2", 1));  // reports its types, makes nothing
  for (const auto& t : src->stored_tensors())
    if (t.name == "blk.0.ffn_gate_exps.weight" || t.name == "blk.0.ffn_up_exps.weight") {
      EXPECT_EQ(t.type, "IQ2_XXS") << t.name;
      EXPECT_EQ(t.nbytes, uint64_t{256} * 2048 * (4096 / 256) * 66) << t.name;
    }
  // native: FP8 where the official checkpoint has it, BF16 elsewhere, FP4 experts.
  EXPECT_EQ(synthetic_storage(qa, "native").reported, "F8_E4M3");
  EXPECT_EQ(synthetic_storage(qa, "native").gguf, GgmlType::BF16);
  EXPECT_EQ(synthetic_storage(find_spec(fs, "blk.2.indexer.attn_q_b"), "native").reported, "F8_E4M3");
  EXPECT_EQ(synthetic_storage(find_spec(fs, "blk.0.ffn_gate_inp"), "native").reported, "BF16");
  EXPECT_EQ(synthetic_storage(gate, "native").reported, "F4_E2M1");
  EXPECT_EQ(synthetic_storage(gate, "native").gguf, GgmlType::MXFP4);
  EXPECT_EQ(synthetic_storage(norm, "native").reported, "BF16");
  // Tiny rows (64 / 32 wide) are not whole K-quant super-blocks: llama-quantize's fallbacks.
  const ModelConfig tiny = synthetic_config(spec_of("tiny"));
  const auto ts = model_tensor_specs(tiny, 0, tiny.n_layers, true, true);
  EXPECT_EQ(synthetic_storage(find_spec(ts, "blk.0.ffn_down_exps"), "q2").gguf, GgmlType::Q4_0);
  EXPECT_EQ(synthetic_storage(find_spec(ts, "blk.0.ffn_gate_exps"), "q2").gguf, GgmlType::Q4_0);
  EXPECT_EQ(synthetic_storage(find_spec(ts, "blk.0.ffn_down_exps"), "q4k").gguf, GgmlType::Q5_0);
}

// The IQ2_XXS experts of the q2 mix at Flash widths, one band (128 rows of 4096): the bytes
// decode to the values the source reports, and those are the f32 mix's values (the same
// draws) within IQ2_XXS's error on near-Gaussian data (0.33, tests/test_quants.cpp).
TEST(SyntheticWeights, FlashQ2GateExpertsAreIq2xxsOfTheSameDraws) {
  const ModelConfig flash = synthetic_config(spec_of("flash", "q2", 1));
  const TensorSpec gate = find_spec(model_tensor_specs(flash, 0, 1, true, true), "blk.0.ffn_gate_exps");
  const synth::TensorGen q2(gate, synth::Quant::Q2, 1), f32(gate, synth::Quant::F32, 1);
  ASSERT_EQ(q2.storage().gguf, GgmlType::IQ2_XXS);
  ASSERT_EQ(q2.row_bytes(), 4096u / 256 * 66);
  const int64_t n = q2.band_rows(0) * q2.cols();
  std::vector<float> v(n), raw(n), back(n);
  std::vector<uint8_t> bytes(q2.row_bytes() * q2.band_rows(0));
  synth::BandScratch scratch;
  q2.band(0, v.data(), bytes.data(), scratch);
  f32.band(0, raw.data(), nullptr, scratch);
  dequantize_row(GgmlType::IQ2_XXS, bytes.data(), back.data(), n);
  EXPECT_EQ(v, back);
  const double rel = test::rel_l2(v.data(), raw.data(), raw.size());
  std::printf("[synthetic] flash q2 gate experts, band 0: IQ2_XXS rel RMS vs the f32 draws %.4f\n", rel);
  EXPECT_GT(rel, 0.25);
  EXPECT_LT(rel, 0.36);
}

TEST(SyntheticWeights, DeterministicScaledAndOnTheirGrids) {
  auto a = make_synthetic_source(spec_of("tiny", "native"));
  auto b = make_synthetic_source(spec_of("tiny", "native"));
  SyntheticSpec other = spec_of("tiny", "native");
  other.seed = 2;
  auto c = make_synthetic_source(other);
  const auto specs = model_tensor_specs(a->config(), 0, 1, true, true);
  const auto& qa = find_spec(specs, "blk.0.attn_q_a");
  const auto va = a->read_f32(qa);
  EXPECT_EQ(va, b->read_f32(qa));
  EXPECT_NE(va, c->read_f32(qa));
  // One 128x128 block: every value is e4m3 times the same power of two.
  float amax = 0;
  for (float v : va) amax = std::max(amax, std::fabs(v));
  int e;
  std::frexp(amax / 448.0f, &e);
  for (float v : va) EXPECT_EQ(std::ldexp(e4m3_to_f32(f32_to_e4m3(std::ldexp(v, -e))), e), v);
  // Norms BF16-exact around 1, HC scales in [0.5, 1.5), sinks unit scale, matrices 1/sqrt(in).
  for (float v : a->read_f32(find_spec(specs, "blk.0.attn_norm"))) {
    EXPECT_EQ(round_bf16(v), v);
    EXPECT_NEAR(v, 1.0f, 0.5f);
  }
  for (float v : a->read_f32(find_spec(specs, "blk.0.hc_attn_scale"))) EXPECT_TRUE(v >= 0.5f && v < 1.5f) << v;
  auto f32 = make_synthetic_source(spec_of("tiny"));
  const auto w = f32->read_f32(find_spec(specs, "blk.0.attn_q_b"));
  double ss = 0;
  for (float v : w) ss += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(ss / static_cast<double>(w.size())), 1.0 / std::sqrt(32.0), 0.01);
  // tid2eid: k distinct experts per token.
  const auto t = f32->read_i32(find_spec(specs, "blk.0.ffn_gate_tid2eid"));
  const int k = f32->config().n_active_experts;
  for (size_t row = 0; row < t.size() / static_cast<size_t>(k); ++row) {
    std::set<int32_t> s(t.begin() + static_cast<std::ptrdiff_t>(row * k),
                        t.begin() + static_cast<std::ptrdiff_t>((row + 1) * k));
    EXPECT_EQ(s.size(), static_cast<size_t>(k));
    EXPECT_TRUE(*s.begin() >= 0 && *s.rbegin() < f32->config().n_experts);
  }
}

// ------------------------------------------------------------------ (b) GGUF round trip

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.dim, b.dim);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_EQ(a.q_lora_rank, b.q_lora_rank);
  EXPECT_EQ(a.o_groups, b.o_groups);
  EXPECT_EQ(a.o_lora_rank, b.o_lora_rank);
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.compress_ratios, b.compress_ratios);
  EXPECT_EQ(a.csa_ratio, b.csa_ratio);
  EXPECT_EQ(a.index_n_heads, b.index_n_heads);
  EXPECT_EQ(a.index_head_dim, b.index_head_dim);
  EXPECT_EQ(a.index_topk, b.index_topk);
  EXPECT_EQ(a.n_experts, b.n_experts);
  EXPECT_EQ(a.n_active_experts, b.n_active_experts);
  EXPECT_EQ(a.n_shared_experts, b.n_shared_experts);
  EXPECT_EQ(a.moe_inter, b.moe_inter);
  EXPECT_EQ(a.n_hash_layers, b.n_hash_layers);
  EXPECT_EQ(a.route_scale, b.route_scale);
  EXPECT_EQ(a.swiglu_limit, b.swiglu_limit);
  EXPECT_EQ(a.hc_mult, b.hc_mult);
  EXPECT_EQ(a.hc_sinkhorn_iters, b.hc_sinkhorn_iters);
  EXPECT_EQ(a.hc_eps, b.hc_eps);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.compress_rope_theta, b.compress_rope_theta);
  EXPECT_EQ(a.yarn.factor, b.yarn.factor);
  EXPECT_EQ(a.yarn.original_ctx, b.yarn.original_ctx);
  EXPECT_EQ(a.yarn.beta_fast, b.yarn.beta_fast);
  EXPECT_EQ(a.yarn.beta_slow, b.yarn.beta_slow);
  EXPECT_EQ(a.max_position, b.max_position);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);
  EXPECT_EQ(a.n_mtp_layers, b.n_mtp_layers);
}

// Every tensor of the file equals the in-memory source bit for bit, in the mix's GGUF type.
void expect_lossless(const SyntheticSpec& spec, const std::string& path) {
  auto src = make_synthetic_source(spec);
  auto back = ModelSource::open(path);
  expect_same_config(src->config(), back->config());
  const gguf::File f(path);
  for (const auto& s : model_tensor_specs(src->config(), 0, src->config().n_layers, true, true)) {
    if (s.role == TensorRole::TokenTable) {
      EXPECT_EQ(src->read_i32(s), back->read_i32(s)) << s.name;
      continue;
    }
    const gguf::TensorInfo* t = f.find_tensor(s.name + (s.name.ends_with("exp_probs_b") ? ".bias" : ".weight"));
    ASSERT_TRUE(t) << s.name;
    EXPECT_EQ(t->type, synthetic_storage(s, spec.quant).gguf) << s.name;
    const auto a = src->read_f32(s), b = back->read_f32(s);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << s.name << " (" << spec.quant << ")";
  }
}

class SyntheticGguf : public ::testing::TestWithParam<const char*> {};

TEST_P(SyntheticGguf, TinyRoundTripsLosslesslyAndPassesTheLlamaCppCheck) {
  const SyntheticSpec spec = spec_of("tiny", GetParam());
  const std::string path = temp_path(std::string("tiny-") + GetParam() + ".gguf");
  write_synthetic_gguf(spec, path);
  expect_lossless(spec, path);
  const gguf::File f(path);
  const auto problems = check_llama_cpp_gguf(f);
  EXPECT_TRUE(problems.empty()) << problems.front();
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), synthetic_chat_template());
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Mixes, SyntheticGguf, ::testing::Values("f32", "q8", "mxfp4", "native", "q2", "q4k"));

TEST(SyntheticGguf, TokenizerFromTheFileEncodesLikeTheSyntheticOne) {
  const std::string path = temp_path("tok.gguf");
  write_synthetic_gguf(spec_of("tiny", "q8", 1), path);
  const Tokenizer mem = make_synthetic_tokenizer();
  const Tokenizer file = Tokenizer::from_gguf(gguf::File(path));
  EXPECT_EQ(file.vocab_size(), mem.vocab_size());
  EXPECT_EQ(file.merge_count(), mem.merge_count());
  EXPECT_GE(mem.merge_count(), 300u);
  const std::string sample = std::string(ds4::kBos) + std::string(ds4::kUser) +
                             "Hello world, what is the number of people who can write code?" +
                             std::string(ds4::kAssistant) + std::string(ds4::kThinkStart) + "I think so." +
                             std::string(ds4::kThinkEnd) + "\n\n<" + std::string(ds4::kDsml) +
                             "tool_calls>\n12345 héllo 你好 🙂\t" + std::string(ds4::kEos);
  const auto ids = mem.encode(sample);
  EXPECT_EQ(file.encode(sample), ids);
  EXPECT_EQ(mem.decode(ids), sample);
  EXPECT_EQ(ids.front(), 0);
  EXPECT_EQ(ids.back(), 1);
  EXPECT_EQ(mem.encode(" the"), (std::vector<int32_t>{mem.token_to_id("Ġthe")}));  // words are one token
  const SpecialIds& s = mem.special_ids();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  for (int32_t id : {s.user, s.assistant, s.think_begin, s.think_end, s.dsml}) EXPECT_GE(id, 3);
  EXPECT_EQ(file.special_ids().user, s.user);
  EXPECT_EQ(file.special_ids().dsml, s.dsml);
  // At the real vocabulary size the added tokens sit at their real V4 ids.
  const Tokenizer full = make_synthetic_tokenizer(129280);
  EXPECT_EQ(full.vocab_size(), 129280);
  EXPECT_EQ(full.special_ids().user, 128803);
  EXPECT_EQ(full.special_ids().think_begin, 128821);
  EXPECT_EQ(full.token_to_id("<｜image｜>"), 129279);
  const auto full_ids = full.encode(sample);
  EXPECT_EQ(full_ids.size(), ids.size());
  EXPECT_EQ(full.decode(full_ids), sample);
  EXPECT_THROW(make_synthetic_tokenizer(100), Error);
  std::remove(path.c_str());
}

TEST(SyntheticGguf, StreamsLargeTensorsInSeveralBatches) {
  // token_embd of 300000 x 64 F32 is 73 MiB: more than one 64 MiB batch of bands.
  SyntheticSpec spec = spec_of("tiny", "f32", 1);
  spec.vocab = 300000;
  const std::string path = temp_path("wide.gguf");
  write_synthetic_gguf(spec, path);
  auto src = make_synthetic_source(spec);
  auto back = ModelSource::open(path);
  for (const char* name : {"token_embd", "output"}) {
    const TensorSpec s = find_spec(model_tensor_specs(src->config(), 0, 1, true, true), name);
    EXPECT_TRUE(src->read_f32(s) == back->read_f32(s)) << name;
  }
  EXPECT_TRUE(check_llama_cpp_gguf(gguf::File(path)).empty());
  std::remove(path.c_str());
}

// Rewrites a GGUF with edited metadata and extra tensors (data stays in the source's mapping).
void rewrite(const std::string& from, const std::string& to, const std::function<void(gguf::Writer&)>& edit,
             const std::set<std::string>& drop_keys = {}) {
  const gguf::File f(from);
  gguf::Writer w;
  for (const auto& k : f.keys())
    if (!drop_keys.count(k)) w.set(k, *f.find(k));
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.nbytes);
  edit(w);
  w.write(to);
}

bool names(const std::vector<std::string>& problems, const std::string& what) {
  for (const auto& p : problems)
    if (p.find(what) != std::string::npos) return true;
  return false;
}

TEST(SyntheticGguf, BrokenFilesFailTheLlamaCppCheckNamingTheProblem) {
  const std::string good = temp_path("good.gguf"), bad = temp_path("bad.gguf");
  write_synthetic_gguf(spec_of("tiny", "q8", 4), good);
  ASSERT_TRUE(check_llama_cpp_gguf(gguf::File(good)).empty());
  const auto check = [&](const std::function<void(gguf::Writer&)>& edit, const std::set<std::string>& drop = {}) {
    rewrite(good, bad, edit, drop);
    return check_llama_cpp_gguf(gguf::File(bad));
  };
  auto p = check([](gguf::Writer& w) { w.set_string_array("tokenizer.ggml.merges", {}); });
  EXPECT_TRUE(names(p, "tokenizer.ggml.merges: empty")) << ::testing::PrintToString(p);
  p = check([](gguf::Writer&) {}, {"deepseek4.expert_gating_func"});
  EXPECT_TRUE(names(p, "deepseek4.expert_gating_func: missing")) << ::testing::PrintToString(p);
  p = check([](gguf::Writer& w) { w.set_u32("deepseek4.expert_gating_func", 3); });
  EXPECT_TRUE(names(p, "expert_gating_func: 3")) << ::testing::PrintToString(p);
  const std::vector<float> bias(8, 0.0f);
  p = check([&](gguf::Writer& w) { w.add_tensor("blk.1.exp_probs_b.bias", GgmlType::F32, {8}, bias.data(), 32); });
  EXPECT_TRUE(names(p, "blk.1.exp_probs_b.bias: a router bias on hash layer 1")) << ::testing::PrintToString(p);
  p = check([](gguf::Writer& w) { w.set_i32("deepseek4.block_count", 4); });
  EXPECT_TRUE(names(p, "deepseek4.block_count: type i32, llama.cpp reads u32")) << ::testing::PrintToString(p);
  p = check([](gguf::Writer& w) { w.set_u32("deepseek4.hyper_connection.count", 2); });
  EXPECT_TRUE(names(p, "hyper_connection.count: 2")) << ::testing::PrintToString(p);
  p = check([](gguf::Writer&) {}, {"tokenizer.ggml.tokens"});
  EXPECT_TRUE(names(p, "tokenizer.ggml.tokens: missing")) << ::testing::PrintToString(p);
  // The tiny widths pass the generic check but not the real-width one (ratio 8, 8 x 16 indexer).
  LlamaCppCheckOptions strict;
  strict.real_widths = true;
  p = check_llama_cpp_gguf(gguf::File(good), strict);
  EXPECT_TRUE(names(p, "compress_ratios[3] = 8")) << ::testing::PrintToString(p);
  EXPECT_TRUE(names(p, "8 heads x 16 dims")) << ::testing::PrintToString(p);
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

// ------------------------------------------------------------------ (c) the built-in model runs

TEST(SyntheticEngine, BuiltinModelPrefillMatchesDecode) {
  Engine eng(builtin_source(), EngineOptions{});
  const Tokenizer tok = builtin_tokenizer();
  const int64_t V = eng.config().vocab_size;
  ASSERT_EQ(V, tok.vocab_size());
  std::vector<int32_t> ids =
      tok.encode(std::string(ds4::kBos) + std::string(ds4::kUser) +
                 "Hello world! How do you do? Write some python code that can find the number of people who "
                 "look at the water each day, and call the function." +
                 std::string(ds4::kAssistant) + std::string(ds4::kThinkStart) + "I think that is it." +
                 std::string(ds4::kThinkEnd));
  ASSERT_GE(ids.size(), 40u);  // well past the window (8), several CSA and HCA rows, top-3 of many
  const auto n = static_cast<int64_t>(ids.size());
  const auto run = [&](const std::vector<int64_t>& chunks) {
    std::vector<float> out(static_cast<size_t>(n * V));
    auto seq = eng.new_sequence();
    int64_t pos = 0;
    for (int64_t c : chunks) {
      eng.step(*seq, ids.data() + pos, c, out.data() + pos * V);
      pos += c;
    }
    return out;
  };
  const std::vector<float> prefill = run({n});
  const std::vector<float> decode = run(std::vector<int64_t>(static_cast<size_t>(n), 1));
  const std::vector<float> chunked = run({5, 11, 1, 7, 3, n - 27});
  const double rel = test::rel_l2(decode.data(), prefill.data(), prefill.size());
  const double rel_chunked = test::rel_l2(chunked.data(), prefill.data(), prefill.size());
  std::printf("[synthetic] built-in model, %lld tokens: rel_l2 vs prefill: decode %.3e, chunked %.3e\n",
              static_cast<long long>(n), rel, rel_chunked);
  EXPECT_LT(rel, 1e-5);
  EXPECT_LT(rel_chunked, 1e-5);
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(prefill[0], prefill[1]);
}

// ------------------------------------------------------------------ (d) Flash shapes, no Flash memory

TEST(SyntheticFlash, OneLayerReportsRealShapesWithoutAllocatingThem) {
  const int64_t rss0 = rss_kib();
  const auto start = std::chrono::steady_clock::now();
  auto src = make_synthetic_source(spec_of("flash", "q8", 1));
  const auto stored = src->stored_tensors();
  uint64_t total = 0;
  for (const auto& t : stored) total += t.nbytes;
  EXPECT_GT(total, uint64_t{7} << 30);  // the layer's experts alone are ~6.8 GB of Q8_0
  const auto shape_of = [&](const std::string& name) {
    for (const auto& t : stored)
      if (t.name == name) return t.shape;
    return std::vector<int64_t>{};
  };
  EXPECT_EQ(shape_of("token_embd.weight"), (std::vector<int64_t>{129280, 4096}));
  EXPECT_EQ(shape_of("blk.0.ffn_gate_exps.weight"), (std::vector<int64_t>{256, 2048, 4096}));
  EXPECT_EQ(shape_of("blk.0.ffn_down_exps.weight"), (std::vector<int64_t>{256, 4096, 2048}));
  EXPECT_EQ(shape_of("blk.0.attn_q_b.weight"), (std::vector<int64_t>{32768, 1024}));
  EXPECT_EQ(shape_of("blk.0.attn_output_a.weight"), (std::vector<int64_t>{8192, 4096}));
  EXPECT_EQ(shape_of("blk.0.hc_attn_fn.weight"), (std::vector<int64_t>{24, 16384}));
  EXPECT_EQ(shape_of("blk.0.ffn_gate_tid2eid.weight"), (std::vector<int64_t>{129280, 6}));
  const TensorSpec norm = find_spec(model_tensor_specs(src->config(), 0, 1, true, true), "blk.0.attn_norm");
  const auto v = src->read_f32(norm);
  ASSERT_EQ(v.size(), 4096u);
  double mean = 0;
  for (float x : v) mean += x;
  EXPECT_NEAR(mean / 4096, 1.0, 0.01);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t grew_mib = (rss_kib() - rss0) / 1024;
  std::printf("[synthetic] flash --layers 1: %.2f GiB described, %.3f s, RSS +%lld MiB\n",
              static_cast<double>(total) / (1 << 30), secs, static_cast<long long>(grew_mib));
  EXPECT_LT(grew_mib, 64);
  EXPECT_LT(secs, 5.0);
}

// ------------------------------------------------------------------ (e) the CLI

TEST(SyntheticCli, SynthWritesAFileInspectValidates) {
  const std::string out = temp_path("cli.gguf");
  auto r = test::run_cli("synth --preset tiny --layers 4 --quant mxfp4 --seed 7 " + test::shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("llama.cpp deepseek4 key check: ok"), std::string::npos) << r.out;
  r = test::run_cli("inspect " + test::shell_quote(out));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("validation: ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("MXFP4"), std::string::npos) << r.out;
  r = test::run_cli("synth --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--quant"), std::string::npos);
  r = test::run_cli("synth --preset huge " + test::shell_quote(out));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown preset 'huge'"), std::string::npos) << r.out;
  std::remove(out.c_str());
}

}  // namespace
