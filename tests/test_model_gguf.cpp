// GGUF models: our exporter's files load back with the same config and give the same logits
// as the directory they came from (lossless type choices), on the CPU reference engine.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>

#include "engine/engine.h"
#include "fixture_util.h"
#include "cli_util.h"
#include "format/gguf.h"
#include "format/gguf_stream_writer.h"
#include "format/quants.h"
#include "format/safetensors.h"
#include "model/gguf_export.h"
#include "model/synthetic.h"
#include "model/tensor_names.h"
#include "util/error.h"
#include "util/mmap.h"

using namespace hs;

namespace {

std::vector<float> logits_of(const std::string& model, const test::Expected& e) {
  Engine eng(model, EngineOptions{});
  auto seq = eng.new_sequence();
  std::vector<float> out(e.tokens.size() * static_cast<size_t>(e.vocab));
  eng.step(*seq, e.tokens.data(), static_cast<int64_t>(e.tokens.size()), out.data());
  return out;
}

struct Case {
  const char* fixture;
  GgmlType dense, experts;
  double max_rel_vs_source;  // 0: must be bit-identical
};

class GgufExport : public ::testing::TestWithParam<Case> {};

TEST_P(GgufExport, LogitsMatchTheSource) {
  const Case c = GetParam();
  const std::string dir = std::string(HS_TEST_DATA) + "/" + c.fixture;
  const std::string out = testing::TempDir() + "/" + c.fixture + "-" + ggml_type_name(c.dense) + "-" +
                          ggml_type_name(c.experts) + ".gguf";
  auto src = ModelSource::open(dir);
  GgufExportOptions o;
  o.dense = c.dense;
  o.experts = c.experts;
  export_gguf(*src, out, o);

  auto back = ModelSource::open(out);
  EXPECT_EQ(back->format(), "gguf");
  const ModelConfig &a = src->config(), &b = back->config();
  EXPECT_EQ(a.compress_ratios, b.compress_ratios);
  EXPECT_EQ(a.n_hash_layers, b.n_hash_layers);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_EQ(a.yarn.original_ctx, b.yarn.original_ctx);
  EXPECT_EQ(a.index_topk, b.index_topk);
  EXPECT_FLOAT_EQ(a.route_scale, b.route_scale);
  EXPECT_TRUE(back->validate(0, b.n_layers, true, true).empty());

  test::Expected e = test::load_expected(dir);
  std::vector<float> ref = logits_of(dir, e), got = logits_of(out, e);
  const double rel = test::rel_l2(got.data(), ref.data(), ref.size());
  std::printf("[gguf] %-14s dense %-5s experts %-5s rel_l2 vs source %.3e, vs HF %.3e\n", c.fixture,
              ggml_type_name(c.dense), ggml_type_name(c.experts), rel,
              test::rel_l2(got.data(), e.logits.data(), ref.size()));
  if (c.max_rel_vs_source == 0) EXPECT_EQ(got, ref);
  else EXPECT_LE(rel, c.max_rel_vs_source);
  std::remove(out.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Types, GgufExport,
    ::testing::Values(Case{"tiny", GgmlType::F32, GgmlType::F32, 0},
                      // FP8 e4m3 x 2^k and FP4 e2m1 x 2^k values are exact in BF16 and MXFP4.
                      Case{"tiny-official", GgmlType::BF16, GgmlType::MXFP4, 0},
                      Case{"small-bf16", GgmlType::BF16, GgmlType::BF16, 0},
                      // Q8_0 is lossy: ~1.1% relative RMS weight error (test_quants). The six
                      // random layers of tiny amplify that to ~11% of the logits (BF16 rounding
                      // alone gives ~8%, see the model-numerics test); a broken quantizer or
                      // layout gives O(1), which this bound catches.
                      Case{"tiny", GgmlType::Q8_0, GgmlType::Q8_0, 0.15},
                      // The official layout's other lossless choices (FP4 and FP8 values fit F32/BF16).
                      Case{"tiny-official", GgmlType::F32, GgmlType::F32, 0},
                      Case{"tiny-official", GgmlType::BF16, GgmlType::BF16, 0},
                      // Lossy: weight RMS errors are 0.54% (Q8_0) and 6.4% (Q4_0 experts); measured
                      // logits 0.136 and 0.279. The tiny random model is dominated by discrete
                      // top-k flips (indexer, routing): F16 rounding (2e-4 of the weights) already
                      // moves tiny's logits 3.7%, BF16 8.4%. So these are regression bounds ~1.5x
                      // the measurement; unrelated logits of this scale are ~1.4 apart, which is
                      // what a wrong block layout or nibble order gives.
                      Case{"tiny-official", GgmlType::Q8_0, GgmlType::Q8_0, 0.20},
                      Case{"tiny-official", GgmlType::Q8_0, GgmlType::Q4_0, 0.40}),
    [](const auto& info) {
      std::string n = std::string(info.param.fixture) + "_" + ggml_type_name(info.param.dense) + "_" +
                      ggml_type_name(info.param.experts);
      for (auto& ch : n)
        if (ch == '-') ch = '_';
      return n;
    });

// ------------------------------------------------------------------ convert: defaults, FP4, tokenizer

std::string tmp(const std::string& name) { return testing::TempDir() + "/hs_gguf_" + name; }

// The default (auto) conversion of the official layout keeps every value: FP4 experts become
// MXFP4 by a byte repack straight from the checkpoint, FP8/BF16 matrices BF16.
TEST(GgufConvert, AutoRepacksOfficialFp4BytesAndKeepsTheLogits) {
  const std::string dir = std::string(HS_TEST_DATA) + "/tiny-official", out = tmp("auto.gguf");
  auto src = ModelSource::open(dir);
  const GgufExportStats st = export_gguf(*src, out, GgufExportOptions{});
  const ModelConfig& c = src->config();
  EXPECT_EQ(st.repacked_fp4, 3u * static_cast<size_t>(c.n_layers));
  EXPECT_EQ(st.tensors, model_tensor_specs(c, 0, c.n_layers, true, true).size());
  const gguf::File f(out);
  const st::Collection ckpt(dir);
  for (const auto& s : model_tensor_specs(c, 0, c.n_layers, true, true)) {
    const gguf::TensorInfo* t = f.find_tensor(gguf_tensor_name(s));
    ASSERT_TRUE(t) << s.name;
    if (s.role != TensorRole::Experts) {
      const std::string stored = src->storage_type(s);
      const GgmlType want = s.role == TensorRole::TokenTable ? GgmlType::I32
                            : s.role != TensorRole::Matrix    ? GgmlType::F32
                            : stored == "F8_E4M3" || stored == "BF16" ? GgmlType::BF16
                                                                      : GgmlType::F32;
      EXPECT_EQ(t->type, want) << s.name << " stored " << stored;
      continue;
    }
    ASSERT_EQ(t->type, GgmlType::MXFP4) << s.name;
    const int64_t per = s.shape[1] * s.shape[2];
    std::vector<uint8_t> want(static_cast<size_t>(per / 32 * 17));
    for (int64_t e = 0; e < s.shape[0]; ++e) {  // the file's bytes are the repack of the checkpoint's
      const std::string w = gguf_to_official({gguf_tensor_name(s), e, false});
      const std::string sc = gguf_to_official({gguf_tensor_name(s), e, true});
      repack_fp4_to_mxfp4(ckpt.get(w).data, ckpt.get(sc).data, want.data(), per);
      EXPECT_EQ(std::memcmp(f.tensor_data(*t) + e * want.size(), want.data(), want.size()), 0) << w;
    }
  }
  test::Expected e = test::load_expected(dir);
  EXPECT_EQ(logits_of(out, e), logits_of(dir, e));
  std::remove(out.c_str());
}

// `convert` embeds SRC/tokenizer.json and the V4 template and runs the llama.cpp check; the
// fixture's 320-row embedding disagrees with the tokenizer, which the check reports.
TEST(GgufConvert, CliEmbedsTokenizerAndTemplateAndReportsTheLlamaCppCheck) {
  namespace fs = std::filesystem;
  const std::string dir = tmp("src"), out = tmp("cli.gguf");
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(std::string(HS_TEST_DATA) + "/tiny-official/" + f, dir + "/" + f, fs::copy_options::overwrite_existing);
  test::write_text(dir + "/tokenizer.json", synthetic_tokenizer_json());
  auto r = test::run_cli("convert " + test::shell_quote(dir) + " " + test::shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.out;
  const int64_t n_tok = synthetic_tokenizer_size();
  EXPECT_NE(r.out.find(cat("tokenizer: ", n_tok, " tokens")), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("18 expert stacks repacked FP4 -> MXFP4"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(cat("tokenizer.ggml.tokens: ", n_tok, " tokens, token_embd.weight has 320 rows")),
            std::string::npos) << r.out;
  const gguf::File f(out);
  EXPECT_EQ(f.get_string("tokenizer.chat_template"), synthetic_chat_template());
  const Tokenizer from_file = Tokenizer::from_gguf(f), mem = make_synthetic_tokenizer();
  EXPECT_EQ(from_file.encode("Hello world, 12345 héllo"), mem.encode("Hello world, 12345 héllo"));
  EXPECT_EQ(test::run_cli("convert " + test::shell_quote(dir) + " " + test::shell_quote(out) + " --strict").code, 1);
  r = test::run_cli("inspect " + test::shell_quote(out));
  EXPECT_NE(r.out.find("llama.cpp deepseek4 key check: 1 problem(s)"), std::string::npos) << r.out;
  fs::remove_all(dir);
  std::remove(out.c_str());
}

// A GGUF converted with auto types is copied tensor for tensor, tokenizer and template kept.
TEST(GgufConvert, CliGgufToGgufCopiesEveryTensor) {
  const std::string in = tmp("in.gguf"), out = tmp("copy.gguf");
  SyntheticSpec spec;
  spec.quant = "q2";
  write_synthetic_gguf(spec, in);
  auto r = test::run_cli("convert " + test::shell_quote(in) + " " + test::shell_quote(out) + " --strict");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("llama.cpp deepseek4 key check: ok"), std::string::npos) << r.out;
  const gguf::File a(in), b(out);
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& t : a.tensors()) {
    const gguf::TensorInfo* u = b.find_tensor(t.name);
    ASSERT_TRUE(u) << t.name;
    EXPECT_EQ(u->type, t.type) << t.name;
    EXPECT_EQ(std::memcmp(a.tensor_data(t), b.tensor_data(*u), t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(b.get_string("tokenizer.chat_template"), synthetic_chat_template());
  EXPECT_EQ(a.get_string_array("tokenizer.ggml.merges"), b.get_string_array("tokenizer.ggml.merges"));
  std::remove(in.c_str());
  std::remove(out.c_str());
}

// The per-expert reads the converter streams with equal slices of the whole stack, for the
// HF (fused gate/up), official (FP4 per expert) and GGUF (Q2_K/Q4_0 rows) layouts.
TEST(GgufConvert, ReadExpertIsTheSliceOfTheStack) {
  const std::string gguf = tmp("experts.gguf");
  SyntheticSpec spec;
  spec.quant = "q2";
  write_synthetic_gguf(spec, gguf);
  for (const std::string& path : {std::string(HS_TEST_DATA) + "/tiny", std::string(HS_TEST_DATA) + "/tiny-official", gguf}) {
    auto src = ModelSource::open(path);
    for (const auto& s : layer_tensor_specs(src->config(), 3)) {
      if (s.role != TensorRole::Experts) continue;
      const std::vector<float> all = src->read_f32(s);
      const int64_t per = s.shape[1] * s.shape[2];
      for (int64_t e = 0; e < s.shape[0]; ++e)
        EXPECT_TRUE(src->read_expert_f32(s, e) == std::vector<float>(all.begin() + e * per, all.begin() + (e + 1) * per))
            << path << " " << s.name << " expert " << e;
    }
  }
  std::remove(gguf.c_str());
}

TEST(GgufConvert, StreamWriterChecksSizesAndLeavesNoPartialFile) {
  const std::string out = tmp("stream.gguf");
  gguf::Writer meta;
  meta.set_string("general.architecture", "test");
  meta.alignment = 64;
  meta.set_u32("general.alignment", 64);
  const std::vector<float> a = {1, 2, 3}, b = {4, 5};
  {
    gguf::StreamWriter w(out, meta, {{"a", GgmlType::F32, {3}}, {"empty", GgmlType::F32, {0}}, {"b", GgmlType::F32, {2}}});
    w.write(a.data(), 8);  // a tensor may arrive in pieces
    w.write(a.data() + 2, 4);
    EXPECT_EQ(w.current(), 2u);  // the empty tensor needs nothing
    EXPECT_THROW(w.write(b.data(), 12), Error);  // more than b has
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  EXPECT_FALSE(std::filesystem::exists(out + ".partial"));
  {
    gguf::StreamWriter w(out, meta, {{"a", GgmlType::F32, {3}}, {"b", GgmlType::F32, {2}}});
    w.write(a.data(), 12);
    try {
      w.finish();
      ADD_FAILURE() << "finish() with tensor b missing";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor b has 0 of its 8 bytes"), std::string::npos) << e.what();
    }
    w.write(b.data(), 8);
    w.finish();
  }
  const gguf::File f(out);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.get_string("general.architecture"), "test");
  ASSERT_TRUE(f.find_tensor("b"));
  EXPECT_EQ(std::memcmp(f.tensor_data(*f.find_tensor("b")), b.data(), 8), 0);
  EXPECT_EQ(std::memcmp(f.tensor_data(*f.find_tensor("a")), a.data(), 12), 0);
  EXPECT_THROW(gguf::StreamWriter(out, meta, {{"a", GgmlType::F32, {3}}, {"a", GgmlType::F32, {3}}}), Error);
  EXPECT_THROW(gguf::StreamWriter(out, meta, {{"q", GgmlType::Q8_0, {33}}}), Error);  // not whole blocks
  std::remove(out.c_str());
}

// ------------------------------------------------------------------ official checkpoint names

// Every tensor of an official checkpoint (ds4-model-spec.md §1.3), the MTP block included,
// written out from the spec's inventory, independently of model/tensors.cpp.
std::vector<std::string> official_names(const ModelConfig& c) {
  std::vector<std::string> n = {"embed.weight", "head.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale"};
  const auto add = [&](const std::string& p, std::initializer_list<const char*> names) {
    for (const char* t : names) n.push_back(p + t);
  };
  const auto fp8 = [&](const std::string& p, std::initializer_list<const char*> names) {
    for (const char* t : names) n.push_back(p + t + ".weight"), n.push_back(p + t + ".scale");
  };
  const auto block = [&](const std::string& p, int ratio, bool hash) {
    add(p, {"attn_norm.weight", "ffn_norm.weight", "hc_attn_fn", "hc_ffn_fn", "hc_attn_base", "hc_ffn_base",
            "hc_attn_scale", "hc_ffn_scale", "attn.q_norm.weight", "attn.kv_norm.weight", "attn.attn_sink",
            "ffn.gate.weight", hash ? "ffn.gate.tid2eid" : "ffn.gate.bias"});
    fp8(p, {"attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b", "ffn.shared_experts.w1",
            "ffn.shared_experts.w2", "ffn.shared_experts.w3"});
    if (ratio > 0)
      add(p, {"attn.compressor.wkv.weight", "attn.compressor.wgate.weight", "attn.compressor.ape",
              "attn.compressor.norm.weight"});
    if (ratio == 4) {
      fp8(p, {"attn.indexer.wq_b"});
      add(p, {"attn.indexer.weights_proj.weight", "attn.indexer.compressor.wkv.weight",
              "attn.indexer.compressor.wgate.weight", "attn.indexer.compressor.ape",
              "attn.indexer.compressor.norm.weight"});
    }
    for (int e = 0; e < c.n_experts; ++e)
      for (const char* w : {"w1", "w2", "w3"}) fp8(p + cat("ffn.experts.", e, "."), {w});  // FP4 + per-32 scales
  };
  for (int l = 0; l < c.n_layers; ++l) block(cat("layers.", l, "."), c.ratio(l), l < 3);
  block("mtp.0.", 0, false);
  fp8("mtp.0.", {"e_proj", "h_proj"});
  add("mtp.0.", {"enorm.weight", "hnorm.weight", "norm.weight", "hc_head_fn", "hc_head_base", "hc_head_scale"});
  return n;
}

TEST(OfficialNames, FlashAndProMapToGgufNamesAndBack) {
  const TensorNameMap map;
  for (const char* file : {"config.json", "config-v4-pro.json"}) {
    const std::string path = std::string(HS_TEST_DATA) + "/official-config/" + file;
    const ModelConfig c = config_from_hf_json(read_file(path), path);
    std::set<std::string> inventory, hit;
    for (const auto& s : model_tensor_specs(c, 0, c.n_layers, true, true)) inventory.insert(gguf_tensor_name(s));
    size_t mapped = 0, mtp = 0;
    for (const auto& name : official_names(c)) {
      const std::optional<GgufRef> ref = map.official_to_gguf(name);
      if (name.rfind("mtp.", 0) == 0) {
        EXPECT_FALSE(ref.has_value()) << name << " -> " << ref->gguf;
        ++mtp;
        continue;
      }
      ASSERT_TRUE(ref.has_value()) << name;
      EXPECT_TRUE(inventory.count(ref->gguf)) << name << " -> " << ref->gguf;
      EXPECT_EQ(ref->scale, name.ends_with(".scale")) << name;
      EXPECT_EQ(ref->expert >= 0, name.find(".experts.") != std::string::npos) << name;
      EXPECT_LT(ref->expert, c.n_experts) << name;
      EXPECT_EQ(map.gguf_to_official(*ref), name);
      hit.insert(ref->gguf);
      ++mapped;
    }
    EXPECT_EQ(hit, inventory) << file << ": some GGUF tensors have no official source";
    std::printf("[names] %s: %zu official tensors -> %zu GGUF tensors and back; %zu MTP tensors left out\n", file,
                mapped, inventory.size(), mtp);
  }
  // The free functions, and names that are not checkpoint tensors.
  EXPECT_EQ(official_to_gguf("layers.7.ffn.experts.200.w2.scale"),
            (GgufRef{"blk.7.ffn_down_exps.weight", 200, true}));
  EXPECT_EQ(official_to_gguf("layers.2.attn.wkv.scale"), (GgufRef{"blk.2.attn_kv.weight", -1, true}));
  EXPECT_EQ(gguf_to_official({"blk.9.exp_probs_b.bias"}), "layers.9.ffn.gate.bias");
  EXPECT_EQ(gguf_to_official({"output_hc_fn.weight"}), "hc_head_fn");
  for (const char* bad : {"layers.1.attn.norm_q.weight", "mtp.0.e_proj.weight", "layers.x.attn_norm.weight",
                          "layers.1.attn_norm.scale", "model.embed_tokens.weight"})
    EXPECT_FALSE(official_to_gguf(bad).has_value()) << bad;
  EXPECT_THROW(gguf_to_official({"blk.1.ffn_gate_exps.weight"}), Error);  // which expert?
  EXPECT_THROW(gguf_to_official({"blk.1.attn_norm.weight", -1, true}), Error);  // norms have no scale
  EXPECT_THROW(gguf_to_official({"blk.1.nextn.eh_proj.weight"}), Error);
}

}  // namespace
