// The DSpark drafter (docs/speculative.md): its inventory and loading from the synthetic model
// (in memory and through a GGUF of ds4's layout), the refusals, and its forward on the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "engine/cpu_ops.h"
#include "engine/dspark.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "engine/weights.h"
#include "format/safetensors.h"
#include "model/dspark_tensors.h"
#include "model/source.h"
#include "model/synthetic.h"
#include "util/error.h"
#include "util/thread_pool.h"

#include "gguf_util.h"
#include "official_dir_util.h"

namespace hs {
namespace {

SyntheticSpec dspark_spec() {
  SyntheticSpec s;
  s.draft = "dspark";
  s.seed = 7;
  return s;
}

Mat read_mat(const ModelSource& src, const std::string& name) {
  for (const TensorSpec& t : model_tensor_specs(src.config(), 0, 1, true, true)) {
    if (t.name != name) continue;
    Mat m;
    m.rows = t.shape[0];
    m.cols = t.shape[1];
    m.w = src.read_f32(t);
    return m;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

TEST(Dspark, SyntheticHasTheRealLayout) {
  const auto src = make_synthetic_source(dspark_spec());
  const ModelConfig& c = src->config();
  EXPECT_EQ(c.dspark.stages, 3);
  EXPECT_EQ(c.dspark.block, 5);
  EXPECT_EQ(c.dspark.target_layers, (std::vector<int>{3, 4, 5}));
  ASSERT_TRUE(src->has_dspark());
  EXPECT_FALSE(src->has_mtp()) << "the stages' mtp.<s> blocks are not a partial MTP block";
  EXPECT_TRUE(src->validate_dspark().empty());
  const auto specs = src->dspark_specs();
  // main_proj, main_norm, 3 stage blocks, norm, hc_head (3), markov (2), confidence.
  const size_t block = layer_tensor_specs(c.with_dspark_layers(3), c.n_layers).size();
  EXPECT_EQ(specs.size(), 2 + 3 * block + 1 + 3 + 2 + 1);
  EXPECT_EQ(specs.front().official, "mtp.0.main_proj.weight");
  EXPECT_EQ(specs.front().shape, (std::vector<int64_t>{c.dim, 3 * c.dim}));
  EXPECT_EQ(specs.back().official, "mtp.2.confidence_head.proj.weight");
  EXPECT_EQ(dspark_gguf_names("dspark.1.attn_q_a", 3, false), (std::vector<std::string>{"mtp.1.attn_q_a"}));
  EXPECT_EQ(dspark_gguf_names("dspark.markov_w1", 3, false),
            (std::vector<std::string>{"mtp.2.markov_head.markov_w1.weight"}));
  EXPECT_EQ(dspark_gguf_names("dspark.main_proj", 3, true), (std::vector<std::string>{"dflash.fc.weight"}));
  const DsparkWeights w = load_dspark_weights(*src);
  ASSERT_EQ(w.stages.size(), 3u);
  EXPECT_EQ(w.stages[2].layer, c.n_layers + 2);
  EXPECT_FALSE(w.stages[0].has_compressor);
  EXPECT_FALSE(w.stages[0].gate_bias.empty()) << "the stages are score-routed";
  EXPECT_EQ(w.markov_w1.rows, c.vocab_size);
  EXPECT_EQ(w.confidence.cols, c.dim + c.dspark.markov_rank);
}

TEST(Dspark, FlashPresetShapes) {
  SyntheticSpec s = dspark_spec();
  s.preset = "flash";
  const ModelConfig c = synthetic_config(s);
  EXPECT_EQ(c.dspark.target_layers, (std::vector<int>{40, 41, 42}));
  EXPECT_EQ(c.dspark.noise_token, 128799);
  const auto specs = dspark_tensor_specs(c, 3);
  EXPECT_EQ(specs.front().shape, (std::vector<int64_t>{4096, 3 * 4096}));
  EXPECT_EQ(specs[specs.size() - 3].shape, (std::vector<int64_t>{129280, 256}));
  EXPECT_EQ(specs.back().shape, (std::vector<int64_t>{1, 4096 + 256}));
}

TEST(Dspark, GgufRoundTripAndBadConfig) {
  const std::string path = (std::filesystem::temp_directory_path() / "hs_test_dspark.gguf").string();
  write_synthetic_gguf(dspark_spec(), path);
  {
    const auto src = ModelSource::open(path);
    EXPECT_EQ(src->config().dspark.stages, 3);
    EXPECT_EQ(src->config().dspark.target_layers, (std::vector<int>{3, 4, 5}));
    ASSERT_TRUE(src->has_dspark());
    EXPECT_TRUE(src->validate_dspark().empty());
    const auto mem = make_synthetic_source(dspark_spec());
    const DsparkWeights a = load_dspark_weights(*src), b = load_dspark_weights(*mem);
    EXPECT_EQ(a.markov_w2.w, b.markov_w2.w);
    EXPECT_EQ(a.stages[1].wq_a.w, b.stages[1].wq_a.w);
  }
  std::filesystem::remove(path);
  // A config that does not fit the model is refused, naming the field.
  ModelConfig c = synthetic_config(dspark_spec());
  c.dspark.target_layers = {4, 9};
  try {
    c.validate_dspark(3, "x: ");
    ADD_FAILURE() << "accepted a target layer past the model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dspark_target_layer_ids[1] = 9"), std::string::npos) << e.what();
  }
  // A model without the drafter says so.
  const auto plain = make_synthetic_source(SyntheticSpec{});
  EXPECT_FALSE(plain->has_dspark());
  ASSERT_EQ(plain->validate_dspark().size(), 1u);
  EXPECT_NE(plain->validate_dspark()[0].find("cannot draft with --draft dspark"), std::string::npos);
}

std::string temp(const std::string& name) { return testing::TempDir() + "/hs_dspark_" + name + ".gguf"; }

TEST(Dspark, MissingOrMisShapedTensorsAreNamed) {
  const std::string good = temp("good"), bad = temp("bad");
  SyntheticSpec spec = dspark_spec();
  spec.layers = 4;
  write_synthetic_gguf(spec, good);
  EngineOptions o;
  o.draft = "dspark";
  o.max_seqs = 2;
  o.threads = 2;
  {
    Engine e(good, o);
    EXPECT_NE(e.dspark(), nullptr);
  }
  copy_gguf(good, bad, "mtp.1.attn_q_a.weight");
  for (const char* kind : {"dspark", "auto"}) {  // auto refuses a broken drafter too
    o.draft = kind;
    try {
      Engine e(bad, o);
      ADD_FAILURE() << "a drafter without stage 1's attn_q_a loaded (--draft " << kind << ")";
    } catch (const Error& err) {
      const std::string m = err.what();
      EXPECT_NE(m.find("dspark.1.attn_q_a"), std::string::npos) << m;
      EXPECT_NE(m.find("mtp.1.attn_q_a"), std::string::npos) << m;  // where it was looked for
    }
  }
  copy_gguf(good, bad, "mtp.0.main_norm.weight", 32);  // another width than the model's 64
  o.draft = "dspark";
  try {
    Engine e(bad, o);
    ADD_FAILURE() << "a mis-shaped drafter loaded";
  } catch (const Error& err) {
    const std::string m = err.what();
    EXPECT_NE(m.find("mtp.0.main_norm"), std::string::npos) << m;
    EXPECT_NE(m.find("shape"), std::string::npos) << m;
  }
  std::remove(good.c_str());
  std::remove(bad.c_str());
}

TEST(Dspark, DrafterFileApartFromTheModel) {
  SyntheticSpec main_spec = dspark_spec();
  main_spec.layers = 4;
  main_spec.draft.clear();
  SyntheticSpec only = dspark_spec();
  only.layers = 4;
  only.draft_only = true;
  const std::string main_path = temp("main"), d = temp("only"), other = temp("other");
  write_synthetic_gguf(main_spec, main_path);
  write_synthetic_gguf(only, d);
  EngineOptions o;
  o.max_seqs = 2;
  o.threads = 2;
  o.draft = "dspark";
  EXPECT_THROW(Engine(main_path, o), Error);  // the model itself has none
  o.draft_model = d;
  {
    Engine e(main_path, o);
    ASSERT_NE(e.dspark(), nullptr);
  }
  o.draft = "auto";
  {
    Engine e(main_path, o);
    EXPECT_NE(e.dspark(), nullptr);
  }
  // The same weights as the model's own drafter would have had.
  SyntheticSpec with = only;
  with.draft_only = false;
  const DsparkWeights ref = load_dspark_weights(*make_synthetic_source(with));
  const DsparkWeights got = load_dspark_weights(*open_gguf_drafter(d, make_synthetic_source(main_spec)->config()));
  EXPECT_EQ(got.main_proj.w, ref.main_proj.w);
  EXPECT_EQ(got.stages[2].w2.w, ref.stages[2].w2.w);
  EXPECT_EQ(got.confidence.w, ref.confidence.w);
  // Made for another model: another layer count (its taps index other layers), another vocabulary.
  o.draft = "dspark";
  o.draft_model = other;
  SyntheticSpec l = only;
  l.layers = 6;
  write_synthetic_gguf(l, other);
  try {
    Engine e(main_path, o);
    ADD_FAILURE() << "a drafter for a 6-layer model loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("made for another model"), std::string::npos) << err.what();
  }
  SyntheticSpec v = only;
  v.vocab = 1000;
  write_synthetic_gguf(v, other);
  try {
    Engine e(main_path, o);
    ADD_FAILURE() << "a drafter for another vocabulary loaded";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("made for another model"), std::string::npos) << err.what();
  }
  // The same drafter in Lucebox's deepseek4-dflash-draft names (dflash.*, blk.<s>.*, output_*).
  const std::string luce = temp("lucebox");
  copy_gguf_renamed(d, luce, [](const std::string& n) {
    const std::pair<const char*, const char*> table[] = {
        {"mtp.0.main_proj.weight", "dflash.fc.weight"},
        {"mtp.0.main_norm.weight", "dflash.hidden_norm.weight"},
        {"mtp.2.norm.weight", "output_norm.weight"},
        {"mtp.2.hc_head_fn.weight", "output_hc_fn.weight"},
        {"mtp.2.hc_head_base.weight", "output_hc_base.weight"},
        {"mtp.2.hc_head_scale.weight", "output_hc_scale.weight"},
        {"mtp.2.markov_head.markov_w1.weight", "dflash.dspark.markov.w1.weight"},
        {"mtp.2.markov_head.markov_w2.weight", "dflash.dspark.markov.w2.weight"},
        {"mtp.2.confidence_head.proj.weight", "dflash.dspark.confidence.weight"}};
    for (const auto& [from, to] : table)
      if (n == from) return std::string(to);
    EXPECT_EQ(n.rfind("mtp.", 0), 0u) << n;
    return "blk." + n.substr(4);
  }, "deepseek4-dflash-draft");
  const auto lsrc = open_gguf_drafter(luce, make_synthetic_source(main_spec)->config());
  EXPECT_EQ(lsrc->config().dspark.stages, 3);
  ASSERT_TRUE(lsrc->has_dspark());
  EXPECT_FALSE(lsrc->has_mtp());
  const DsparkWeights lw = load_dspark_weights(*lsrc);
  EXPECT_EQ(lw.main_proj.w, ref.main_proj.w);
  EXPECT_EQ(lw.stages[1].wq_b.w, ref.stages[1].wq_b.w);
  EXPECT_EQ(lw.hc_head.fn, ref.hc_head.fn);
  EXPECT_EQ(lw.markov_w1.w, ref.markov_w1.w);
  o.draft_model = luce;
  {
    Engine e(main_path, o);
    ASSERT_NE(e.dspark(), nullptr);
    // The taps come from the drafter's keys (the model's own file has none).
    auto seq = e.new_sequence();
    const std::vector<int32_t> toks = {5, 9, 13};
    std::vector<float> logits(3 * static_cast<size_t>(e.config().vocab_size)),
        taps(3 * static_cast<size_t>(e.dspark()->tap_width()), 0.0f);
    StepItem it{seq.get(), toks.data(), 3, logits.data(), true};
    it.taps = taps.data();
    e.step_batch({&it, 1});
    EXPECT_NE(*std::max_element(taps.begin(), taps.end()), 0.0f);
    EXPECT_NE(taps.back(), 0.0f) << "the last row's last tap";
  }
  for (const std::string& p : {main_path, d, other, luce}) std::remove(p.c_str());
}

// The official checkpoint's naming (mtp.<s>.<official name>, F32 here) in an HF directory: the
// tiny fixture's config.json with the dspark_* keys (the stage count counted from the tensors),
// the drafter's tensors and the shared embedding and head: the same weights, the same block.
TEST(Dspark, OfficialNamingInASafetensorsDirectory) {
  SyntheticSpec spec = dspark_spec();
  spec.layers = 6;
  spec.vocab = 320;  // the tiny fixture's config
  const auto mem = make_synthetic_source(spec);
  const std::string dir = testing::TempDir() + "/hs_dspark_official";
  ASSERT_NO_FATAL_FAILURE(write_official_dir(*mem, mem->dspark_specs(), dir, "\"num_nextn_predict_layers\": 0",
                     "\"num_nextn_predict_layers\": 1, \"dspark_block_size\": 5, \"dspark_noise_token_id\": 319, "
                     "\"dspark_target_layer_ids\": [3, 4, 5], \"dspark_markov_rank\": 8"));
  const auto src = ModelSource::open(dir);
  EXPECT_EQ(src->format(), "official");
  EXPECT_EQ(src->config().dspark.stages, 3);
  ASSERT_TRUE(src->has_dspark());
  EXPECT_FALSE(src->has_mtp());
  ASSERT_TRUE(src->validate_dspark().empty()) << src->validate_dspark().front();
  const DsparkWeights got = load_dspark_weights(*src), want = load_dspark_weights(*mem);
  EXPECT_EQ(got.main_proj.w, want.main_proj.w);
  EXPECT_EQ(got.stages[1].wo_a.w, want.stages[1].wo_a.w);
  EXPECT_EQ(got.stages[2].w2.w, want.stages[2].w2.w);
  EXPECT_EQ(got.stages[0].gate_bias, want.stages[0].gate_bias);
  EXPECT_EQ(got.hc_head.scale, want.hc_head.scale);
  EXPECT_EQ(got.markov_w1.w, want.markov_w1.w);
  EXPECT_EQ(got.confidence.w, want.confidence.w);
  ThreadPool pool(2);
  CpuOps ops(pool);
  const Mat e1 = read_mat(*src, "token_embd"), h1 = read_mat(*src, "output");
  const Mat e2 = read_mat(*mem, "token_embd"), h2 = read_mat(*mem, "output");
  DsparkDrafter a(src->config(), load_dspark_weights(*src), ops, e1, h1, Numerics::Reference);
  DsparkDrafter b(mem->config(), load_dspark_weights(*mem), ops, e2, h2, Numerics::Reference);
  std::vector<float> taps(static_cast<size_t>(6 * a.tap_width()));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = std::cos(0.21f * static_cast<float>(i));
  auto sa = a.new_sequence(), sb = b.new_sequence();
  a.add_context(*sa, 0, taps.data(), 6);
  b.add_context(*sb, 0, taps.data(), 6);
  EXPECT_EQ(a.draft_block(*sa, 11).base, b.draft_block(*sb, 11).base);
  std::filesystem::remove_all(dir);
}

TEST(Dspark, ForwardIsAFunctionOfTheContextAndTheBlock) {
  const auto src = make_synthetic_source(dspark_spec());
  const ModelConfig& c = src->config();
  ThreadPool pool(2);
  CpuOps ops(pool);
  const Mat embed = read_mat(*src, "token_embd"), head = read_mat(*src, "output");
  DsparkDrafter d(c, load_dspark_weights(*src), ops, embed, head, Numerics::Reference);
  const int64_t T = d.tap_width(), V = c.vocab_size, n = 12;
  std::vector<float> taps(static_cast<size_t>(n * T));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = std::sin(0.37f * static_cast<float>(i));
  // All rows at once equals row by row; a ring past the window keeps the last `window` rows.
  auto a = d.new_sequence(), b = d.new_sequence();
  d.add_context(*a, 0, taps.data(), n);
  for (int64_t p = 0; p < n; ++p) d.add_context(*b, p, taps.data() + p * T, 1);
  EXPECT_EQ(a->next, n);
  EXPECT_EQ(a->rows, c.window);
  const DsparkBlock ba = d.draft_block(*a, 17), bb = d.draft_block(*b, 17);
  EXPECT_EQ(ba.base, bb.base);
  ASSERT_EQ(static_cast<int64_t>(ba.base.size()), d.block() * V);
  std::vector<float> l0(static_cast<size_t>(V)), l1(static_cast<size_t>(V));
  float c0 = 0, c1 = 0;
  d.step(ba, 0, 17, l0.data(), &c0);
  d.step(ba, 0, 18, l1.data(), &c1);
  EXPECT_NE(l0, l1) << "the Markov bias depends on the previous token";
  EXPECT_NE(c0, c1);
  EXPECT_TRUE(std::isfinite(c0));
  // Another anchor, and context that does not continue, change the block.
  EXPECT_NE(d.draft_block(*a, 18).base, ba.base);
  d.add_context(*b, 40, taps.data(), 2);  // restarts at 40
  EXPECT_EQ(b->rows, 2);
  EXPECT_NE(d.draft_block(*b, 17).base, ba.base);
}

// Several sequences in one pass (the scheduler's batched context rows and blocks) give what each
// gives alone: the same rings, bit for bit the same blocks (the CPU's ops are row-wise).
TEST(Dspark, SeveralSequencesInOnePassEqualEachAlone) {
  const auto src = make_synthetic_source(dspark_spec());
  const ModelConfig& c = src->config();
  ThreadPool pool(2);
  CpuOps ops(pool);
  const Mat embed = read_mat(*src, "token_embd"), head = read_mat(*src, "output");
  DsparkDrafter d(c, load_dspark_weights(*src), ops, embed, head, Numerics::Model);
  const int64_t T = d.tap_width();
  std::vector<float> taps(static_cast<size_t>(30 * T));
  for (size_t i = 0; i < taps.size(); ++i) taps[i] = std::sin(0.29f * static_cast<float>(i % 1009));
  // Three sequences: a long context, a short one, one that restarts at another position.
  std::vector<std::unique_ptr<DsparkSequence>> one, all;
  for (int k = 0; k < 3; ++k) {
    one.push_back(d.new_sequence());
    all.push_back(d.new_sequence());
  }
  const std::vector<std::array<int64_t, 3>> feeds = {{0, 0, 12}, {1, 0, 3}, {2, 7, 5}};  // seq, p0, rows
  for (const auto& [k, p0, n] : feeds) d.add_context(*one[static_cast<size_t>(k)], p0, taps.data() + k * 5 * T, n);
  std::vector<DsparkContextRows> rows;
  for (const auto& [k, p0, n] : feeds) rows.push_back({all[static_cast<size_t>(k)].get(), p0, taps.data() + k * 5 * T, n});
  d.add_context(rows);
  // Then one more row each, in one pass, at their continuations.
  rows.clear();
  for (int k = 0; k < 3; ++k) {
    d.add_context(*one[static_cast<size_t>(k)], one[static_cast<size_t>(k)]->next, taps.data() + (20 + k) * T, 1);
    rows.push_back({all[static_cast<size_t>(k)].get(), all[static_cast<size_t>(k)]->next, taps.data() + (20 + k) * T, 1});
  }
  d.add_context(rows);
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(one[static_cast<size_t>(k)]->ring, all[static_cast<size_t>(k)]->ring) << "sequence " << k;
    EXPECT_EQ(one[static_cast<size_t>(k)]->ring_pos, all[static_cast<size_t>(k)]->ring_pos) << "sequence " << k;
    EXPECT_EQ(one[static_cast<size_t>(k)]->next, all[static_cast<size_t>(k)]->next) << "sequence " << k;
  }
  const std::vector<int32_t> anchors = {17, 4, 99};
  const std::vector<const DsparkSequence*> seqs = {all[0].get(), all[1].get(), all[2].get()};
  const std::vector<DsparkBlock> blocks = d.draft_blocks(seqs, anchors);
  ASSERT_EQ(blocks.size(), 3u);
  for (int k = 0; k < 3; ++k) {
    const DsparkBlock alone = d.draft_block(*one[static_cast<size_t>(k)], anchors[static_cast<size_t>(k)]);
    EXPECT_EQ(blocks[static_cast<size_t>(k)].p, alone.p) << "block " << k;
    EXPECT_EQ(blocks[static_cast<size_t>(k)].h, alone.h) << "block " << k;
    EXPECT_EQ(blocks[static_cast<size_t>(k)].base, alone.base) << "block " << k;
  }
  EXPECT_NE(blocks[0].base, blocks[1].base);
  // Asking for fewer drafts per block (a shadow probe wants one) gives the leading rows alone.
  const int64_t B = d.block(), V = c.vocab_size, D = c.dim;
  const std::vector<int> want = {2, 1, static_cast<int>(B)};
  const std::vector<DsparkBlock> few = d.draft_blocks(seqs, anchors, want);
  for (size_t k = 0; k < 3; ++k) {
    const int64_t r = want[k];
    ASSERT_EQ(few[k].rows, r);
    ASSERT_EQ(static_cast<int64_t>(few[k].base.size()), r * V);
    EXPECT_TRUE(std::equal(few[k].base.begin(), few[k].base.end(), blocks[k].base.begin())) << "block " << k;
    EXPECT_TRUE(std::equal(few[k].h.begin(), few[k].h.end(), blocks[k].h.begin())) << "block " << k;
    EXPECT_EQ(static_cast<int64_t>(few[k].h.size()), r * D);
  }
  std::vector<float> lg(static_cast<size_t>(V));
  EXPECT_THROW(d.step(few[1], 1, 4, lg.data(), nullptr), Error) << "a draft past the rows asked for";
  // Several blocks' drafts in one pass (a step's shadow probes) equal step() on each.
  const std::vector<const DsparkBlock*> bp = {&blocks[0], &blocks[1], &blocks[2]};
  const std::vector<int> js = {0, 3, 1};
  const std::vector<int32_t> prevs = {17, 8, 60};
  std::vector<float> many(static_cast<size_t>(3 * V));
  d.steps(bp, js, prevs, many.data());
  for (size_t k = 0; k < 3; ++k) {
    d.step(blocks[k], js[k], prevs[k], lg.data(), nullptr);
    EXPECT_TRUE(std::equal(lg.begin(), lg.end(), many.begin() + static_cast<int64_t>(k) * V)) << "block " << k;
  }
}

// The taps (StepItem::taps) are the mean over the hc streams of the HC state after each target
// layer: the next layer's input (a layer observer sees it) or, after the last layer, the final
// state (StepItem::hidden). Over a split whose shards each hold some of the target layers (3 | 4 5).
TEST(Dspark, TapsAreTheStreamMeansAfterTheTargetLayers) {
  EngineOptions o;
  o.draft = "dspark";
  o.devices = {"cpu", "cpu"};
  o.layer_split = {4, 2};
  o.threads = 2;
  o.numerics = Numerics::Reference;
  Engine e(make_synthetic_source(dspark_spec()), o);
  const ModelConfig& c = e.config();
  const int64_t D = c.dim, hc = c.hc_mult, n = 5;
  const std::vector<int>& tl = e.dspark()->dspark().target_layers;
  const int64_t T = static_cast<int64_t>(tl.size());
  ASSERT_EQ(tl, (std::vector<int>{3, 4, 5}));
  std::mutex mu;
  std::vector<std::vector<float>> in(static_cast<size_t>(c.n_layers));  // each layer's input
  for (int s = 0; s < 2; ++s)
    e.shard(s).set_layer_observer([&](int layer, const float* X, int64_t rows) {
      std::lock_guard<std::mutex> l(mu);
      in[static_cast<size_t>(layer)].assign(X, X + rows * hc * D);
    });
  auto seq = e.new_sequence();
  const std::vector<int32_t> toks = {5, 9, 13, 2, 40};
  std::vector<float> logits(static_cast<size_t>(n * c.vocab_size)), hidden(static_cast<size_t>(n * hc * D)),
      taps(static_cast<size_t>(n * T * D), std::nanf(""));
  StepItem it{seq.get(), toks.data(), n, logits.data(), true};
  it.hidden = hidden.data();
  it.taps = taps.data();
  e.step_batch({&it, 1});
  for (int64_t t = 0; t < T; ++t) {
    const int L = tl[static_cast<size_t>(t)];
    const std::vector<float>& after = L + 1 < c.n_layers ? in[static_cast<size_t>(L + 1)] : hidden;
    ASSERT_EQ(static_cast<int64_t>(after.size()), n * hc * D) << "layer " << L;
    int64_t wrong = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t d = 0; d < D; ++d) {
        double sum = 0;
        for (int64_t j = 0; j < hc; ++j) sum += after[static_cast<size_t>((r * hc + j) * D + d)];
        const float want = static_cast<float>(sum / static_cast<double>(hc));
        wrong += !(taps[static_cast<size_t>((r * T + t) * D + d)] == want);
      }
    EXPECT_EQ(wrong, 0) << "tap of layer " << L << ": " << wrong << " of " << n * D << " values differ";
  }
}

// The outside oracle: tests/data/dspark-tiny, made by scripts/gen_dspark_fixtures.py (DeepSpec's
// DSpark draft with DeepSeek-V4 blocks in PyTorch, float64, random weights at the tiny fixture's
// widths). For each case (context inside and past the window) the draft logits (Markov bias on
// the reference's own greedy chain), the confidence logits and the hc_head rows must match within
// 1e-5 (relative to the largest expected magnitude, at least 1) under reference numerics on the
// CPU, the context fed all at once and row by row. Skips until the fixture exists
// (HS_DSPARK_FIXTURE_DIR overrides where it is looked for).
std::string fixture_dir() {
  const char* env = std::getenv("HS_DSPARK_FIXTURE_DIR");
  return env ? env : std::string(HS_TEST_DATA) + "/dspark-tiny";
}

TEST(DsparkFixtures, DraftLogitsMatchTheReference) {
  const std::string dir = fixture_dir();
  if (!std::filesystem::exists(dir + "/expected.safetensors") || !std::filesystem::exists(dir + "/model.safetensors"))
    GTEST_SKIP() << "no DSpark fixture at " << dir << " yet: run `python3 scripts/gen_dspark_fixtures.py tests/data` "
                 << "where torch is installed (the GPU machine), then commit tests/data/dspark-tiny";
  const auto src = ModelSource::open(dir);
  const ModelConfig& c = src->config();
  ASSERT_TRUE(src->has_dspark());
  EXPECT_FALSE(src->has_mtp());
  EXPECT_EQ(c.dspark.stages, 3);
  ThreadPool pool(2);
  CpuOps ops(pool);
  const Mat embed = read_mat(*src, "token_embd"), head = read_mat(*src, "output");
  DsparkDrafter d(c, load_dspark_weights(*src), ops, embed, head, Numerics::Reference);
  const st::File ex(dir + "/expected.safetensors");
  const std::vector<float> taps = test::tensor_values<float>(ex, "taps");
  const int64_t T = d.tap_width(), V = c.vocab_size, D = c.dim, B = d.block();
  constexpr double kTol = 1e-5;
  for (int k = 0; ex.tensors().count("anchor_" + std::to_string(k)); ++k) {
    const std::string K = std::to_string(k);
    const int32_t anchor = test::tensor_values<int32_t>(ex, "anchor_" + K).at(0);
    const auto drafts = test::tensor_values<int32_t>(ex, "tokens_" + K);
    const auto logits = test::tensor_values<float>(ex, "logits_" + K), conf = test::tensor_values<float>(ex, "confidence_" + K),
               h = test::tensor_values<float>(ex, "h_" + K);
    ASSERT_EQ(static_cast<int64_t>(logits.size()), B * V) << "logits of case " << k << " are not [block, vocab]";
    const int64_t rows = test::tensor_values<int32_t>(ex, "context_" + K).at(0);
    ASSERT_LE(rows * T, static_cast<int64_t>(taps.size()));
    for (bool one_by_one : {false, true}) {
      auto s = d.new_sequence();
      if (one_by_one)
        for (int64_t p = 0; p < rows; ++p) d.add_context(*s, p, taps.data() + p * T, 1);
      else
        d.add_context(*s, 0, taps.data(), rows);
      const DsparkBlock b = d.draft_block(*s, anchor);
      EXPECT_LE(test::max_rel(b.h.data(), h.data(), static_cast<size_t>(B * D)), kTol) << "h, case " << k;
      std::vector<float> lg(static_cast<size_t>(V));
      for (int64_t j = 0; j < B; ++j) {
        float cf = 0;
        d.step(b, static_cast<int>(j), j == 0 ? anchor : drafts[static_cast<size_t>(j - 1)], lg.data(), &cf);
        EXPECT_LE(test::max_rel(lg.data(), logits.data() + j * V, static_cast<size_t>(V)), kTol)
            << "logits, case " << k << ", draft " << j << (one_by_one ? ", context row by row" : "");
        EXPECT_LE(test::max_rel(&cf, conf.data() + j, 1), kTol) << "confidence, case " << k << ", draft " << j;
        EXPECT_EQ(std::max_element(lg.begin(), lg.end()) - lg.begin(), drafts[static_cast<size_t>(j)])
            << "greedy draft, case " << k << ", draft " << j;
      }
    }
  }
}

}  // namespace
}  // namespace hs
