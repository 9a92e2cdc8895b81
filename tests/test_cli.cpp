// The CLI end to end: help texts, `logits` output, and bad input (truncated files, wrong
// shapes, missing keys, bad token ids and chunk specs) -> one clear line, non-zero exit.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>

#include "cli_util.h"
#include "fixture_util.h"
#include "format/npy.h"
#include "format/safetensors.h"
#include "model/synthetic.h"
#include "model/tensors.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

const std::string kData = HS_TEST_DATA;

std::string tmpdir(const std::string& name) {
  std::string d = testing::TempDir() + "/hs_cli_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string tokens_file(const std::string& dir, const std::vector<int32_t>& toks) {
  std::string p = dir + "/tokens.txt", s;
  for (auto t : toks) s += std::to_string(t) + " ";
  test::write_text(p, s);
  return p;
}

// Writes a safetensors file from (name -> (dtype, shape, bytes)), independent of our reader.
void write_safetensors(const std::string& path,
                       const std::map<std::string, std::tuple<std::string, std::vector<int64_t>, std::string>>& t) {
  nlohmann::json h = nlohmann::json::object();
  std::string data;
  for (const auto& [name, v] : t) {
    const auto& [dtype, shape, bytes] = v;
    h[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + bytes.size()}}};
    data += bytes;
  }
  std::string hs = h.dump();
  std::string out(8, '\0');
  uint64_t n = hs.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  test::write_text(path, out + hs + data);
}

// A copy of the tiny fixture whose tensors can be edited.
std::map<std::string, std::tuple<std::string, std::vector<int64_t>, std::string>> tiny_tensors() {
  st::File f(kData + "/tiny/model.safetensors");
  std::map<std::string, std::tuple<std::string, std::vector<int64_t>, std::string>> out;
  for (const auto& [n, t] : f.tensors())
    out[n] = {st::dtype_name(t.dtype), t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes)};
  return out;
}

void expect_error(const test::CliResult& r, const std::string& needle) {
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_LT(r.code, 128) << "crashed: " << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << "message lacks '" << needle << "': " << r.out;
  EXPECT_NE(r.out.find("error"), std::string::npos) << r.out;
}

TEST(Cli, HelpForEveryCommand) {
  auto top = test::run_cli("--help");
  EXPECT_EQ(top.code, 0);
  for (const char* cmd : {"inspect", "logits"}) {
    EXPECT_NE(top.out.find(cmd), std::string::npos);
    auto r = test::run_cli(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd;
    EXPECT_NE(r.out.find("usage: hyperstream"), std::string::npos) << cmd;
  }
  // Every command listed in the top-level help answers --help.
  std::istringstream ss(top.out);
  std::string line;
  bool in_list = false;
  while (std::getline(ss, line)) {
    if (line == "commands:") { in_list = true; continue; }
    if (!in_list || line.size() < 3) continue;
    std::string name = line.substr(2, line.find(' ', 2) - 2);
    auto r = test::run_cli(name + " --help");
    EXPECT_EQ(r.code, 0) << name << ": " << r.out;
  }
  EXPECT_EQ(test::run_cli("no-such-command").code, 2);
}

TEST(Cli, LogitsWritesNpyMatchingTheFixture) {
  const std::string d = tmpdir("logits");
  test::Expected e = test::load_expected(kData + "/tiny");
  const std::string tok = tokens_file(d, e.tokens), out = d + "/out.npy";
  for (const char* chunks : {"64", "1", "5,11,1,1,7,3,4,1,16,1,1,13"}) {
    auto r = test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + out + " --chunks " + chunks +
                           " --threads 2");
    ASSERT_EQ(r.code, 0) << r.out;
    auto a = npy::read_f32(out);
    ASSERT_EQ(a.shape, (std::vector<int64_t>{64, e.vocab}));
    EXPECT_LE(test::rel_l2(a.data.data(), e.logits.data(), a.data.size()), 1e-5) << chunks;
  }
}

TEST(Cli, InspectReportsAndValidates) {
  auto r = test::run_cli("inspect " + kData + "/tiny-official");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("format: official"), std::string::npos);
  EXPECT_NE(r.out.find("layer 2: CSA (ratio 4)"), std::string::npos);
  EXPECT_NE(r.out.find("F8_E4M3"), std::string::npos);
  EXPECT_NE(r.out.find("validation: ok"), std::string::npos);
}

TEST(CliBadInput, ChunkSpecAndTokenIds) {
  const std::string d = tmpdir("badtok");
  const std::string tok = tokens_file(d, {1, 2, 3, 4});
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/o.npy --chunks 2,1"),
               "sums to 3 but there are 4 tokens");
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/o.npy --chunks 2,x"),
               "is not a positive integer");
  const std::string big = tokens_file(d, {1, 320});
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + big + " --out " + d + "/o.npy"),
               "outside the vocabulary [0, 320)");
  test::write_text(d + "/junk.txt", "1 2 three");
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + d + "/junk.txt --out " + d + "/o.npy"),
               "expected an integer, got 'three'");
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + tok), "missing --out");
  expect_error(test::run_cli("logits " + d + "/nope --tokens " + tok + " --out " + d + "/o.npy"), "does not exist");
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/o.npy --bogus 1"),
               "unknown option --bogus");
}

// --cuda-graphs takes on|off (any other value is refused before the model loads); on a CPU
// engine it changes nothing, so off still computes the fixture's logits.
TEST(CliBadInput, CudaGraphsSwitch) {
  const std::string d = tmpdir("graphs");
  const std::string tok = tokens_file(d, {1, 2, 3, 4});
  expect_error(test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/o.npy --cuda-graphs maybe"),
               "--cuda-graphs: expected on or off, got 'maybe'");
  const auto r = test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/o.npy --cuda-graphs off");
  EXPECT_EQ(r.code, 0) << r.out;
  const auto h = test::run_cli("logits --help");
  EXPECT_NE(h.out.find("--cuda-graphs"), std::string::npos) << h.out;
}

// The CUDA launch switches --pdl (programmatic dependent launch) and --fused-handover (the
// hand-over between sub-layers as one launch) take on|off, refused before the model loads; a CPU
// engine launches no kernels, so on still computes the fixture's logits, the same as off.
TEST(CliBadInput, CudaLaunchSwitches) {
  for (const std::string sw : {"pdl", "fused-handover"}) {
    const std::string d = tmpdir(sw);
    const std::string tok = tokens_file(d, {1, 2, 3, 4});
    const std::string cmd = "logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/";
    expect_error(test::run_cli(cmd + "o.npy --" + sw + " yes"), "--" + sw + ": expected on or off, got 'yes'");
    ASSERT_EQ(test::run_cli(cmd + "on.npy --" + sw + " on").code, 0);
    ASSERT_EQ(test::run_cli(cmd + "off.npy --" + sw + " off").code, 0);
    EXPECT_EQ(npy::read_f32(d + "/on.npy").data, npy::read_f32(d + "/off.npy").data) << sw;
    EXPECT_NE(test::run_cli("bench --help").out.find("--" + sw), std::string::npos) << sw;
  }
}

// --moe-ksplit (a tuning of the CUDA q2 mix MoE) takes two K-splits of 0, 1, 2, 4, 8, refused
// before the model loads; a CPU engine has no such kernels and computes the same logits.
TEST(CliBadInput, MoeKsplitTuning) {
  const std::string d = tmpdir("ksplit");
  const std::string tok = tokens_file(d, {1, 2, 3, 4});
  const std::string cmd = "logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/o.npy --moe-ksplit ";
  expect_error(test::run_cli(cmd + "3,1"), "--moe-ksplit: each K-split must be 0, 1, 2, 4 or 8, got 3");
  expect_error(test::run_cli(cmd + "16,1"), "got 16");
  expect_error(test::run_cli(cmd + "1"), "--moe-ksplit: expected two K-splits GU,DOWN, got 1 values");
  const auto r = test::run_cli(cmd + "2,8");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(CliBadInput, TruncatedSafetensors) {
  const std::string src = test::read_text(kData + "/tiny/model.safetensors");
  const std::string tok = tokens_file(tmpdir("trunc_tok"), {1, 2});
  for (size_t cut : {size_t{4}, size_t{100}, src.size() / 2, src.size() - 1}) {
    const std::string d = tmpdir("trunc");
    fs::copy_file(kData + "/tiny/config.json", d + "/config.json");
    test::write_text(d + "/model.safetensors", src.substr(0, cut));
    auto r = test::run_cli("logits " + d + " --tokens " + tok + " --out " + d + "/o.npy");
    expect_error(r, "model.safetensors");
  }
}

TEST(CliBadInput, TruncatedGguf) {
  const std::string d = tmpdir("gguf");
  const std::string tok = tokens_file(d, {1, 2});
  // Write a GGUF from tiny with our exporter, check it runs, then truncate it.
  ASSERT_EQ(test::run_cli("logits " + kData + "/tiny --tokens " + tok + " --out " + d + "/ref.npy").code, 0);
  auto r = test::run_cli("convert " + kData + "/tiny " + d + "/tiny.gguf --dense f32 --experts f32");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(test::run_cli("logits " + d + "/tiny.gguf --tokens " + tok + " --out " + d + "/g.npy").code, 0);
  EXPECT_EQ(npy::read_f32(d + "/g.npy").data, npy::read_f32(d + "/ref.npy").data);
  const std::string full = test::read_text(d + "/tiny.gguf");
  for (size_t cut : {size_t{3}, size_t{40}, size_t{2000}, full.size() / 2, full.size() - 1}) {
    test::write_text(d + "/cut.gguf", full.substr(0, cut));
    expect_error(test::run_cli("logits " + d + "/cut.gguf --tokens " + tok + " --out " + d + "/o.npy"), "cut.gguf");
  }
}

TEST(CliBadInput, WrongShapeAndMissingTensor) {
  const std::string d = tmpdir("shape");
  fs::copy_file(kData + "/tiny/config.json", d + "/config.json");
  auto t = tiny_tensors();
  auto& [dtype, shape, bytes] = t.at("model.layers.3.self_attn.kv_norm.weight");
  shape = {16};
  bytes = bytes.substr(0, 16 * 4);
  write_safetensors(d + "/model.safetensors", t);
  const std::string tok = tokens_file(d, {1, 2});
  auto r = test::run_cli("logits " + d + " --tokens " + tok + " --out " + d + "/o.npy");
  expect_error(r, "model.layers.3.self_attn.kv_norm.weight: shape [16], expected [32]");
  auto ins = test::run_cli("inspect " + d);
  EXPECT_EQ(ins.code, 1);
  EXPECT_NE(ins.out.find("model.layers.3.self_attn.kv_norm.weight"), std::string::npos) << ins.out;

  t.erase("model.layers.4.mlp.gate.e_score_correction_bias");
  write_safetensors(d + "/model.safetensors", t);
  expect_error(test::run_cli("logits " + d + " --tokens " + tok + " --out " + d + "/o.npy"),
               "missing tensor model.layers.4.mlp.gate.e_score_correction_bias");
}

TEST(CliBadInput, ConfigMissingOrMistypedKey) {
  const std::string d = tmpdir("config");
  fs::copy_file(kData + "/tiny/model.safetensors", d + "/model.safetensors");
  auto cfg = nlohmann::json::parse(test::read_text(kData + "/tiny/config.json"));
  cfg.erase("hidden_size");
  test::write_text(d + "/config.json", cfg.dump());
  const std::string tok = tokens_file(d, {1, 2});
  expect_error(test::run_cli("logits " + d + " --tokens " + tok + " --out " + d + "/o.npy"), "missing key 'hidden_size'");
  cfg = nlohmann::json::parse(test::read_text(kData + "/tiny/config.json"));
  cfg["num_attention_heads"] = "four";
  test::write_text(d + "/config.json", cfg.dump());
  expect_error(test::run_cli("inspect " + d), "key 'num_attention_heads': expected a number, found string");
  test::write_text(d + "/config.json", "{ not json");
  expect_error(test::run_cli("inspect " + d), "invalid JSON");
}

}  // namespace

// bench on the CPU: the runs asked for, positive rates, and the decode weight bytes equal to
// the tensor inventory's count (f32 on the CPU: every matrix and vector, k of E experts, one
// embedding row, the whole head; tid2eid is a lookup, not a weight pass).
TEST(Cli, BenchReportsRunsAndWeightBytes) {
  const std::string d = tmpdir("bench");
  auto r = test::run_cli("bench --synthetic tiny --device cpu --threads 2 --pp 16 --chunk 5 --tg 4 --depth 0,9 "
                         "--reps 1 --quant f32 --json " + d + "/b.json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("| tg4@9 |"), std::string::npos) << r.out;
  std::ifstream f(d + "/b.json");
  const auto j = nlohmann::json::parse(f);
  ASSERT_EQ(j["results"].size(), 3u) << j.dump();
  EXPECT_EQ(j["results"][0]["test"], "pp16");
  EXPECT_EQ(j["results"][1]["test"], "tg4@0");
  EXPECT_EQ(j["results"][2]["test"], "tg4@9");
  for (const auto& x : j["results"]) EXPECT_GT(x["tok_s"].get<double>(), 0.0) << x.dump();
  SyntheticSpec spec;  // the bench's model
  spec.preset = "tiny";
  const ModelConfig c = synthetic_config(spec);
  int64_t want = 0;
  for (const auto& s : model_tensor_specs(c, 0, c.n_layers, true, true)) {
    if (s.role == TensorRole::TokenTable) continue;
    int64_t b = s.n_elements() * 4;
    if (s.role == TensorRole::Experts) b = b * c.n_active_experts / c.n_experts;
    if (s.name == "token_embd") b /= c.vocab_size;
    want += b;
  }
  EXPECT_EQ(j["weight_bytes_per_token"].get<int64_t>(), want);
  // Batched decode and the split report: tg4x3 is 3 sequences x 4 steps; a cpu,cpu split times
  // each shard alone and compares their sum with the plain step.
  auto rs = test::run_cli("bench --synthetic tiny --devices cpu,cpu --threads 2 --pp 0 --tg 4 --depth 0 --seqs 3 "
                          "--reps 1 --json " + d + "/s.json");
  ASSERT_EQ(rs.code, 0) << rs.out;
  EXPECT_NE(rs.out.find("split overhead"), std::string::npos) << rs.out;
  std::ifstream fs(d + "/s.json");
  const auto js = nlohmann::json::parse(fs);
  ASSERT_EQ(js["results"].size(), 2u) << js.dump();
  EXPECT_EQ(js["results"][1]["test"], "tg4x3");
  EXPECT_EQ(js["results"][1]["tokens"], 12);
  EXPECT_EQ(js["results"][1]["sequences"], 3);
  ASSERT_EQ(js["split"]["shard_ms"].size(), 2u) << js.dump();
  EXPECT_GT(js["split"]["sum_ms"].get<double>(), 0.0);
  expect_error(test::run_cli("bench --synthetic huge --device cpu"), "huge");
  expect_error(test::run_cli("bench --device cpu"), "--synthetic");
}

// serve: MODEL and --synthetic exclude each other, and bad synthetic options fail before the
// server listens (--port -1 makes a check that did not fire an error too, not a hang).
TEST(CliBadInput, ServeSyntheticOptions) {
  expect_error(test::run_cli("serve " + kData + "/tiny --synthetic tiny --port -1"), "mutually exclusive");
  expect_error(test::run_cli("serve --synthetic huge --port -1"), "huge");
  expect_error(test::run_cli("serve --synthetic flash --layers 0 --port -1"), "layers");
  expect_error(test::run_cli("serve --quant q8 --port -1"), "--synthetic");
  const auto h = test::run_cli("serve --help");
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("--synthetic PRESET"), std::string::npos) << h.out;
}
