#include "model/dspark_tensors.h"

#include "util/error.h"

namespace hs {

namespace {

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// One row of the name table: the head tensors of the last stage (L), and stage 0's fusion.
struct HeadName {
  const char* canonical;  // after "dspark."
  const char* official;   // after "mtp.<stage>."
  const char* lucebox;    // the Lucebox GGUF name
  bool last_stage;        // on stage L (else stage 0)
};
constexpr HeadName kHead[] = {
    {"main_proj", "main_proj.weight", "dflash.fc.weight", false},
    {"main_norm", "main_norm.weight", "dflash.hidden_norm.weight", false},
    {"norm", "norm.weight", "output_norm.weight", true},
    {"hc_head_fn", "hc_head_fn", "output_hc_fn.weight", true},
    {"hc_head_base", "hc_head_base", "output_hc_base.weight", true},
    {"hc_head_scale", "hc_head_scale", "output_hc_scale.weight", true},
    {"markov_w1", "markov_head.markov_w1.weight", "dflash.dspark.markov.w1.weight", true},
    {"markov_w2", "markov_head.markov_w2.weight", "dflash.dspark.markov.w2.weight", true},
    {"confidence", "confidence_head.proj.weight", "dflash.dspark.confidence.weight", true},
    {"confidence_bias", "confidence_head.proj.bias", "dflash.dspark.confidence.bias", true},
};

const HeadName* head_name(const std::string& local) {
  for (const HeadName& h : kHead)
    if (local == h.canonical) return &h;
  return nullptr;
}

}  // namespace

std::string dspark_block_name(int stage, const std::string& layer_local) {
  return cat("dspark.", stage, ".", layer_local);
}

std::vector<TensorSpec> dspark_tensor_specs(const ModelConfig& c, int stages, bool with_bias) {
  HS_CHECK(stages >= 1, "internal: a DSpark drafter needs at least one stage");
  const int64_t D = c.dim, H = c.hc_mult, V = c.vocab_size, R = c.dspark.markov_rank;
  const auto T = static_cast<int64_t>(c.dspark.target_layers.size());
  const int last = stages - 1;
  using R_ = TensorRole;
  auto off = [&](const char* canonical) {
    const HeadName* h = head_name(canonical);
    return cat("mtp.", h->last_stage ? last : 0, ".", h->official);
  };
  std::vector<TensorSpec> s;
  s.push_back({"dspark.main_proj", {D, T * D}, R_::Matrix, "", 0, off("main_proj")});
  s.push_back({"dspark.main_norm", {D}, R_::Vector, "", 0, off("main_norm")});
  const ModelConfig m = c.with_dspark_layers(stages);
  for (int st = 0; st < stages; ++st) {
    const int l = c.n_layers + st;
    const std::string blk = cat("blk.", l, "."), lay = cat("layers.", l, ".");
    for (TensorSpec t : layer_tensor_specs(m, l)) {
      HS_CHECK(starts(t.name, blk) && starts(t.official, lay), "internal: layer tensor ", t.name, " / ", t.official);
      t.name = dspark_block_name(st, t.name.substr(blk.size()));
      t.official = cat("mtp.", st, ".", t.official.substr(lay.size()));
      t.hf.clear();
      s.push_back(std::move(t));
    }
  }
  s.push_back({"dspark.norm", {D}, R_::Vector, "", 0, off("norm")});
  s.push_back({"dspark.hc_head_fn", {H, H * D}, R_::HcFn, "", 0, off("hc_head_fn")});
  s.push_back({"dspark.hc_head_base", {H}, R_::Vector, "", 0, off("hc_head_base")});
  s.push_back({"dspark.hc_head_scale", {1}, R_::Vector, "", 0, off("hc_head_scale")});
  // markov_w1 is a table (row = token), read whole in f32: a Vector-role tensor of two dims.
  s.push_back({"dspark.markov_w1", {V, R}, R_::Matrix, "", 0, off("markov_w1")});
  s.push_back({"dspark.markov_w2", {V, R}, R_::Matrix, "", 0, off("markov_w2")});
  s.push_back({"dspark.confidence", {1, D + R}, R_::Matrix, "", 0, off("confidence")});
  if (with_bias) s.push_back({"dspark.confidence_bias", {1}, R_::Vector, "", 0, off("confidence_bias")});
  return s;
}

std::vector<std::string> dspark_gguf_names(const std::string& canonical, int stages, bool lucebox) {
  if (!starts(canonical, "dspark.")) return {canonical};
  const std::string local = canonical.substr(7);
  if (const HeadName* h = head_name(local)) {
    if (lucebox) return {h->lucebox};
    return {cat("mtp.", h->last_stage ? stages - 1 : 0, ".", h->official)};
  }
  // "dspark.<s>.<x>": a stage's block tensor.
  const size_t dot = local.find('.');
  HS_CHECK(dot != std::string::npos && dot > 0, "internal: DSpark tensor name ", canonical);
  const std::string st = local.substr(0, dot), x = local.substr(dot + 1);
  return {lucebox ? cat("blk.", st, ".", x) : cat("mtp.", st, ".", x)};
}

}  // namespace hs
