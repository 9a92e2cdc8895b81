// ModelConfig from the real DeepSeek-V4 config.json files (legacy official keys) and from the
// HF-transformers keys of the fixtures; the tensor inventory against ds4-model-spec.md §1.3.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/config.h"
#include "model/tensors.h"
#include "util/error.h"
#include "util/mmap.h"

using namespace hs;

namespace {
const std::string kData = HS_TEST_DATA;
}

TEST(Config, OfficialFlashLegacyKeys) {
  ModelConfig c = config_from_hf_json(read_file(kData + "/official-config/config.json"), "config.json");
  EXPECT_EQ(c.vocab_size, 129280);
  EXPECT_EQ(c.dim, 4096);
  EXPECT_EQ(c.n_layers, 43);
  EXPECT_EQ(c.n_heads, 64);
  EXPECT_EQ(c.head_dim, 512);
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.q_lora_rank, 1024);
  EXPECT_EQ(c.o_groups, 8);
  EXPECT_EQ(c.o_lora_rank, 1024);
  EXPECT_EQ(c.window, 128);
  ASSERT_EQ(c.compress_ratios.size(), 43u);  // the 44th (MTP) entry is dropped
  EXPECT_EQ(c.ratio(0), 0);
  EXPECT_EQ(c.ratio(1), 0);
  for (int l = 2; l < 43; ++l) EXPECT_EQ(c.ratio(l), l % 2 == 0 ? 4 : 128) << l;
  EXPECT_EQ(c.kind(42), AttnKind::CSA);
  EXPECT_EQ(c.n_hash_layers, 3);
  EXPECT_EQ(c.n_experts, 256);
  EXPECT_EQ(c.n_active_experts, 6);
  EXPECT_EQ(c.moe_inter, 2048);
  EXPECT_FLOAT_EQ(c.route_scale, 1.5f);
  EXPECT_EQ(c.index_n_heads, 64);
  EXPECT_EQ(c.index_head_dim, 128);
  EXPECT_EQ(c.index_topk, 512);
  EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
  EXPECT_FLOAT_EQ(c.compress_rope_theta, 160000.0f);
  EXPECT_FLOAT_EQ(c.yarn.factor, 16.0f);
  EXPECT_EQ(c.yarn.original_ctx, 65536);
  EXPECT_FLOAT_EQ(c.yarn.beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(c.yarn.beta_slow, 1.0f);
  EXPECT_EQ(c.hc_mult, 4);
  EXPECT_EQ(c.hc_sinkhorn_iters, 20);
  EXPECT_EQ(c.n_mtp_layers, 1);
}

TEST(Config, OfficialProLegacyKeys) {
  ModelConfig c = config_from_hf_json(read_file(kData + "/official-config/config-v4-pro.json"), "config-v4-pro.json");
  EXPECT_EQ(c.dim, 7168);
  EXPECT_EQ(c.n_layers, 61);
  EXPECT_EQ(c.n_heads, 128);
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.o_groups, 16);
  EXPECT_EQ(c.n_experts, 384);
  EXPECT_EQ(c.moe_inter, 3072);
  EXPECT_EQ(c.index_topk, 1024);
  EXPECT_FLOAT_EQ(c.route_scale, 2.5f);
  EXPECT_EQ(c.ratio(0), 128);
  EXPECT_EQ(c.ratio(1), 128);
  EXPECT_EQ(c.ratio(60), 4);
}

TEST(Config, FixtureHfKeys) {
  ModelConfig c = config_from_hf_dir(kData + "/pro-bf16");
  EXPECT_EQ((std::vector<int>{8, 8, 4, 8, 4}), c.compress_ratios);
  EXPECT_EQ(c.n_hash_layers, 1);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_EQ(c.yarn.original_ctx, 48);
  ModelConfig s = config_from_hf_dir(kData + "/small-bf16");
  EXPECT_EQ((std::vector<int>{0, 0, 4, 16, 4, 16, 4, 0}), s.compress_ratios);
  EXPECT_EQ(s.n_hash_layers, 2);
  EXPECT_EQ(s.window, 16);
}

TEST(Config, InconsistentValuesAreRejectedWithTheField) {
  std::string txt = read_file(kData + "/tiny/config.json");
  auto bad = [&](const std::string& from, const std::string& to, const std::string& needle) {
    std::string t = txt;
    auto p = t.find(from);
    ASSERT_NE(p, std::string::npos) << from;
    t.replace(p, from.size(), to);
    try {
      config_from_hf_json(t, "cfg.json");
      FAIL() << "accepted " << to;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  bad("\"hc_mult\": 4", "\"hc_mult\": 3", "hc_mult = 3");
  bad("\"o_groups\": 2", "\"o_groups\": 3", "o_groups = 3");
  bad("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9", "num_experts_per_tok = 9");
  bad("\"sliding_attention\",\n    \"sliding_attention\"", "\"sliding_attention\",\n    \"dense\"",
      "unknown layer type 'dense'");
  bad("\"model_type\": \"deepseek_v4\"", "\"model_type\": \"llama\"", "expected 'deepseek_v4'");
}

// Every number is range-checked in its JSON form before a cast: the message names the file, the
// key and the value as written. `set` replaces one key of the tiny fixture's config (a JSON
// path: "a/b" is a["b"] ...), given as JSON text so that huge or fractional values stay exact.
TEST(Config, NumbersAreRangeCheckedBeforeAnyCast) {
  const nlohmann::json base = nlohmann::json::parse(read_file(kData + "/tiny/config.json"));
  ASSERT_NO_THROW(config_from_hf_json(base.dump(), "cfg.json"));
  using Sets = std::vector<std::pair<std::string, std::string>>;
  auto refused_with = [&](const Sets& sets, std::vector<std::string> parts) {
    nlohmann::json j = base;
    for (const auto& [path, value_json] : sets) {
      nlohmann::json* at = &j;
      for (size_t b = 0, e; b <= path.size(); b = e + 1) {
        e = std::min(path.find('/', b), path.size());
        at = &(*at)[path.substr(b, e - b)];
      }
      *at = nlohmann::json::parse(value_json);
    }
    try {
      config_from_hf_json(j.dump(), "cfg.json");
      ADD_FAILURE() << sets.front().first << " = " << sets.front().second << " was accepted";
    } catch (const Error& e) {
      parts.push_back("cfg.json");
      for (const auto& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << " lacks " << p;
    }
  };
  auto refused = [&](const std::string& path, const std::string& value_json, std::vector<std::string> parts) {
    refused_with({{path, value_json}}, std::move(parts));
  };
  // The example: 2^32 + 5 passed validation as 5 after a cast to int.
  refused("eos_token_id", "4294967301", {"'eos_token_id' = 4294967301", "out of range"});
  refused("eos_token_id", "320", {"eos_token_id = 320", "token id in [0, vocab_size)"});  // vocab_size is 320
  refused("bos_token_id", "-1", {"bos_token_id = -1", "token id"});
  refused("hidden_size", "1e30", {"'hidden_size' = 1e+30", "out of range"});
  refused("hidden_size", "9223372036854775808", {"'hidden_size' = 9223372036854775808", "out of range"});
  refused("num_hidden_layers", "6.5", {"'num_hidden_layers' = 6.5", "expected an integer"});
  refused("num_attention_heads", "2147483648", {"'num_attention_heads' = 2147483648", "out of range"});
  refused("head_dim", "-32", {"head_dim = -32", "must be positive"});
  refused("routed_scaling_factor", "1e300", {"'routed_scaling_factor' = 1e+300", "32-bit float"});
  refused("rms_norm_eps", "0", {"rms_norm_eps = 0", "finite and positive"});
  refused("compress_rates/heavily_compressed_attention", "4294967304",
          {"'compress_rates.heavily_compressed_attention' = 4294967304", "out of range"});
  refused("rope_parameters/compress/factor", "1e39", {"'rope_parameters.compress.factor' = 1e+39", "32-bit float"});
  refused("rope_parameters/compress/original_max_position_embeddings", "1.5",
          {"'rope_parameters.compress.original_max_position_embeddings' = 1.5", "expected an integer"});
  // A float -> int cast: rope_dim = head_dim * partial_rotary_factor is only computed in range.
  {
    nlohmann::json j = base;
    j.erase("qk_rope_head_dim");
    j["partial_rotary_factor"] = 1e300;
    j["rope_parameters"]["main"]["partial_rotary_factor"] = 1e300;
    try {
      config_from_hf_json(j.dump(), "cfg.json");
      ADD_FAILURE() << "partial_rotary_factor 1e300 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'partial_rotary_factor' = 1e+300: must be in (0, 1]"), std::string::npos)
          << e.what();
    }
  }
  // Legacy compress_ratios entries are range-checked one by one.
  {
    nlohmann::json j = base;
    j.erase("layer_types");
    j["compress_ratios"] = {0, 0, 4, 8, 4, 1099511627776};
    try {
      config_from_hf_json(j.dump(), "cfg.json");
      ADD_FAILURE() << "a ratio of 2^40 was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'compress_ratios[5]' = 1099511627776"), std::string::npos) << e.what();
    }
  }
  // Sizes each in range whose tensor shapes overflow: n_experts x moe_inter x dim > 2^63.
  refused_with({{"n_routed_experts", "2000000000"}, {"moe_intermediate_size", "1000000000"}},
               {"n_routed_experts * moe_intermediate_size * hidden_size", "too large", "2^63-1"});
  refused("moe_intermediate_size", "2000000000", {"2 * moe_intermediate_size", "too large"});
  refused("num_attention_heads", "1073741824", {"num_attention_heads * head_dim", "too large"});
}

// Shapes and official names of ds4-model-spec.md §1.3 for V4-Flash (layer 2 = CSA + hash,
// layer 3 = HCA + score routing).
TEST(TensorInventory, FlashOfficialNamesAndShapes) {
  ModelConfig c = config_from_hf_json(read_file(kData + "/official-config/config.json"), "config.json");
  std::map<std::string, std::vector<int64_t>> by_official;
  for (const auto& s : model_tensor_specs(c, 0, c.n_layers, true, true))
    if (s.role != TensorRole::Experts) by_official[s.official] = s.shape;
  auto expect = [&](const std::string& name, std::vector<int64_t> shape) {
    ASSERT_TRUE(by_official.count(name)) << name;
    EXPECT_EQ(by_official[name], shape) << name;
  };
  expect("embed.weight", {129280, 4096});
  expect("head.weight", {129280, 4096});
  expect("hc_head_fn", {4, 16384});
  expect("layers.0.hc_attn_fn", {24, 16384});
  expect("layers.0.attn.wq_a.weight", {1024, 4096});
  expect("layers.0.attn.wq_b.weight", {32768, 1024});
  expect("layers.0.attn.wkv.weight", {512, 4096});
  expect("layers.0.attn.wo_a.weight", {8192, 4096});
  expect("layers.0.attn.wo_b.weight", {4096, 8192});
  expect("layers.0.attn.attn_sink", {64});
  expect("layers.2.attn.compressor.wkv.weight", {1024, 4096});
  expect("layers.2.attn.compressor.ape", {4, 1024});
  expect("layers.3.attn.compressor.wkv.weight", {512, 4096});
  expect("layers.3.attn.compressor.ape", {128, 512});
  expect("layers.2.attn.indexer.wq_b.weight", {8192, 1024});
  expect("layers.2.attn.indexer.weights_proj.weight", {64, 4096});
  expect("layers.2.attn.indexer.compressor.wkv.weight", {256, 4096});
  expect("layers.2.attn.indexer.compressor.ape", {4, 256});
  expect("layers.2.attn.indexer.compressor.norm.weight", {128});
  expect("layers.2.ffn.gate.tid2eid", {129280, 6});
  expect("layers.3.ffn.gate.bias", {256});
  expect("layers.3.ffn.shared_experts.w2.weight", {4096, 2048});
  EXPECT_FALSE(by_official.count("layers.3.attn.indexer.wq_b.weight"));  // HCA has no indexer
  EXPECT_FALSE(by_official.count("layers.0.attn.compressor.ape"));       // SWA has no compressor
  EXPECT_FALSE(by_official.count("layers.2.ffn.gate.bias"));             // hash layers have no bias
}
