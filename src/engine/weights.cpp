#include "engine/weights.h"

#include <map>

#include "util/error.h"

namespace hs {

namespace {

struct Loader {
  const ModelSource& src;
  WeightForm form;
  const AdoptWeight& adopt;
  std::map<std::string, TensorSpec> specs;

  const TensorSpec& spec(const std::string& name) const {
    auto it = specs.find(name);
    HS_CHECK(it != specs.end(), "internal: no tensor spec ", name);
    return it->second;
  }
  std::vector<float> vec(const std::string& name) const { return src.read_f32(spec(name)); }
  // A matrix, or an expert stack [E * rows, cols], in the form asked for, handed to `adopt`.
  Mat mat(const std::string& name) const {
    const auto& s = spec(name);
    Mat m;
    m.rows = s.role == TensorRole::Experts ? s.shape[0] * s.shape[1] : s.shape[0];
    m.cols = s.shape.back();
    if (form == WeightForm::Native) m.native = src.native(s);
    if (!m.native) m.w = src.read_f32(s);
    if (adopt) {
      try {
        adopt(m);
      } catch (const Error& e) {  // e.g. a block type without a device decoder
        fail(src.path(), ": tensor ", name, " (", m.rows, " x ", m.cols, "): ", e.what());
      }
    }
    return m;
  }
  HcWeights hc(const std::string& prefix) const { return {vec(prefix + "_fn"), vec(prefix + "_base"), vec(prefix + "_scale")}; }
};

}  // namespace

ShardWeights load_shard_weights(const ModelSource& src, int begin, int end, bool with_embed, bool with_head,
                                WeightForm form, const AdoptWeight& adopt) {
  const ModelConfig& c = src.config();
  HS_CHECK(begin >= 0 && begin < end && end <= c.n_layers, "layer range [", begin, ", ", end,
           ") is not inside [0, ", c.n_layers, ")");
  auto problems = src.validate(begin, end, with_embed, with_head);
  if (!problems.empty()) {
    std::string msg = src.path() + ": " + std::to_string(problems.size()) + " tensor problem(s):";
    for (size_t i = 0; i < problems.size() && i < 8; ++i) msg += "\n  " + problems[i];
    if (problems.size() > 8) msg += "\n  ...";
    fail(msg);
  }
  Loader ld{src, form, adopt, {}};
  for (auto& s : model_tensor_specs(c, begin, end, with_embed, with_head)) ld.specs.emplace(s.name, s);

  ShardWeights w;
  w.begin = begin;
  w.end = end;
  w.has_embed = with_embed;
  w.has_head = with_head;
  if (with_embed) w.embed = ld.mat("token_embd");
  if (with_head) {
    w.head = ld.mat("output");
    w.norm = ld.vec("output_norm");
    w.hc_head = ld.hc("output_hc");
  }
  for (int l = begin; l < end; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".";
    LayerWeights L;
    L.layer = l;
    L.hc_attn = ld.hc(g + "hc_attn");
    L.hc_ffn = ld.hc(g + "hc_ffn");
    L.attn_norm = ld.vec(g + "attn_norm");
    L.ffn_norm = ld.vec(g + "ffn_norm");
    L.wq_a = ld.mat(g + "attn_q_a");
    L.q_norm = ld.vec(g + "attn_q_a_norm");
    L.wq_b = ld.mat(g + "attn_q_b");
    L.wkv = ld.mat(g + "attn_kv");
    L.kv_norm = ld.vec(g + "attn_kv_a_norm");
    L.wo_a = ld.mat(g + "attn_output_a");
    L.wo_b = ld.mat(g + "attn_output_b");
    L.sinks = ld.vec(g + "attn_sinks");
    const int ratio = c.ratio(l);
    if (ratio > 0) {
      L.has_compressor = true;
      L.comp = CompressorWeights{ld.mat(g + "attn_compressor_kv"), ld.mat(g + "attn_compressor_gate"),
                                 ld.vec(g + "attn_compressor_ape"), ld.vec(g + "attn_compressor_norm"),
                                 ratio, c.compress_coff(l), c.head_dim};
      if (ratio == c.csa_ratio) {
        L.has_indexer = true;
        L.idx_wq_b = ld.mat(g + "indexer.attn_q_b");
        L.idx_proj = ld.mat(g + "indexer.proj");
        L.idx_comp = CompressorWeights{ld.mat(g + "indexer_compressor_kv"), ld.mat(g + "indexer_compressor_gate"),
                                       ld.vec(g + "indexer_compressor_ape"), ld.vec(g + "indexer_compressor_norm"),
                                       ratio, 2, c.index_head_dim};
      }
    }
    L.gate = ld.mat(g + "ffn_gate_inp");
    if (c.is_hash_layer(l)) L.tid2eid = src.read_i32(ld.spec(g + "ffn_gate_tid2eid"));
    else L.gate_bias = ld.vec(g + "exp_probs_b");
    L.w1 = ld.mat(g + "ffn_gate_exps");
    L.w3 = ld.mat(g + "ffn_up_exps");
    L.w2 = ld.mat(g + "ffn_down_exps");
    L.sh_w1 = ld.mat(g + "ffn_gate_shexp");
    L.sh_w3 = ld.mat(g + "ffn_up_shexp");
    L.sh_w2 = ld.mat(g + "ffn_down_shexp");
    w.layers.push_back(std::move(L));
  }
  return w;
}

}  // namespace hs
