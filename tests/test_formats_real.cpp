// The DeepSeek-V4 files people use (gguf-ds4.md §1-2, quant-formats.md §5), rebuilt at a small
// shape with each family's exact tensor types and metadata quirks: each loads, validates and
// runs through the engine, and a table of broken variants per family fails with an error that
// names the problem. Plus: the official tiny checkpoint converted with every lossless type
// choice gives the source's logits exactly, and two lossy choices stay within stated bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>

#include "cli_util.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "format/gguf.h"
#include "format/quants.h"
#include "format/safetensors.h"
#include "model/gguf_check.h"
#include "model/gguf_export.h"
#include "model/synthetic.h"
#include "model/tensor_names.h"
#include "util/error.h"
#include "util/fp.h"

using namespace hs;

namespace {

std::string temp_path(const std::string& name) { return testing::TempDir() + "/hs_fmt_" + name; }
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// ------------------------------------------------------------------ family stand-ins

enum class Family { Unsloth, AntirezQ2, AntirezQ4, Lucebox };
const char* family_name(Family f) {
  constexpr const char* kNames[] = {"unsloth", "antirez_q2", "antirez_q4", "lucebox"};
  return kNames[static_cast<int>(f)];
}

// The tiny preset's widths, except hidden and expert width 256: routed-expert rows must be
// whole 256-element super-blocks for IQ2_XXS, Q2_K and Q4_K, as in the real files.
ModelConfig family_config() {
  ModelConfig c = synthetic_config(SyntheticSpec{});
  c.dim = 256;
  c.moe_inter = 256;
  c.validate();
  return c;
}

int layer_of(const std::string& name) { return name.rfind("blk.", 0) == 0 ? std::stoi(name.substr(4)) : -1; }

// Per-tensor types of each family (the tables of gguf-ds4.md §2 and quant-formats.md §5).
GgmlType family_type(Family f, const TensorSpec& s) {
  const std::string& n = s.name;
  const bool antirez = f == Family::AntirezQ2 || f == Family::AntirezQ4, lucebox = f == Family::Lucebox;
  switch (s.role) {
    case TensorRole::TokenTable: return GgmlType::I32;
    case TensorRole::HcFn: return GgmlType::F16;  // hc_attn/ffn_fn and output_hc_fn
    case TensorRole::Vector:
      if (has(n, "_ape")) return f == Family::Unsloth ? GgmlType::F32 : GgmlType::F16;
      if (f == Family::Unsloth && (n.ends_with("attn_q_a_norm") || n.ends_with("attn_kv_a_norm"))) return GgmlType::BF16;
      if (lucebox && has(n, "norm")) return GgmlType::F16;  // 1-D F16
      return GgmlType::F32;
    case TensorRole::Experts: {
      const bool down = has(n, "down_exps");
      if (f == Family::Unsloth) return GgmlType::MXFP4;
      if (f == Family::AntirezQ2) return down ? GgmlType::Q2_K : GgmlType::IQ2_XXS;
      if (f == Family::AntirezQ4) return GgmlType::Q4_K;
      if (!down) return GgmlType::Q2_0_ROCMFP2;
      return layer_of(n) % 2 ? GgmlType::Q4_0_ROCMFP4_FAST : GgmlType::Q4_0_ROCMFP4;
    }
    case TensorRole::Matrix: break;
  }
  if (has(n, "indexer.attn_q_b")) return antirez ? GgmlType::F16 : lucebox ? GgmlType::Q3_0_ROCMFPX : GgmlType::Q8_0;
  if (has(n, "_shexp")) return lucebox ? GgmlType::Q6_0_ROCMFPX : GgmlType::Q8_0;
  if (has(n, ".attn_") && !has(n, "compressor")) return lucebox ? GgmlType::Q8_0_ROCMFPX : GgmlType::Q8_0;
  if (n == "output") return GgmlType::Q8_0;
  if (n == "token_embd") return f == Family::Unsloth ? GgmlType::BF16 : GgmlType::F16;
  // Router, compressors, indexer projections: BF16 in the checkpoint.
  if (f == Family::Unsloth) return has(n, "indexer_compressor") ? GgmlType::F16 : GgmlType::BF16;
  return GgmlType::F16;
}

// Random values with the scales of shared/tools/gen_hf_fixtures.py randomise().
std::vector<float> random_values(const TensorSpec& s, std::mt19937_64& rng) {
  const std::string& n = s.name;
  float mean = 0, sd = 1.0f / std::sqrt(static_cast<float>(s.shape.back()));
  if (s.role == TensorRole::Vector) {
    sd = has(n, "norm") ? 0.1f : has(n, "sinks") ? 1.0f : has(n, "exp_probs_b") ? 0.1f : 0.5f;
    mean = has(n, "norm") ? 1.0f : 0.0f;
  } else if (n == "token_embd") {
    sd = 1.0f;
  }
  std::vector<float> v(static_cast<size_t>(s.n_elements()));
  std::normal_distribution<float> normal(mean, sd);
  std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
  for (float& x : v) x = n.ends_with("_scale") ? uniform(rng) : normal(rng);
  return v;
}

// Half-UE4M3 scale (quant-formats.md §3.3).
float ue4m3(int e) { return (e >> 3) == 0 ? (e & 7) * 0x1p-10f : std::ldexp(8.0f + (e & 7), (e >> 3) - 11); }

// Blocks of a type hyperstream cannot quantize (IQ2_XXS, the ROCm types): random codes (every
// bit pattern is a valid code there) with scale fields set so the values have RMS ~ target.
std::vector<uint8_t> packed_blocks(GgmlType t, int64_t n, float target, std::mt19937_64& rng) {
  struct Field { int offset; bool f16; };
  std::vector<Field> fields;
  switch (t) {
    case GgmlType::IQ2_XXS: fields = {{0, true}}; break;
    case GgmlType::Q4_0_ROCMFP4: fields = {{16, false}, {17, false}}; break;
    case GgmlType::Q4_0_ROCMFP4_FAST: fields = {{16, false}}; break;
    case GgmlType::Q6_0_ROCMFPX: fields = {{24, false}, {25, false}}; break;
    case GgmlType::Q8_0_ROCMFPX: fields = {{32, false}}; break;
    case GgmlType::Q3_0_ROCMFPX: fields = {{12, false}, {13, false}}; break;
    case GgmlType::Q2_0_ROCMFP2: fields = {{8, false}, {9, false}}; break;
    default: throw Error(cat("no packer for ", ggml_type_name(t)));
  }
  const GgmlTypeInfo& info = ggml_type_info(t);
  std::vector<uint8_t> q(static_cast<size_t>(n / info.block_elems * info.block_bytes));
  for (auto& b : q) b = static_cast<uint8_t>(rng());
  std::array<float, 0x7F> scales{};  // S(e) for the valid bytes 0x00..0x7E
  for (int e = 0; e < 0x7F; ++e) scales[static_cast<size_t>(e)] = ue4m3(e);
  const auto set_scales = [&](const std::function<float()>& scale) {
    for (size_t b = 0; b < q.size(); b += static_cast<size_t>(info.block_bytes))
      for (const Field& fl : fields) {
        const float want = scale();
        uint8_t* p = q.data() + b + fl.offset;
        if (fl.f16) {
          const uint16_t h = f32_to_f16(want);
          p[0] = static_cast<uint8_t>(h), p[1] = static_cast<uint8_t>(h >> 8);
        } else {  // S(e) grows with e: the first valid non-zero byte at or above `want`
          const auto it = std::lower_bound(scales.begin() + 1, scales.end() - 1, want);
          *p = static_cast<uint8_t>(it - scales.begin());
        }
      }
  };
  set_scales([] { return 1.0f; });
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q.data(), y.data(), n);
  double ss = 0;
  for (float v : y) ss += static_cast<double>(v) * v;
  const float unit = target / static_cast<float>(std::sqrt(ss / static_cast<double>(n)));
  std::uniform_real_distribution<float> jitter(0.5f, 1.5f);
  set_scales([&] { return unit * jitter(rng); });
  return q;
}

struct StoredBytes {
  GgmlType type;
  std::vector<uint8_t> bytes;
};

struct FamilyFile {
  Family family;
  ModelConfig config;
  std::string path;
  std::map<std::string, StoredBytes> tensors;  // by GGUF name: what was written
};

// Copies a GGUF with keys dropped or changed and tensors dropped or added (edit runs last).
struct Edit {
  std::set<std::string> drop_keys, drop_tensors;
  std::function<void(gguf::Writer&)> add;
};
void rewrite(const std::string& from, const std::string& to, const Edit& e) {
  const gguf::File f(from);
  gguf::Writer w;
  for (const auto& k : f.keys())
    if (!e.drop_keys.count(k)) w.set(k, *f.find(k));
  for (const auto& t : f.tensors())
    if (!e.drop_tensors.count(t.name)) w.add_tensor(t.name, t.type, t.ne, f.tensor_data(t), t.nbytes);
  if (e.add) e.add(w);
  w.write(to);
}

FamilyFile write_family(Family fam, const std::string& path) {
  FamilyFile ff{fam, family_config(), path, {}};
  const ModelConfig& c = ff.config;
  const int n = c.n_layers;
  std::mt19937_64 rng(1234 + static_cast<int>(fam));
  gguf::Writer w;
  write_config_metadata(c, w);  // with vocab_size and n ratios, as antirez writes them
  w.set_string("general.name", cat("stand-in for a ", family_name(fam), " DeepSeek-V4 GGUF"));
  make_synthetic_tokenizer(c.vocab_size).write_gguf_metadata(w);
  const bool antirez = fam == Family::AntirezQ2 || fam == Family::AntirezQ4;
  if (!antirez) {  // llama.cpp-made: the checkpoint's 44-entry ratios (MTP last) and a template
    std::vector<int32_t> ratios(c.compress_ratios.begin(), c.compress_ratios.end());
    ratios.push_back(0);
    w.set_i32_array("deepseek4.attention.compress_ratios", ratios);
    w.set_string("tokenizer.chat_template", std::string(synthetic_chat_template()));
  }
  for (const auto& s : model_tensor_specs(c, 0, n, true, true)) {
    const GgmlType t = family_type(fam, s);
    StoredBytes sb{t, {}};
    if (t == GgmlType::I32) {
      std::vector<int32_t> ids(static_cast<size_t>(s.n_elements()));
      for (size_t row = 0; row < ids.size() / static_cast<size_t>(c.n_active_experts); ++row) {
        std::vector<int32_t> perm(static_cast<size_t>(c.n_experts));
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::copy_n(perm.begin(), c.n_active_experts, ids.begin() + static_cast<std::ptrdiff_t>(row * c.n_active_experts));
      }
      sb.bytes.resize(ids.size() * 4);
      std::memcpy(sb.bytes.data(), ids.data(), sb.bytes.size());
    } else if (type_has_quantizer(t)) {
      const std::vector<float> v = random_values(s, rng);
      const int64_t cols = s.shape.back(), rb = ggml_row_bytes(t, cols);
      sb.bytes.resize(static_cast<size_t>(rb * (s.n_elements() / cols)));
      for (int64_t r = 0; r < s.n_elements() / cols; ++r) quantize_row(t, v.data() + r * cols, sb.bytes.data() + r * rb, cols);
    } else {
      sb.bytes = packed_blocks(t, s.n_elements(), 1.0f / std::sqrt(static_cast<float>(s.shape.back())), rng);
    }
    const auto& stored = ff.tensors.emplace(gguf_tensor_name(s), std::move(sb)).first->second;
    w.add_tensor(gguf_tensor_name(s), t, std::vector<int64_t>(s.shape.rbegin(), s.shape.rend()), stored.bytes.data(),
                 stored.bytes.size());
  }
  // An MTP block that is not part of the main model: antirez's mtp.0.* names, LC's blk.{n}.*.
  const std::vector<float> mtp_norm(static_cast<size_t>(c.dim), 1.0f);
  const std::vector<uint16_t> mtp_proj(static_cast<size_t>(2 * c.dim * c.dim), 0x3C00);
  const std::string mtp = antirez ? "mtp.0." : cat("blk.", n, ".");
  w.add_tensor(mtp + (antirez ? "e_proj.weight" : "nextn.eh_proj.weight"), GgmlType::F16,
               {antirez ? c.dim : 2 * c.dim, c.dim}, mtp_proj.data(), (antirez ? 2 : 4) * c.dim * c.dim);
  w.add_tensor(mtp + "attn_norm.weight", GgmlType::F32, {c.dim}, mtp_norm.data(), 4 * c.dim);
  const std::string base = path + ".base";
  w.write(base);
  Edit e;
  if (!antirez) e.drop_keys.insert("deepseek4.vocab_size");  // LC sizes the vocabulary from the token list
  if (fam == Family::Lucebox)  // block_count counts the MTP block, found by its nextn.eh_proj
    e.add = [n](gguf::Writer& w2) {
      w2.set_u32("deepseek4.block_count", static_cast<uint32_t>(n + 1));
      w2.set_u32("deepseek4.nextn_predict_layers", 1);
      w2.set_f32_array("deepseek4.swiglu_clamp_exp", std::vector<float>(static_cast<size_t>(n + 1), 10.0f));
      w2.set_f32_array("deepseek4.swiglu_clamp_shexp", std::vector<float>(static_cast<size_t>(n + 1), 10.0f));
    };
  rewrite(base, path, e);
  std::remove(base.c_str());
  return ff;
}

// Tokens as an Expected, to run them through test::run in chunks (one = prefill, ones = decode).
test::Expected tokens_for(const Engine& eng, std::vector<int32_t> ids) {
  test::Expected e;
  e.tokens = std::move(ids);
  e.vocab = eng.config().vocab_size;
  return e;
}

class FamilyGguf : public ::testing::TestWithParam<Family> {};

TEST_P(FamilyGguf, LoadsValidatesAndPrefillMatchesDecode) {
  const Family fam = GetParam();
  const FamilyFile ff = write_family(fam, temp_path(std::string(family_name(fam)) + ".gguf"));
  auto src = ModelSource::open(ff.path);
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.n_layers, ff.config.n_layers);  // the MTP block is not a main layer
  EXPECT_EQ(c.compress_ratios, ff.config.compress_ratios);
  EXPECT_EQ(c.vocab_size, ff.config.vocab_size);
  EXPECT_EQ(c.dim, 256);
  const auto problems = src->validate(0, c.n_layers, true, true);
  EXPECT_TRUE(problems.empty()) << problems.front();
  std::map<std::string, int> types;
  for (const auto& s : model_tensor_specs(c, 0, c.n_layers, true, true)) {
    const StoredBytes& sb = ff.tensors.at(gguf_tensor_name(s));
    ++types[ggml_type_name(sb.type)];
    EXPECT_EQ(src->storage_type(s), ggml_type_name(sb.type)) << s.name;
    if (sb.type == GgmlType::I32) {
      std::vector<int32_t> want(sb.bytes.size() / 4);
      std::memcpy(want.data(), sb.bytes.data(), sb.bytes.size());
      EXPECT_EQ(src->read_i32(s), want) << s.name;
      continue;
    }
    std::vector<float> want(static_cast<size_t>(s.n_elements()));
    dequantize_row(sb.type, sb.bytes.data(), want.data(), s.n_elements());
    const std::vector<float> got = src->read_f32(s);
    ASSERT_EQ(got.size(), want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << s.name << " " << ggml_type_name(sb.type);
  }
  std::string mix;
  for (const auto& [t, count] : types) mix += cat(" ", t, "x", count);
  std::printf("[formats] %-10s types:%s\n", family_name(fam), mix.c_str());
  const std::map<Family, std::vector<const char*>> must = {
      {Family::Unsloth, {"MXFP4", "BF16", "F16", "Q8_0"}},
      {Family::AntirezQ2, {"IQ2_XXS", "Q2_K", "Q8_0", "F16"}},
      {Family::AntirezQ4, {"Q4_K", "Q8_0", "F16"}},
      {Family::Lucebox,
       {"Q2_0_ROCMFP2", "Q4_0_ROCMFP4", "Q4_0_ROCMFP4_FAST", "Q6_0_ROCMFPX", "Q8_0_ROCMFPX", "Q3_0_ROCMFPX"}}};
  for (const char* t : must.at(fam)) EXPECT_TRUE(types.count(t)) << t;
  const auto lc = check_llama_cpp_gguf(gguf::File(ff.path));
  EXPECT_TRUE(lc.empty()) << lc.front();

  Engine eng(std::move(src), EngineOptions{});
  std::mt19937 rng(7);
  std::vector<int32_t> ids(40);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  const auto n = static_cast<int64_t>(ids.size());
  const test::Expected e = tokens_for(eng, ids);
  const auto prefill = test::run(eng, e, {n});
  const auto decode = test::run(eng, e, std::vector<int64_t>(ids.size(), 1));
  const auto chunked = test::run(eng, e, {5, 11, 1, 7, n - 24});
  for (float v : prefill) ASSERT_TRUE(std::isfinite(v));
  EXPECT_NE(prefill[0], prefill[1]);
  const double rel = test::rel_l2(decode.data(), prefill.data(), prefill.size());
  const double rel_chunked = test::rel_l2(chunked.data(), prefill.data(), prefill.size());
  std::printf("[formats] %-10s 40 tokens: decode vs prefill rel_l2 %.3e, chunked %.3e\n", family_name(fam), rel,
              rel_chunked);
  EXPECT_LT(rel, 1e-5);
  EXPECT_LT(rel_chunked, 1e-5);
  std::remove(ff.path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Real, FamilyGguf,
                         ::testing::Values(Family::Unsloth, Family::AntirezQ2, Family::AntirezQ4, Family::Lucebox),
                         [](const auto& info) { return std::string(family_name(info.param)); });

// ------------------------------------------------------------------ broken files per family

// What loading the file through the engine says: "" when it loads.
std::string load_error(const std::string& path) {
  try {
    Engine eng(path, EngineOptions{});
    return "";
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return cat("NOT AN hs::Error: ", e.what());
  }
}

// Overwrites the GGML type id in the tensor-info record of `name` (gguf::Writer refuses ids
// it does not know, so an unknown one is patched in).
void patch_type_id(const std::string& from, const std::string& to, const std::string& name, uint32_t id) {
  std::string bytes = test::read_text(from);
  std::string needle(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(needle.data(), &len, 8);
  needle += name;
  const size_t at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos) << name;
  uint32_t n_dims;
  std::memcpy(&n_dims, bytes.data() + at + needle.size(), 4);
  std::memcpy(bytes.data() + at + needle.size() + 4 + 8 * n_dims, &id, 4);
  test::write_text(to, bytes);
}

struct Broken {
  std::string what;
  std::function<void(const FamilyFile&, const std::string& bad)> make;
  std::vector<std::string> expect;  // substrings of the error
};

// Replaces tensor `name` by one of type t, shape ne (GGUF order) and these bytes.
Edit replace(const std::string& name, GgmlType t, std::vector<int64_t> ne, std::vector<uint8_t> bytes) {
  auto held = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  return Edit{{}, {name}, [=](gguf::Writer& w) { w.add_tensor(name, t, ne, held->data(), held->size()); }};
}
Edit set_key(const std::string& key, gguf::Value v) {
  return Edit{{}, {}, [=](gguf::Writer& w) { w.set(key, v); }};
}

std::vector<Broken> broken_cases(Family fam) {
  using Make = std::function<void(const FamilyFile&, const std::string&)>;
  const auto edit = [](Edit e) -> Make { return [e](const FamilyFile& ff, const std::string& bad) { rewrite(ff.path, bad, e); }; };
  // An edit that needs the family file (its sizes or its bytes).
  const auto edit_with = [](std::function<Edit(const FamilyFile&)> f) -> Make {
    return [f](const FamilyFile& ff, const std::string& bad) { rewrite(ff.path, bad, f(ff)); };
  };
  const auto tid2eid = [](const FamilyFile& ff) { return std::vector<int64_t>{ff.config.n_active_experts, ff.config.vocab_size}; };
  std::vector<Broken> b = {
      {"vector stored Q8_0", edit(replace("blk.0.attn_norm.weight", GgmlType::Q8_0, {256}, std::vector<uint8_t>(8 * 34))),
       {"blk.0.attn_norm.weight: type Q8_0, expected F32, F16 or BF16"}},
      {"tid2eid stored F32",
       edit_with([&](const FamilyFile& ff) {
         const auto ne = tid2eid(ff);
         return replace("blk.0.ffn_gate_tid2eid.weight", GgmlType::F32, ne, std::vector<uint8_t>(ne[0] * ne[1] * 4));
       }),
       {"blk.0.ffn_gate_tid2eid.weight: type F32, expected I32"}},
      {"matrix in a type without dequantizer",
       edit(replace("blk.1.attn_q_a.weight", GgmlType::Q8_1, {256, 32}, std::vector<uint8_t>(8 * 32 * 36))),
       {"blk.1.attn_q_a.weight: type Q8_1, expected a weight type with a dequantizer"}},
      {"wrong shape", edit(replace("blk.1.attn_q_b.weight", GgmlType::F32, {32, 64}, std::vector<uint8_t>(32 * 64 * 4))),
       {"blk.1.attn_q_b.weight: shape [64, 32] (ne reversed), expected [128, 32]"}},
      {"expert stack short",
       edit_with([](const FamilyFile& ff) {
         const StoredBytes& sb = ff.tensors.at("blk.3.ffn_up_exps.weight");
         return replace("blk.3.ffn_up_exps.weight", sb.type, {256, 256, 7},
                        {sb.bytes.begin(), sb.bytes.begin() + static_cast<std::ptrdiff_t>(sb.bytes.size() / 8 * 7)});
       }),
       {"blk.3.ffn_up_exps.weight: shape [7, 256, 256] (ne reversed), expected [8, 256, 256]"}},
      {"missing tensor", edit(Edit{{}, {"blk.2.indexer.proj.weight"}, {}}), {"missing tensor blk.2.indexer.proj.weight"}},
      {"missing key", edit(Edit{{"deepseek4.expert_count"}, {}, {}}), {"missing key deepseek4.expert_count"}},
      {"u32 key stored i32", edit(set_key("deepseek4.block_count", {gguf::ValueType::INT32, int64_t{6}})),
       {"key deepseek4.block_count: expected u32, found i32"}},
      {"context_length stored f32", edit(set_key("deepseek4.context_length", {gguf::ValueType::FLOAT32, 1024.0})),
       {"key deepseek4.context_length: expected u64 (or u32), found f32"}},
      {"ratios shorter than block_count",
       edit(Edit{{}, {}, [](gguf::Writer& w) { w.set_i32_array("deepseek4.attention.compress_ratios", {0, 0, 4, 8, 4}); }}),
       {"attention.compress_ratios: expected at least block_count = 6 entries, found 5"}},
      {"unknown type id",
       [](const FamilyFile& ff, const std::string& bad) { patch_type_id(ff.path, bad, "blk.0.ffn_gate_exps.weight", 42); },
       {"tensor blk.0.ffn_gate_exps.weight: unknown GGML type id 42; expected one of", "MXFP4 (39)", "IQ2_XXS (16)"}},
      {"truncated data",
       [](const FamilyFile& ff, const std::string& bad) {
         const std::string all = test::read_text(ff.path);
         test::write_text(bad, all.substr(0, all.size() / 2));
       },
       {"lies past the end of the file"}},
      {"truncated header",
       [](const FamilyFile& ff, const std::string& bad) { test::write_text(bad, test::read_text(ff.path).substr(0, 1000)); },
       {"header: ", "cannot fit"}},
      {"tid2eid entry out of range",
       edit_with([&](const FamilyFile& ff) {
         std::vector<uint8_t> t = ff.tensors.at("blk.1.ffn_gate_tid2eid.weight").bytes;
         t[0] = 99, t[1] = t[2] = t[3] = 0;
         return replace("blk.1.ffn_gate_tid2eid.weight", GgmlType::I32, tid2eid(ff), t);
       }),
       {"blk.1.ffn_gate_tid2eid.weight: entry 0 = 99", "[0, 8)"}},
      {"another architecture", edit(set_key("general.architecture", {gguf::ValueType::STRING, std::string("deepseek2")})),
       {"general.architecture is 'deepseek2', expected 'deepseek4'"}},
      {"gating function", edit(set_key("deepseek4.expert_gating_func", {gguf::ValueType::UINT32, uint64_t{3}})),
       {"expert_gating_func: expected 4 (sqrt-softplus), found 3"}},
      {"MTP block only",
       edit_with([](const FamilyFile& ff) {
         Edit e;
         for (const auto& [name, sb] : ff.tensors) e.drop_tensors.insert(name);
         return e;
       }),
       {"MTP-only GGUF"}},
  };
  // Family quirks: antirez's vocab_size must agree with the embedding; Lucebox's UE4M3 scale
  // bytes 0x7F (NaN) and >= 0x80 are invalid (quant-formats.md §3.3: reject at load).
  if (fam == Family::AntirezQ2 || fam == Family::AntirezQ4)
    b.push_back({"vocab_size disagrees with token_embd",
                 edit(set_key("deepseek4.vocab_size", {gguf::ValueType::UINT32, uint64_t{1000}})),
                 {"token_embd.weight: shape", "expected [1000, 256]"}});
  if (fam == Family::Lucebox)
    b.push_back({"ROCm NaN scale byte", edit_with([](const FamilyFile& ff) {
                   std::vector<uint8_t> t = ff.tensors.at("blk.0.ffn_gate_exps.weight").bytes;
                   t[8] = 0x7F;  // Q2_0_ROCMFP2: e0 of block 0
                   return replace("blk.0.ffn_gate_exps.weight", GgmlType::Q2_0_ROCMFP2, {256, 256, 8}, t);
                 }),
                 {"tensor blk.0.ffn_gate_exps.weight: row 0:", "invalid scale byte 0x7F"}});
  if (fam == Family::Unsloth)
    b.push_back({"HC projection stored Q8_0",
                 edit(replace("output_hc_fn.weight", GgmlType::Q8_0, {1024, 4}, std::vector<uint8_t>(32 * 4 * 34))),
                 {"output_hc_fn.weight: type Q8_0, expected F32, F16 or BF16"}});
  return b;
}

class FamilyBroken : public ::testing::TestWithParam<Family> {};

TEST_P(FamilyBroken, EachDefectGivesAnErrorNamingIt) {
  const Family fam = GetParam();
  const std::string name = family_name(fam);
  const FamilyFile ff = write_family(fam, temp_path(name + "-good.gguf"));
  ASSERT_EQ(load_error(ff.path), "");
  const std::string bad = temp_path(name + "-bad.gguf");
  for (const Broken& c : broken_cases(fam)) {
    SCOPED_TRACE(name + ": " + c.what);
    c.make(ff, bad);
    const std::string err = load_error(bad);
    ASSERT_FALSE(err.empty()) << "loaded without an error";
    for (const auto& want : c.expect) EXPECT_NE(err.find(want), std::string::npos) << "error: " << err;
    EXPECT_EQ(err.find("NOT AN hs::Error"), std::string::npos) << err;
    std::string line = err;  // the engine lists tensor problems one a line
    for (auto& ch : line)
      if (ch == '\n') ch = ' ';
    std::printf("[formats] %-10s %-38s -> %.200s\n", name.c_str(), c.what.c_str(), line.c_str());
  }
  std::remove(ff.path.c_str());
  std::remove(bad.c_str());
}

INSTANTIATE_TEST_SUITE_P(Real, FamilyBroken,
                         ::testing::Values(Family::Unsloth, Family::AntirezQ2, Family::AntirezQ4, Family::Lucebox),
                         [](const auto& info) { return std::string(family_name(info.param)); });

// Key variants real files use load to the same model: u64 context lengths, the optional keys
// absent (their defaults are the V4 values), 43 or 44 ratios.
TEST(FamilyKeys, OptionalAndWidenedKeysLoadTheSameModel) {
  const FamilyFile ff = write_family(Family::AntirezQ4, temp_path("keys-good.gguf"));
  const std::string var = temp_path("keys-var.gguf");
  Edit e;
  e.drop_keys = {"deepseek4.attention.head_count_kv", "deepseek4.expert_shared_count", "deepseek4.rope.scaling.type",
                 "deepseek4.rope.scaling.factor", "deepseek4.rope.scaling.yarn_beta_fast",
                 "deepseek4.rope.scaling.yarn_beta_slow", "deepseek4.swiglu_clamp_exp", "deepseek4.swiglu_clamp_shexp",
                 "deepseek4.expert_weights_norm", "deepseek4.nextn_predict_layers", "deepseek4.vocab_size",
                 "deepseek4.embedding_length_out"};
  e.add = [](gguf::Writer& w) {
    w.set_u64("deepseek4.context_length", 1024);
    w.set_u64("deepseek4.rope.scaling.original_context_length", 64);
    w.set_i32_array("deepseek4.attention.compress_ratios", {0, 0, 4, 8, 4, 8, 0});
    w.set_u32("deepseek4.expert_group_count", 0);
  };
  rewrite(ff.path, var, e);
  auto a = ModelSource::open(ff.path), b = ModelSource::open(var);
  EXPECT_EQ(a->config().compress_ratios, b->config().compress_ratios);
  EXPECT_EQ(a->config().vocab_size, b->config().vocab_size);  // from the token list
  EXPECT_EQ(a->config().max_position, b->config().max_position);
  EXPECT_EQ(a->config().yarn.original_ctx, b->config().yarn.original_ctx);
  EXPECT_EQ(a->config().swiglu_limit, b->config().swiglu_limit);
  Engine ea(std::move(a), EngineOptions{}), eb(std::move(b), EngineOptions{});
  const test::Expected toks = tokens_for(ea, {0, 5, 17, 300, 42, 9, 9, 101, 7, 64, 33});
  EXPECT_EQ(test::run(ea, toks, {11}), test::run(eb, toks, {11}));
  std::remove(ff.path.c_str());
  std::remove(var.c_str());
}

}  // namespace
