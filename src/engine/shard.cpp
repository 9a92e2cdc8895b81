#include "engine/shard.h"

#include "engine/attn_parts.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ops.h"
#include "util/error.h"

namespace hs {

Shard::Shard(const ModelConfig& config, ShardWeights weights, Ops& ops, Numerics numerics,
             const StatePoolOptions& state, bool make_pool)
    : config_(config), w_(std::move(weights)), ops_(ops), numerics_(numerics), graphs_(ops) {
  rope_main_ = {config_.rope_dim, cpu::rope_inv_freq(config_.rope_dim, config_.rope_theta)};
  rope_compress_ = {config_.rope_dim,
                    cpu::rope_inv_freq_yarn(config_.rope_dim, config_.compress_rope_theta, config_.yarn.factor,
                                            static_cast<double>(config_.yarn.original_ctx), config_.yarn.beta_fast,
                                            config_.yarn.beta_slow)};
  if (make_pool) init_state(state);
}

void Shard::init_state(const StatePoolOptions& state) {
  HS_CHECK(!pool_, "internal: shard [", w_.begin, ", ", w_.end, ") already has its state pool");
  StatePoolOptions o = state;
  o.packed = model();  // model numerics keep KV rows and keys in their FP8 / FP4 forms
  pool_ = std::make_unique<StatePool>(config_, w_.begin, w_.end, ops_, o);
}

Shard::~Shard() = default;

std::unique_ptr<SequenceState> Shard::new_sequence() { return pool().acquire(); }

StatePool& Shard::pool() const {
  HS_CHECK(pool_, "internal: shard [", w_.begin, ", ", w_.end, ") has no state pool yet");
  return *pool_;
}

// The rows of one forward_batch call. Sequence i owns rows [offset[i], offset[i] + n_i) of
// every activation; its first position is p0[i]. Rows [n_real, n) are padding (StepRows).
struct Shard::Batch {
  std::span<const SeqRows> seqs;
  std::vector<int64_t> offset, p0;
  std::vector<int64_t> pos;     // the position of every row (RoPE)
  std::vector<int32_t> tokens;  // the token of every row (hash routing)
  std::vector<int32_t> slot, row0, row_end;
  int64_t n = 0, n_real = 0;    // rows, rows of sequences
  StepRows rows() const {
    int64_t end = 0;
    for (size_t i = 0; i < seqs.size(); ++i) end = std::max(end, p0[i] + seqs[i].n);
    bool decode = true;
    for (const SeqRows& s : seqs) decode = decode && s.n == 1;
    return {n, pos.data(), tokens.data(), slot.data(), row0.data(), row_end.data(), decode, end};
  }
};

std::string batch_label(size_t i, size_t count) {
  return count == 1 ? std::string() : cat("sequence #", i, " of the batch: ");
}

void Shard::check_tokens(const int32_t* tokens, int64_t n, int64_t p0, const std::string& what) const {
  for (int64_t t = 0; t < n; ++t)
    HS_CHECK(tokens[t] >= 0 && tokens[t] < config_.vocab_size, what, "token id ", tokens[t], " at position ", p0 + t,
             " is outside the vocabulary [0, ", config_.vocab_size, ")");
}

void Shard::check_state(const SequenceState& seq, const std::string& what) const {
  HS_CHECK(&seq.pool() == pool_.get(), what, "sequence state was made for layers starting at ", seq.layer_begin(), " (",
           seq.n_layers(), " layers)", seq.layer_begin() == w_.begin && seq.n_layers() == w_.end - w_.begin
                                           ? " by another engine"
                                           : "",
           ", not for this shard [", w_.begin, ", ", w_.end, ")");
}

void Shard::embed(const int32_t* tokens, int64_t n, float* X) {
  HS_CHECK(w_.has_embed, "internal: shard [", w_.begin, ", ", w_.end, ") does not own the embedding");
  check_tokens(tokens, n, 0);
  ops_.embed(w_.embed, tokens, n, config_.hc_mult, X);
  bf16(X, n * config_.hc_mult * config_.dim);
}

// Attention sub-layer (ds4-model-spec.md §5). Under model numerics the comments' BF16/FP8
// points follow the precision map of §9; under reference numerics everything stays f32.
// Every projection runs once over the batch's rows; the compressors, the indexer's top-k,
// attention and the ring run per sequence on its rows (they read and write its state).
void Shard::attention(const LayerWeights& L, const Batch& b, const float* x_in, const float* x, float* y) {
  const ModelConfig& c = config_;
  const int64_t n = b.n, H = c.n_heads, hd = c.head_dim;
  const RopeTable& rope = c.ratio(L.layer) == 0 ? rope_main_ : rope_compress_;
  const int64_t* pos = b.pos.data();
  // FP8 linears read x (x_in's FP8 round trip under model numerics); the BF16/F32 ones
  // (compressor, indexer weights) read x_in.
  const AttnCtx a_ctx{ops_, c, L, rope, pos, n, model()};
  // Query: low-rank with q_norm (c_q is kept for the indexer), per-head RMS, RoPE on the tail.
  // The single shared K = V row of each token from the same x (wq_a and wkv in one Ops::matmuls).
  float* q = ops_.alloc(n * H * hd);
  float* kv = ops_.alloc(n * hd);
  const float* cq_in = attn_query_kv(a_ctx, x, q, kv);
  const int li = L.layer - w_.begin;
  // Into the pool in its row form (under model numerics that is the FP8 round trip), then this
  // step's rows as attention reads them.
  ops_.kv_store(*pool_, li, kv);
  if (model()) ops_.kv_fp8_sim(kv, n, hd, hd - c.rope_dim);

  // The compressors' projections, and the indexer's queries and head weights.
  const int64_t width = L.comp.coff * hd, ID = c.index_head_dim, IH = c.index_n_heads, K = c.index_topk;
  float *a = nullptr, *g = nullptr, *ia = nullptr, *ig = nullptr, *iq = nullptr, *iw = nullptr;
  int32_t* selected = nullptr;
  // The projections of x_in (compressor, indexer compressor, indexer head weights) in one
  // Ops::matmuls; the indexer's queries come from c_q.
  const Mat* mats[5];
  float* outs[5];
  int nm = 0;
  if (L.has_compressor) {
    a = ops_.alloc(n * width);
    g = ops_.alloc(n * width);
    mats[nm] = &L.comp.wkv, outs[nm++] = a;
    mats[nm] = &L.comp.wgate, outs[nm++] = g;
  }
  if (L.has_indexer) {
    ia = ops_.alloc(n * 2 * ID);
    ig = ops_.alloc(n * 2 * ID);
    iw = ops_.alloc(n * IH);
    mats[nm] = &L.idx_comp.wkv, outs[nm++] = ia;
    mats[nm] = &L.idx_comp.wgate, outs[nm++] = ig;
    mats[nm] = &L.idx_proj, outs[nm++] = iw;
  }
  if (nm > 0) ops_.matmuls(mats, outs, nm, x_in, n);
  if (L.has_indexer) {
    iq = ops_.alloc(n * IH * ID);
    ops_.matmul(L.idx_wq_b, cq_in, n, iq);
    ops_.rope_bf16(iq, n, IH, ID, rope, pos, +1, rounding(true, false));
    if (model()) ops_.indexer_fp4_sim(iq, n * IH, ID);
    ops_.scale_bf16(iw, n * IH, 1.0f / std::sqrt(static_cast<float>(IH)), rounding(true, false));
    selected = reinterpret_cast<int32_t*>(ops_.alloc(n * K));
  }
  float* o = ops_.alloc(n * H * hd);
  if (L.has_compressor) ops_.compressor_update(*pool_, li, false, L.comp, a, g, c.norm_eps, rope, numerics_);
  if (L.has_indexer) {
    ops_.compressor_update(*pool_, li, true, L.idx_comp, ia, ig, c.norm_eps, rope, numerics_);
    ops_.indexer_topk(*pool_, li, iq, iw, static_cast<int>(IH), ID, static_cast<int>(K), selected);
    if (indexer_tap_) {
      // int32 indices travel as raw 4-byte words through the float transfers.
      std::vector<int32_t> sel(static_cast<size_t>(n * K));
      ops_.download(reinterpret_cast<float*>(sel.data()), reinterpret_cast<const float*>(selected), n * K);
      indexer_tap_(L.layer, std::span<const int64_t>(pos, static_cast<size_t>(b.n_real)), sel, static_cast<int>(K));
      ops_.upload(reinterpret_cast<float*>(selected), reinterpret_cast<const float*>(sel.data()), n * K);
    }
  }
  ops_.attention(*pool_, li, q, c, kv, L.has_compressor, selected, static_cast<int>(K), L.sinks, o);
  // Undo the RoPE that V (= K) carried, then the grouped low-rank output projection.
  attn_output(a_ctx, o, y);
}

void Shard::forward_batch(std::span<const SeqRows> seqs, float* X, int64_t pad) {
  HS_CHECK(!seqs.empty(), "shard [", w_.begin, ", ", w_.end, "): a batch needs at least one sequence");
  HS_CHECK(pad >= 0, "internal: negative padding");
  // Everything is checked before any state changes, so a refused batch leaves every sequence as it was.
  Batch b;
  b.seqs = seqs;
  int64_t need_cmp = 0, need_swa = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const SeqRows& s = seqs[i];
    const std::string what = batch_label(i, seqs.size());
    HS_CHECK(s.state != nullptr, what, "no sequence state given");
    check_state(*s.state, what);
    HS_CHECK(s.n >= 1, what, "shard [", w_.begin, ", ", w_.end, "): ", s.n,
             " tokens given, a sequence of a batch needs at least one");
    for (size_t j = 0; j < i; ++j)
      HS_CHECK(seqs[j].state != s.state, "sequence #", j, " and #", i,
               " of the batch are the same sequence: each may appear once per step");
    const int64_t p0 = s.state->n_past();
    check_tokens(s.tokens, s.n, p0, what);
    HS_CHECK(p0 + s.n <= pool_->layout().max_context, what, "positions up to ", p0 + s.n,
             " are past the context this engine was made for (", pool_->layout().max_context, " tokens)");
    const auto [c, w] = pool_->blocks_needed(*s.state, s.n);
    need_cmp += c;
    need_swa += w;
    b.offset.push_back(b.n);
    b.p0.push_back(p0);
    for (int64_t t = 0; t < s.n; ++t) {
      b.pos.push_back(p0 + t);
      b.slot.push_back(s.state->slot());
      b.row0.push_back(static_cast<int32_t>(b.n));
      b.row_end.push_back(static_cast<int32_t>(b.n + s.n));
    }
    b.tokens.insert(b.tokens.end(), s.tokens, s.tokens + s.n);
    b.n += s.n;
  }
  const StatePoolStats ps = pool_->stats();
  if (need_cmp > ps.cmp_total - ps.cmp_used || need_swa > ps.swa_total - ps.swa_used)
    throw StatePoolFull(cat("shard [", w_.begin, ", ", w_.end, "): the state pool is full: this step needs ", need_cmp,
                            " more pages (", ps.cmp_total - ps.cmp_used, " of ", ps.cmp_total, " free) and ", need_swa,
                            " SWA pages (", ps.swa_total - ps.swa_used, " of ", ps.swa_total, " free)"));
  for (const SeqRows& s : seqs)
    HS_CHECK(pool_->reserve(*s.state, s.n), "internal: state pool reservation failed after the check");
  b.n_real = b.n;
  for (int64_t t = 0; t < pad; ++t) {  // padding rows: token 0 at position 0, no sequence
    b.pos.push_back(0);
    b.slot.push_back(-1);
    b.row0.push_back(static_cast<int32_t>(b.n));
    b.row_end.push_back(static_cast<int32_t>(b.n + 1));
    b.tokens.push_back(0);
    ++b.n;
  }
  pool_->sync_tables();
  const StepRows rows = b.rows();
  ops_.begin_rows(*pool_, rows);
  struct EndRows {
    Ops& ops;
    ~EndRows() { ops.end_rows(); }
  } end{ops_};
  // A decode step (one row per sequence) may run as a captured graph (step_graphs.h).
  bool done = false;
  if (!tap_layers_.empty()) reserve_taps(b.n);
  const float* taps = tap_layers_.empty() ? nullptr : this->taps();
  if (rows.decode && !observer_ && !indexer_tap_) done = graphs_.run(b.n, X, taps, [&] { layers(b, X); });
  if (!done) layers(b, X);
  for (const SeqRows& s : seqs) pool_->advance(*s.state, s.n);
}

void Shard::layers(const Batch& b, float* X) {
  const ModelConfig& c = config_;
  const int64_t D = c.dim, hc = c.hc_mult, n = b.n;
  const size_t outer = ops_.mark();
  // A layer's attention inputs: its hc_pre's u, post, comb and the norm's xn (and, under model
  // numerics, the FP8 linears' input xq from the norm's launch), made at the layer's start or by
  // the previous layer's hand-over (Ops::hc_post_pre).
  float* u = ops_.alloc(n * D);
  float* post = ops_.alloc(n * hc);
  float* comb = ops_.alloc(n * hc * hc);
  float* xn = ops_.alloc(n * D);
  float* xq = model() ? ops_.alloc(n * D) : nullptr;
  const size_t mark = ops_.mark();
  bool handed = false;
  for (size_t li = 0; li < w_.layers.size(); ++li) {
    const LayerWeights& L = w_.layers[li];
    if (observer_) observer_(L.layer, X, n);
    float* y = ops_.alloc(n * D);
    if (!handed) {
      ops_.hc_pre(L.hc_attn, c, X, n, u, post, comb);
      if (xq) ops_.rmsnorm_bf16_fp8(u, L.attn_norm, n, c.norm_eps, xn, xq, rounding(true, true));
      else norm_bf16(u, L.attn_norm, n, xn);
    }
    attention(L, b, xn, xq ? xq : xn, y);
    const AttnCtx a{ops_, c, L, rope_main_, b.pos.data(), n, model()};  // (the FFN half uses no RoPE)
    ffn_sublayer(a, b.tokens.data(), X, u, post, comb, xn, y);
    // The FFN's hc_post, with the next layer's hc_pre and attention norm in the same hand-over
    // (an observer sees X before each layer: there the layers stay apart).
    handed = li + 1 < w_.layers.size() && !observer_;
    if (handed) {
      const LayerWeights& next = w_.layers[li + 1];
      ops_.hc_post_pre(y, post, comb, model(), n, c, X,
                       {&next.hc_attn, &next.attn_norm, u, post, comb, xn, xq, rounding(true, true)});
    } else {
      block_hc_post(a, y, post, comb, X);
    }
    if (auto t = std::find(tap_layers_.begin(), tap_layers_.end(), L.layer); t != tap_layers_.end()) {
      const int64_t T = static_cast<int64_t>(tap_layers_.size());
      ops_.hc_stream_mean(X, n, c, static_cast<float*>(tap_buf_->data()) + (t - tap_layers_.begin()) * D, T * D);
    }
    ops_.release_to(mark);
  }
  ops_.release_to(outer);
}

void Shard::reserve_taps(int64_t rows) {
  if (rows <= tap_rows_) return;
  // Grown rarely (powers of two, at least 64 rows): a new buffer means new graphs.
  int64_t cap = std::max<int64_t>(64, tap_rows_);
  while (cap < rows) cap *= 2;
  graphs_.clear();
  tap_buf_.reset();
  tap_buf_ = ops_.alloc_state(static_cast<size_t>(cap * static_cast<int64_t>(tap_layers_.size()) * config_.dim) *
                              sizeof(float));
  tap_rows_ = cap;
}

void Shard::forward_batch(std::span<const SeqRows> seqs, const HcState& X, int64_t pad) {
  const int64_t width = config_.hc_mult * config_.dim;
  int64_t n = pad;
  for (const SeqRows& s : seqs) n += s.n;
  HS_CHECK(X.data != nullptr, "shard [", w_.begin, ", ", w_.end, "): no HC state was handed over");
  HS_CHECK(X.backend == &ops_, "shard [", w_.begin, ", ", w_.end, "): the HC state lives on backend ",
           X.backend ? X.backend->name() : "?", ", not on this shard's ", ops_.name(), " backend");
  HS_CHECK(X.n_tokens == n && X.width == width, "shard [", w_.begin, ", ", w_.end, "): HC state of ", X.n_tokens,
           " x ", X.width, " floats handed over, expected ", n, " x ", width, " (n_tokens x hc*D)");
  forward_batch(seqs, X.data, pad);
}

void Shard::forward(SequenceState& seq, const int32_t* tokens, int64_t n, float* X) {
  const SeqRows one{&seq, tokens, n};
  forward_batch({&one, 1}, X);
}

void Shard::forward(SequenceState& seq, const int32_t* tokens, int64_t n, const HcState& X) {
  const SeqRows one{&seq, tokens, n};
  forward_batch({&one, 1}, X);
}

int64_t Shard::weight_bytes_per_token() const {
  const ModelConfig& c = config_;
  auto vec = [](const std::vector<float>& v) { return static_cast<int64_t>(v.size()) * 4; };
  auto hc = [&](const HcWeights& h) { return vec(h.fn) + vec(h.base) + vec(h.scale); };
  auto mat = [&](const Mat& m) { return ops_.weight_bytes(m); };
  int64_t b = 0;
  if (w_.has_embed) b += mat(w_.embed) / std::max<int64_t>(w_.embed.rows, 1);
  if (w_.has_head) b += mat(w_.head) + vec(w_.norm) + hc(w_.hc_head);
  for (const auto& L : w_.layers) {
    b += hc(L.hc_attn) + hc(L.hc_ffn) + vec(L.attn_norm) + vec(L.ffn_norm) + vec(L.q_norm) + vec(L.kv_norm) +
         vec(L.sinks) + vec(L.gate_bias);
    for (const Mat* m : {&L.wq_a, &L.wq_b, &L.wkv, &L.wo_a, &L.wo_b, &L.comp.wkv, &L.comp.wgate, &L.idx_comp.wkv,
                         &L.idx_comp.wgate, &L.idx_wq_b, &L.idx_proj, &L.gate, &L.sh_w1, &L.sh_w3, &L.sh_w2})
      b += mat(*m);
    b += vec(L.comp.ape) + vec(L.comp.norm) + vec(L.idx_comp.ape) + vec(L.idx_comp.norm);
    b += (mat(L.w1) + mat(L.w3) + mat(L.w2)) * c.n_active_experts / c.n_experts;
  }
  return b;
}

void Shard::logits(const float* X, int64_t n, float* out) {
  HS_CHECK(w_.has_head, "internal: shard [", w_.begin, ", ", w_.end, ") does not own the output head");
  const size_t mark = ops_.mark();
  float* h = ops_.alloc(n * config_.dim);
  ops_.hc_head(w_.hc_head, config_, X, n, h);
  norm_bf16(h, w_.norm, n, h);
  ops_.matmul(w_.head, h, n, out);
  ops_.release_to(mark);
}

}  // namespace hs
