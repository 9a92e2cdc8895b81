#include "engine/mtp.h"

#include "util/error.h"

namespace hs {

StatePoolOptions mtp_pool_options(const ModelConfig& main, const StatePoolOptions& main_pool) {
  StatePoolOptions o = main_pool;
  const ModelConfig m = main.with_mtp_layer();
  const StateLayout l = make_state_layout(m, main.n_layers, main.n_layers + 1, o, int64_t{1} << 62);
  o.memory_bytes = l.swa_blocks * l.swa_page_bytes + o.slots * l.slot_bytes + l.cmp_blocks * l.cmp_page_bytes + 1;
  return o;
}

MtpDrafter::MtpDrafter(const ModelConfig& main, MtpWeights w, Ops& ops, const Mat& embed, const Mat& head,
                       Numerics numerics, const StatePoolOptions& state)
    : main_(main), w_(std::move(w)), ops_(ops), embed_(embed), head_(head), numerics_(numerics) {
  HS_CHECK(embed_.rows == main.vocab_size && embed_.cols == main.dim && head_.rows == main.vocab_size &&
               head_.cols == main.dim,
           "internal: the MTP drafter needs the main model's embedding and head");
  ShardWeights sw;
  sw.begin = main.n_layers;
  sw.end = main.n_layers + 1;
  sw.layers.push_back(std::move(w_.block));
  w_.block = LayerWeights{};
  StatePoolOptions o = state;
  shard_ = std::make_unique<Shard>(main.with_mtp_layer(), std::move(sw), ops_, numerics_, o, true);
  shard_->set_graphs(false);  // the drafter's steps are few rows; not worth a capture per shape
}

MtpDrafter::~MtpDrafter() = default;

void MtpDrafter::truncate(SequenceState& s, int64_t n) const {
  shard_->check_state(s, "drafter truncate: ");
  HS_CHECK(n >= 0 && n <= s.n_past() && n >= s.high() - s.pool().layout().max_rollback && n >= s.floor(),
           "drafter truncate to ", n, " rows: it holds ", s.n_past(), " (furthest ", s.high(), ", rollback at most ",
           s.pool().layout().max_rollback, ")");
  shard_->pool().truncate(s, n);
}

void MtpDrafter::forward(std::span<const DraftRows> seqs, float* logits, float* hidden_out) {
  HS_CHECK(!seqs.empty(), "drafter: a pass needs at least one sequence");
  const ModelConfig& c = main_;
  const int64_t D = c.dim, hc = c.hc_mult, per = hc * D, V = c.vocab_size;
  int64_t n = 0;
  std::vector<int32_t> tokens;
  std::vector<SeqRows> rows;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const DraftRows& s = seqs[i];
    HS_CHECK(s.n >= 1 && s.tokens && s.hidden, batch_label(i, seqs.size()), "drafter: rows, tokens and hidden states needed");
    rows.push_back({s.state, s.tokens, s.n});
    tokens.insert(tokens.end(), s.tokens, s.tokens + s.n);
    n += s.n;
  }
  shard_->check_tokens(tokens.data(), n, 0);
  const size_t mark = ops_.mark();
  struct Release {
    Ops& o;
    size_t m;
    ~Release() { o.release_to(m); }
  } release{ops_, mark};
  const Ops::Bf16Round both = model() ? Ops::Bf16Round{true, true} : Ops::Bf16Round{};
  // e = enorm(embed[t]) in every stream (the embedding broadcast over hc is what embed() writes).
  float* e = ops_.alloc(n * per);
  ops_.embed(embed_, tokens.data(), n, static_cast<int>(hc), e);
  ops_.rmsnorm_bf16(e, w_.enorm, n * hc, c.norm_eps, e, both);
  // h = hnorm(X_j) per stream.
  float* x = ops_.alloc(n * per);
  {
    std::vector<float> host(static_cast<size_t>(n * per));
    int64_t at = 0;
    for (const DraftRows& s : seqs) {
      std::copy_n(s.hidden, s.n * per, host.data() + at * per);
      at += s.n;
    }
    ops_.upload(x, host.data(), n * per);
  }
  float* h = ops_.alloc(n * per);
  ops_.rmsnorm_bf16(x, w_.hnorm, n * hc, c.norm_eps, h, both);
  // X_in = e_proj·e + h_proj·h (FP8 linears under model numerics: their inputs quantised).
  if (model()) {
    ops_.act_quant_fp8_copy(e, e, n * hc, D, false);
    ops_.act_quant_fp8_copy(h, h, n * hc, D, false);
  }
  float* pe = ops_.alloc(n * per);
  ops_.matmul(w_.e_proj, e, n * hc, pe);
  ops_.matmul(w_.h_proj, h, n * hc, x);
  if (model()) {
    ops_.round_bf16(pe, n * per);
    ops_.round_bf16(x, n * per);
  }
  ops_.add(x, pe, n * per);
  if (model()) ops_.round_bf16(x, n * per);
  shard_->forward_batch(rows, HcState{x, n, per, &ops_});
  // The head over each sequence's last row: hc_head (the MTP's), norm (the MTP's), the shared head.
  const int64_t k = static_cast<int64_t>(seqs.size());
  float* last = ops_.alloc(k * per);
  int64_t at = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    at += seqs[i].n;
    ops_.copy(last + static_cast<int64_t>(i) * per, x + (at - 1) * per, per);
  }
  if (hidden_out) ops_.download(hidden_out, last, k * per);
  if (!logits) return;  // a catch-up pass: only the block's state was wanted
  float* y = ops_.alloc(k * D);
  ops_.hc_head(w_.hc_head, c, last, k, y);
  ops_.rmsnorm_bf16(y, w_.norm, k, c.norm_eps, y, both);
  float* out = ops_.alloc(k * V);
  ops_.matmul(head_, y, k, out);
  ops_.download(logits, out, k * V);
}

}  // namespace hs
