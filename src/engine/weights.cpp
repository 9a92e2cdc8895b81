#include "engine/weights.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "format/ggml_types.h"
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

// Layer l of config c, its tensors named g + the layer-local name ("blk.3.", or "mtp." for the
// MTP block, which is layer n_layers of c.with_mtp_layer()).
LayerWeights load_layer(const Loader& ld, const ModelConfig& c, int l, const std::string& g) {
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
  if (c.is_hash_layer(l)) L.tid2eid = ld.src.read_i32(ld.spec(g + "ffn_gate_tid2eid"));
  else L.gate_bias = ld.vec(g + "exp_probs_b");
  L.w1 = ld.mat(g + "ffn_gate_exps");
  L.w3 = ld.mat(g + "ffn_up_exps");
  L.w2 = ld.mat(g + "ffn_down_exps");
  L.sh_w1 = ld.mat(g + "ffn_gate_shexp");
  L.sh_w3 = ld.mat(g + "ffn_up_shexp");
  L.sh_w2 = ld.mat(g + "ffn_down_shexp");
  return L;
}

void fail_problems(const ModelSource& src, const std::vector<std::string>& problems) {
  if (problems.empty()) return;
  std::string msg = src.path() + ": " + std::to_string(problems.size()) + " tensor problem(s):";
  for (size_t i = 0; i < problems.size() && i < 8; ++i) msg += "\n  " + problems[i];
  if (problems.size() > 8) msg += "\n  ...";
  fail(msg);
}

// Columns [c0, c0 + n) of the fused eh_proj [D, 2D]: the stored rows cut in two when the
// type's blocks allow it (a backend keeps its stored form), else f32 values.
Mat eh_half(const Loader& ld, const TensorSpec& eh, int64_t c0, int64_t n) {
  Mat m;
  m.rows = eh.shape[0];
  m.cols = n;
  const int64_t cols = eh.shape[1];
  if (ld.form == WeightForm::Native) {
    const NativeTensor full = ld.src.native(eh);
    if (full.kind == NativeTensor::Kind::Gguf) {
      const int64_t blk = ggml_type_info(full.type).block_elems;
      if (c0 % blk == 0 && n % blk == 0) {
        const int64_t row = ggml_row_bytes(full.type, cols), off = ggml_row_bytes(full.type, c0);
        const int64_t half = ggml_row_bytes(full.type, n);
        auto bytes = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(half * m.rows));
        for (int64_t r = 0; r < m.rows; ++r)
          std::memcpy(bytes->data() + r * half, full.data + r * row + off, static_cast<size_t>(half));
        m.native.kind = NativeTensor::Kind::Gguf;
        m.native.type = full.type;
        m.native.data = bytes->data();
        m.native.nbytes = bytes->size();
        m.native.owned = std::move(bytes);
      }
    }
  }
  if (!m.native) {
    const std::vector<float> all = ld.src.read_f32(eh);
    m.w.resize(static_cast<size_t>(m.rows * n));
    for (int64_t r = 0; r < m.rows; ++r)
      std::copy_n(all.data() + r * cols + c0, n, m.w.data() + r * n);
  }
  if (ld.adopt) ld.adopt(m);
  return m;
}

}  // namespace

MtpWeights load_mtp_weights(const ModelSource& src, WeightForm form, const AdoptWeight& adopt) {
  fail_problems(src, src.validate_mtp());
  Loader ld{src, form, adopt, {}};
  bool fused = false;
  for (auto& s : src.mtp_specs()) {
    fused |= s.name == "mtp.eh_proj";
    ld.specs.emplace(s.name, s);
  }
  const ModelConfig& c = src.config();
  MtpWeights w;
  if (fused) {  // [e; h]: the first D input columns act on the embedding (DeepSeek-V3's cat order)
    w.e_proj = eh_half(ld, ld.spec("mtp.eh_proj"), 0, c.dim);
    w.h_proj = eh_half(ld, ld.spec("mtp.eh_proj"), c.dim, c.dim);
  } else {
    w.e_proj = ld.mat("mtp.e_proj");
    w.h_proj = ld.mat("mtp.h_proj");
  }
  w.enorm = ld.vec("mtp.enorm");
  w.hnorm = ld.vec("mtp.hnorm");
  w.norm = ld.vec("mtp.norm");
  w.hc_head = ld.hc("mtp.hc_head");
  w.block = load_layer(ld, c.with_mtp_layer(), c.n_layers, "mtp.");
  return w;
}

DsparkWeights load_dspark_weights(const ModelSource& src, WeightForm form, const AdoptWeight& adopt) {
  fail_problems(src, src.validate_dspark());
  Loader ld{src, form, adopt, {}};
  bool bias = false;
  for (auto& s : src.dspark_specs()) {
    bias |= s.name == "dspark.confidence_bias";
    ld.specs.emplace(s.name, s);
  }
  const ModelConfig& c = src.config();
  const int S = c.dspark.stages;
  const ModelConfig m = c.with_dspark_layers(S);
  DsparkWeights w;
  w.main_proj = ld.mat("dspark.main_proj");
  w.main_norm = ld.vec("dspark.main_norm");
  for (int s = 0; s < S; ++s) w.stages.push_back(load_layer(ld, m, c.n_layers + s, cat("dspark.", s, ".")));
  w.norm = ld.vec("dspark.norm");
  w.hc_head = ld.hc("dspark.hc_head");
  w.markov_w1 = ld.mat("dspark.markov_w1");
  w.markov_w2 = ld.mat("dspark.markov_w2");
  w.confidence = ld.mat("dspark.confidence");
  if (bias) w.confidence_bias = ld.vec("dspark.confidence_bias").at(0);
  return w;
}

ShardWeights load_shard_weights(const ModelSource& src, int begin, int end, bool with_embed, bool with_head,
                                WeightForm form, const AdoptWeight& adopt) {
  const ModelConfig& c = src.config();
  HS_CHECK(begin >= 0 && begin < end && end <= c.n_layers, "layer range [", begin, ", ", end,
           ") is not inside [0, ", c.n_layers, ")");
  fail_problems(src, src.validate(begin, end, with_embed, with_head));
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
  for (int l = begin; l < end; ++l) w.layers.push_back(load_layer(ld, c, l, "blk." + std::to_string(l) + "."));
  return w;
}

}  // namespace hs
