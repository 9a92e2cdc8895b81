// The MTP drafter's tensors (issue 16): every GGUF layout (llama.cpp's converter blk.<n>.nextn.*,
// Unsloth's counted block, antirez's mtp.0.*) and the in-memory synthetic source give the same
// weights; a missing or mis-shaped MTP tensor, or none at all under --draft mtp, is an error that
// names it; --draft auto without an MTP block loads the model without a drafter.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "engine/engine.h"
#include "engine/mtp.h"
#include "engine/weights.h"
#include "format/gguf.h"
#include "model/synthetic.h"
#include "util/error.h"

#include "gguf_util.h"
#include "official_dir_util.h"

namespace hs {
namespace {

SyntheticSpec mtp_spec(const std::string& layout, int layers = 3) {
  SyntheticSpec s;
  s.layers = layers;
  s.seed = 7;
  s.draft = "mtp";
  s.draft_layout = layout;
  return s;
}

std::string temp(const std::string& name) { return testing::TempDir() + "/hs_mtp_" + name + ".gguf"; }

TEST(MtpLoad, EveryLayoutGivesTheSameWeights) {
  const auto mem = make_synthetic_source(mtp_spec("nextn"));
  ASSERT_TRUE(mem->has_mtp());
  EXPECT_TRUE(mem->validate_mtp().empty());
  const MtpWeights ref = load_mtp_weights(*mem);
  const int64_t D = mem->config().dim;
  ASSERT_EQ(ref.e_proj.rows, D);
  ASSERT_EQ(ref.e_proj.cols, D);
  EXPECT_EQ(ref.block.layer, mem->config().n_layers);
  EXPECT_FALSE(ref.block.gate_bias.empty());  // the MTP block is score-routed
  EXPECT_FALSE(ref.block.has_compressor);      // and SWA-only (ratio 0)
  // The fused eh_proj [D, 2D]: e_proj is its first D columns, h_proj the rest.
  const auto specs = mem->mtp_specs();
  ASSERT_EQ(specs.front().name, "mtp.eh_proj");
  const std::vector<float> eh = mem->read_f32(specs.front());
  for (int64_t r = 0; r < D; r += 7)
    for (int64_t c = 0; c < D; c += 5) {
      ASSERT_EQ(ref.e_proj.w[static_cast<size_t>(r * D + c)], eh[static_cast<size_t>(r * 2 * D + c)]);
      ASSERT_EQ(ref.h_proj.w[static_cast<size_t>(r * D + c)], eh[static_cast<size_t>(r * 2 * D + D + c)]);
    }
  for (const std::string layout : {"nextn", "nextn-counted"}) {
    const std::string path = temp(layout);
    write_synthetic_gguf(mtp_spec(layout), path);
    const auto src = ModelSource::open(path);
    EXPECT_EQ(src->config().n_layers, 3) << layout;  // the counted block is not a main layer
    EXPECT_EQ(src->config().n_mtp_layers, 1) << layout;
    ASSERT_TRUE(src->validate_mtp().empty()) << layout << ": " << src->validate_mtp().front();
    const MtpWeights w = load_mtp_weights(*src);
    EXPECT_EQ(w.e_proj.w, ref.e_proj.w) << layout;
    EXPECT_EQ(w.h_proj.w, ref.h_proj.w) << layout;
    EXPECT_EQ(w.block.wq_a.w, ref.block.wq_a.w) << layout;
    EXPECT_EQ(w.block.w2.w, ref.block.w2.w) << layout;
    EXPECT_EQ(w.hc_head.fn, ref.hc_head.fn) << layout;
    EXPECT_EQ(w.norm, ref.norm) << layout;
    std::remove(path.c_str());
  }
  // antirez's layout keeps e_proj and h_proj apart (their own random values).
  const auto mem0 = make_synthetic_source(mtp_spec("mtp0"));
  const MtpWeights ref0 = load_mtp_weights(*mem0);
  const std::string path = temp("mtp0");
  write_synthetic_gguf(mtp_spec("mtp0"), path);
  const auto src = ModelSource::open(path);
  const MtpWeights w0 = load_mtp_weights(*src);
  EXPECT_EQ(w0.e_proj.w, ref0.e_proj.w);
  EXPECT_EQ(w0.h_proj.w, ref0.h_proj.w);
  EXPECT_EQ(w0.block.wq_a.w, ref.block.wq_a.w);  // the block's tensors do not depend on the layout
  EXPECT_EQ(w0.enorm, ref.enorm);
  std::remove(path.c_str());
}

TEST(MtpLoad, MissingOrMisShapedTensorsAreNamed) {
  const std::string good = temp("good"), bad = temp("bad");
  write_synthetic_gguf(mtp_spec("nextn"), good);
  EngineOptions o;
  o.draft = "mtp";
  o.max_seqs = 2;
  {
    Engine e(good, o);
    EXPECT_NE(e.drafter(), nullptr);
  }
  copy_gguf(good, bad, "blk.3.attn_q_a.weight");
  try {
    Engine e(bad, o);
    ADD_FAILURE() << "a drafter without attn_q_a loaded";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("mtp.attn_q_a"), std::string::npos) << m;
    EXPECT_NE(m.find("blk.3.attn_q_a"), std::string::npos) << m;  // where it was looked for
  }
  o.draft = "auto";  // a file with a broken MTP block is refused under auto too
  EXPECT_THROW(Engine(bad, o), Error);
  // An MTP block of another width than the main model (its enorm cut to 32 of 64) is refused, named.
  copy_gguf(good, bad, "blk.3.nextn.enorm.weight", 32);
  o.draft = "mtp";
  try {
    Engine e(bad, o);
    ADD_FAILURE() << "a mis-shaped drafter loaded";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("nextn.enorm"), std::string::npos) << m;
    EXPECT_NE(m.find("shape"), std::string::npos) << m;
  }
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(MtpLoad, DraftKinds) {
  EngineOptions o;
  o.max_seqs = 2;
  o.draft = "auto";  // no MTP block: no drafter, no error
  EXPECT_EQ(Engine(builtin_source(), o).drafter(), nullptr);
  o.draft = "mtp";
  try {
    Engine e(builtin_source(), o);
    ADD_FAILURE() << "--draft mtp without an MTP block loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("no MTP block"), std::string::npos) << err.what();
  }
  o.draft = "dspark";
  EXPECT_THROW(Engine(builtin_source(), o), Error);
  o.draft = "bogus";
  EXPECT_THROW(Engine(builtin_source(), o), Error);
  o.draft = "auto";
  SyntheticSpec s = mtp_spec("mtp0");
  EXPECT_NE(Engine(make_synthetic_source(s), o).drafter(), nullptr);
}

// The official checkpoint's naming (mtp.0.<official name>, F32 here) in an HF directory: the
// tiny fixture's config.json with the MTP block's tensors and the shared embedding and head.
TEST(MtpLoad, OfficialNamingInASafetensorsDirectory) {
  SyntheticSpec spec = mtp_spec("mtp0", 6);
  spec.vocab = 320;  // the tiny fixture's config
  const auto mem = make_synthetic_source(spec);
  const std::string dir = testing::TempDir() + "/hs_mtp_official";
  ASSERT_NO_FATAL_FAILURE(write_official_dir(*mem, mem->mtp_specs(), dir, "\"num_nextn_predict_layers\": 0", "\"num_nextn_predict_layers\": 1"));
  const auto src = ModelSource::open(dir);
  EXPECT_EQ(src->format(), "official");
  ASSERT_TRUE(src->has_mtp());
  ASSERT_TRUE(src->validate_mtp().empty()) << src->validate_mtp().front();
  const MtpWeights got = load_mtp_weights(*src), want = load_mtp_weights(*mem);
  EXPECT_EQ(got.e_proj.w, want.e_proj.w);
  EXPECT_EQ(got.h_proj.w, want.h_proj.w);
  EXPECT_EQ(got.block.wo_a.w, want.block.wo_a.w);
  EXPECT_EQ(got.block.w2.w, want.block.w2.w);
  EXPECT_EQ(got.block.gate_bias, want.block.gate_bias);
  EXPECT_EQ(got.hc_head.scale, want.hc_head.scale);
  std::filesystem::remove_all(dir);
}

// A drafter in a file of its own (--draft-model): llama.cpp's MTP-only GGUF (block counted) and
// antirez's mtp.0.* file load for the model they were made for and are refused for another.
TEST(MtpLoad, DrafterFileApartFromTheModel) {
  SyntheticSpec main_spec = mtp_spec("nextn");
  main_spec.draft.clear();
  const std::string main_path = temp("main"), d1 = temp("d1"), d2 = temp("d2"), other = temp("other");
  write_synthetic_gguf(main_spec, main_path);
  SyntheticSpec only = mtp_spec("nextn-counted");
  only.draft_only = true;
  write_synthetic_gguf(only, d1);
  SyntheticSpec only0 = mtp_spec("mtp0");
  only0.draft_only = true;
  write_synthetic_gguf(only0, d2);
  EngineOptions o;
  o.max_seqs = 2;
  o.draft = "mtp";
  EXPECT_THROW(Engine(main_path, o), Error);  // the model itself has none
  for (const std::string& d : {d1, d2}) {
    o.draft_model = d;
    Engine e(main_path, o);
    ASSERT_NE(e.drafter(), nullptr) << d;
  }
  // The same weights as the model's own MTP block would have been.
  const auto ref = load_mtp_weights(*make_synthetic_source(mtp_spec("nextn")));
  const auto got = load_mtp_weights(*open_gguf_drafter(d1, make_synthetic_source(main_spec)->config()));
  EXPECT_EQ(got.e_proj.w, ref.e_proj.w);
  EXPECT_EQ(got.block.w1.w, ref.block.w1.w);
  // Made for another model: another vocabulary, another layer count (its block at blk.4).
  SyntheticSpec v = only;
  v.vocab = 1000;
  write_synthetic_gguf(v, other);
  o.draft_model = other;
  try {
    Engine e(main_path, o);
    ADD_FAILURE() << "a drafter for another vocabulary loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("made for another model"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("vocab"), std::string::npos) << err.what();
  }
  SyntheticSpec l = only;
  l.layers = 4;
  write_synthetic_gguf(l, other);
  try {
    Engine e(main_path, o);
    ADD_FAILURE() << "a drafter for a 4-layer model loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("layer 4"), std::string::npos) << err.what();
  }
  o.draft = "off";
  o.draft_model = d1;
  EXPECT_THROW(Engine(main_path, o), Error);  // a drafter file without --draft
  for (const std::string& p : {main_path, d1, d2, other}) std::remove(p.c_str());
}

}  // namespace
}  // namespace hs
