#include "engine/dspark.h"

#include <algorithm>
#include <cmath>

#include "engine/attn_parts.h"
#include "kernels/cpu/ops.h"
#include "util/error.h"

namespace hs {

namespace {
struct Scratch {  // returns the backend's scratch on the way out
  Ops& ops;
  size_t mark;
  explicit Scratch(Ops& o) : ops(o), mark(o.mark()) {}
  ~Scratch() { ops.release_to(mark); }
};
}  // namespace

void DsparkSequence::reset() {
  for (auto& r : ring) std::fill(r.begin(), r.end(), 0.0f);
  std::fill(ring_pos.begin(), ring_pos.end(), -1);
  next = 0;
  rows = 0;
}

DsparkDrafter::DsparkDrafter(const ModelConfig& main, DsparkWeights w, Ops& ops, const Mat& embed, const Mat& head,
                             Numerics numerics)
    : c_(main.with_dspark_layers(main.dspark.stages)), n_main_(main.n_layers), w_(std::move(w)), ops_(ops),
      embed_(embed), head_(head), numerics_(numerics) {
  main.validate_dspark(main.dspark.stages, "DSpark drafter: ");
  HS_CHECK(static_cast<int>(w_.stages.size()) == main.dspark.stages, "internal: DSpark weights of ", w_.stages.size(),
           " stages, config says ", main.dspark.stages);
  HS_CHECK(embed_.rows == main.vocab_size && embed_.cols == main.dim && head_.rows == main.vocab_size &&
               head_.cols == main.dim,
           "internal: the DSpark drafter needs the main model's embedding and head");
  // The stages are ratio-0 layers: the main RoPE table (rope_theta, no YaRN).
  rope_ = {c_.rope_dim, cpu::rope_inv_freq(c_.rope_dim, c_.rope_theta)};
}

std::unique_ptr<DsparkSequence> DsparkDrafter::new_sequence() const {
  auto s = std::make_unique<DsparkSequence>();
  s->ring.assign(static_cast<size_t>(c_.dspark.stages),
                 std::vector<float>(static_cast<size_t>(c_.window * c_.head_dim), 0.0f));
  s->ring_pos.assign(static_cast<size_t>(c_.window), -1);
  return s;
}

void DsparkDrafter::add_context(std::span<const DsparkContextRows> seqs) {
  int64_t n = 0;
  for (const DsparkContextRows& r : seqs) {
    HS_CHECK(r.seq && r.n >= 1 && r.taps && r.p0 >= 0, "DSpark drafter: context rows need taps and a position");
    n += r.n;
  }
  if (n == 0) return;
  const int64_t D = c_.dim, hd = c_.head_dim, W = c_.window, T = tap_width();
  Scratch scratch(ops_);
  const Ops::Bf16Round both = model() ? Ops::Bf16Round{true, true} : Ops::Bf16Round{};
  // Every sequence's rows at once (row-wise ops only: their K = V rows depend on nothing else).
  float* t = ops_.alloc(n * T);
  std::vector<int64_t> pos;
  int64_t row = 0;
  for (const DsparkContextRows& r : seqs) {
    ops_.upload(t + row * T, r.taps, r.n * T);
    for (int64_t i = 0; i < r.n; ++i) pos.push_back(r.p0 + i);
    row += r.n;
  }
  // main_x = main_norm(main_proj · taps) (an FP8 linear under model numerics).
  if (model()) ops_.act_quant_fp8_copy(t, t, n, T, true);
  float* mx = ops_.alloc(n * D);
  ops_.matmul(w_.main_proj, t, n, mx);
  ops_.rmsnorm_bf16(mx, w_.main_norm, n, c_.norm_eps, mx, both);
  float* kv = ops_.alloc(n * hd);
  std::vector<float> host(static_cast<size_t>(n * hd));
  for (const DsparkContextRows& r : seqs)
    if (r.p0 != r.seq->next) {  // not the continuation: start afresh at p0
      r.seq->reset();
      r.seq->next = r.p0;
    }
  for (size_t st = 0; st < w_.stages.size(); ++st) {
    // Each stage's own wkv / kv_norm over the shared main_x: its context K = V rows.
    const AttnCtx a{ops_, c_, w_.stages[st], rope_, pos.data(), n, model()};
    attn_kv(a, attn_linear_input(a, mx), kv);
    if (model()) ops_.kv_fp8_sim(kv, n, hd, hd - c_.rope_dim);
    ops_.download(host.data(), kv, n * hd);
    row = 0;
    for (const DsparkContextRows& r : seqs) {
      for (int64_t i = std::max<int64_t>(0, r.n - W); i < r.n; ++i)
        std::copy_n(host.data() + (row + i) * hd, hd, r.seq->ring[st].data() + ((r.p0 + i) % W) * hd);
      row += r.n;
    }
  }
  for (const DsparkContextRows& r : seqs) {
    DsparkSequence& q = *r.seq;
    for (int64_t i = std::max<int64_t>(0, r.n - W); i < r.n; ++i)
      q.ring_pos[static_cast<size_t>((r.p0 + i) % W)] = r.p0 + i;
    q.next = r.p0 + r.n;
    q.rows = std::min(W, q.rows + r.n);
  }
}

void DsparkDrafter::add_context(DsparkSequence& s, int64_t p0, const float* taps, int64_t n) {
  const DsparkContextRows r{&s, p0, taps, n};
  add_context(std::span<const DsparkContextRows>(&r, 1));
}

DsparkBlock DsparkDrafter::draft_block(const DsparkSequence& s, int32_t anchor) {
  const DsparkSequence* q = &s;
  return std::move(draft_blocks(std::span<const DsparkSequence* const>(&q, 1), std::span<const int32_t>(&anchor, 1))[0]);
}

std::vector<DsparkBlock> DsparkDrafter::draft_blocks(std::span<const DsparkSequence* const> seqs,
                                                     std::span<const int32_t> anchors, std::span<const int> drafts) {
  HS_CHECK(seqs.size() == anchors.size() && (drafts.empty() || drafts.size() == seqs.size()), "internal: ",
           seqs.size(), " DSpark sequences, ", anchors.size(), " anchors, ", drafts.size(), " draft counts");
  const int64_t B = c_.dspark.block, D = c_.dim, hc = c_.hc_mult, per = hc * D, H = c_.n_heads, hd = c_.head_dim;
  const int64_t V = c_.vocab_size, W = c_.window, R = static_cast<int64_t>(seqs.size()), n = R * B;
  std::vector<DsparkBlock> out(seqs.size());
  if (R == 0) return out;
  // Every block's rows at once: [block 0 ; block 1 ; ...], each [anchor, noise, ...].
  std::vector<int32_t> tokens(static_cast<size_t>(n), c_.dspark.noise_token);
  std::vector<int64_t> pos(static_cast<size_t>(n));
  std::vector<std::vector<int64_t>> slots(seqs.size());  // per block: the ring slots its rows see
  for (int64_t r = 0; r < R; ++r) {
    const DsparkSequence& s = *seqs[static_cast<size_t>(r)];
    const int32_t anchor = anchors[static_cast<size_t>(r)];
    HS_CHECK(s.rows > 0, "DSpark drafter: a block needs context rows first");
    HS_CHECK(anchor >= 0 && anchor < c_.vocab_size, "DSpark drafter: anchor token ", anchor,
             " is outside the vocabulary");
    DsparkBlock& b = out[static_cast<size_t>(r)];
    b.p = s.next - 1;
    b.anchor = anchor;
    b.rows = drafts.empty() ? static_cast<int>(B) : std::clamp(drafts[static_cast<size_t>(r)], 1, static_cast<int>(B));
    tokens[static_cast<size_t>(r * B)] = anchor;
    for (int64_t j = 0; j < B; ++j) pos[static_cast<size_t>(r * B + j)] = b.p + 1 + j;
    // The context rows every block row sees: the ring's positions in (p - window, p].
    for (int64_t k = 0; k < W; ++k) {
      const int64_t q = s.ring_pos[static_cast<size_t>(k)];
      if (q >= 0 && q <= b.p && q > b.p - W) slots[static_cast<size_t>(r)].push_back(k);
    }
  }
  Scratch scratch(ops_);
  const Ops::Bf16Round both = model() ? Ops::Bf16Round{true, true} : Ops::Bf16Round{};
  float* X = ops_.alloc(n * per);
  ops_.embed(embed_, tokens.data(), n, static_cast<int>(hc), X);
  if (model()) ops_.round_bf16(X, n * per);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> kvb(static_cast<size_t>(n * hd)), kvh;
  for (size_t st = 0; st < w_.stages.size(); ++st) {
    const LayerWeights& L = w_.stages[st];
    const size_t mark = ops_.mark();
    float* u = ops_.alloc(n * D);
    float* post = ops_.alloc(n * hc);
    float* comb = ops_.alloc(n * hc * hc);
    float* xn = ops_.alloc(n * D);
    float* y = ops_.alloc(n * D);
    ops_.hc_pre(L.hc_attn, c_, X, n, u, post, comb);
    ops_.rmsnorm_bf16(u, L.attn_norm, n, c_.norm_eps, xn, both);
    const AttnCtx a{ops_, c_, L, rope_, pos.data(), n, model()};
    const float* x = attn_linear_input(a, xn);
    float* q = ops_.alloc(n * H * hd);
    float* kv = ops_.alloc(n * hd);
    attn_query_kv(a, x, q, kv);
    if (model()) ops_.kv_fp8_sim(kv, n, hd, hd - c_.rope_dim);
    ops_.download(kvb.data(), kv, n * hd);
    // Attention with sink, per block, over [its context ring ; the whole block] (no causal mask
    // in the block).
    float* o = ops_.alloc(n * H * hd);
    for (int64_t r = 0; r < R; ++r) {
      const std::vector<int64_t>& sl = slots[static_cast<size_t>(r)];
      const std::vector<float>& ring = seqs[static_cast<size_t>(r)]->ring[st];
      const int64_t n_ctx = static_cast<int64_t>(sl.size());
      kvh.resize(static_cast<size_t>((n_ctx + B) * hd));
      for (int64_t i = 0; i < n_ctx; ++i)
        std::copy_n(ring.data() + sl[static_cast<size_t>(i)] * hd, hd, kvh.data() + i * hd);
      std::copy_n(kvb.data() + r * B * hd, B * hd, kvh.data() + n_ctx * hd);
      ops_.attention_dense(q + r * B * H * hd, B, H, hd, kvh.data(), n_ctx + B, L.sinks, scale, o + r * B * H * hd);
    }
    attn_output(a, o, y);
    ffn_sublayer(a, tokens.data(), X, u, post, comb, xn, y);
    block_hc_post(a, y, post, comb, X);
    ops_.release_to(mark);
  }
  // Only the rows whose drafts are asked for go on (the whole block went through the stages: its
  // rows see each other): hc_head over all, then each block's first `rows` rows packed together
  // for the head (a shadow probe needs one row of B; the head is the pass's largest matrix).
  float* h = ops_.alloc(n * D);
  ops_.hc_head(w_.hc_head, c_, X, n, h);
  int64_t m = 0;
  for (const DsparkBlock& b : out) m += b.rows;
  float* hk = h;
  if (m < n) {
    hk = ops_.alloc(m * D);
    int64_t row = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t k = out[static_cast<size_t>(r)].rows;
      ops_.copy(hk + row * D, h + r * B * D, k * D);
      row += k;
    }
  }
  std::vector<float> hh(static_cast<size_t>(m * D));
  ops_.download(hh.data(), hk, m * D);
  float* yn = ops_.alloc(m * D);
  ops_.rmsnorm_bf16(hk, w_.norm, m, c_.norm_eps, yn, both);
  float* logits = ops_.alloc(m * V);
  ops_.matmul(head_, yn, m, logits);
  std::vector<float> all(static_cast<size_t>(m * V));
  ops_.download(all.data(), logits, m * V);
  int64_t row = 0;
  for (DsparkBlock& b : out) {
    b.h.assign(hh.begin() + row * D, hh.begin() + (row + b.rows) * D);
    b.base.assign(all.begin() + row * V, all.begin() + (row + b.rows) * V);
    row += b.rows;
  }
  return out;
}

void DsparkDrafter::step(const DsparkBlock& b, int j, int32_t prev, float* logits, float* confidence) {
  const int64_t B = c_.dspark.block, D = c_.dim, V = c_.vocab_size, R = c_.dspark.markov_rank;
  HS_CHECK(j >= 0 && j < b.rows && b.rows <= B && static_cast<int64_t>(b.base.size()) == b.rows * V,
           "DSpark drafter: draft ", j, " of a block of ", B, " drafted for ", b.rows);
  HS_CHECK(prev >= 0 && prev < V, "DSpark drafter: token ", prev, " is outside the vocabulary");
  Scratch scratch(ops_);
  // The Markov bias markov_w2 · markov_w1[prev], and the confidence of [h_j ; markov_w1[prev]].
  float* cat_in = ops_.alloc(D + R);
  ops_.upload(cat_in, b.h.data() + j * D, D);
  float* e = cat_in + D;
  ops_.embed(w_.markov_w1, &prev, 1, 1, e);
  float* bias = ops_.alloc(V);
  ops_.matmul(w_.markov_w2, e, 1, bias);
  ops_.download(logits, bias, V);
  const float* base = b.base.data() + j * V;
  for (int64_t v = 0; v < V; ++v) logits[v] += base[v];
  if (!confidence) return;
  float* cl = ops_.alloc(1);
  ops_.matmul(w_.confidence, cat_in, 1, cl);
  ops_.download(confidence, cl, 1);
  *confidence += w_.confidence_bias;
}

void DsparkDrafter::steps(std::span<const DsparkBlock* const> blocks, std::span<const int> js,
                          std::span<const int32_t> prevs, float* logits) {
  const int64_t V = c_.vocab_size, R = static_cast<int64_t>(blocks.size()), Rk = c_.dspark.markov_rank;
  HS_CHECK(js.size() == blocks.size() && prevs.size() == blocks.size(), "internal: ", blocks.size(), " DSpark blocks, ",
           js.size(), " draft indices, ", prevs.size(), " tokens");
  if (R == 0) return;
  for (int64_t r = 0; r < R; ++r) {
    const DsparkBlock& b = *blocks[static_cast<size_t>(r)];
    const int j = js[static_cast<size_t>(r)];
    const int32_t prev = prevs[static_cast<size_t>(r)];
    HS_CHECK(j >= 0 && j < b.rows && static_cast<int64_t>(b.base.size()) == b.rows * V, "DSpark drafter: draft ", j,
             " of a block drafted for ", b.rows);
    HS_CHECK(prev >= 0 && prev < V, "DSpark drafter: token ", prev, " is outside the vocabulary");
  }
  Scratch scratch(ops_);
  float* e = ops_.alloc(R * Rk);
  ops_.embed(w_.markov_w1, prevs.data(), R, 1, e);
  float* bias = ops_.alloc(R * V);
  ops_.matmul(w_.markov_w2, e, R, bias);
  ops_.download(logits, bias, R * V);
  for (int64_t r = 0; r < R; ++r) {
    const float* base = blocks[static_cast<size_t>(r)]->base.data() + js[static_cast<size_t>(r)] * V;
    float* out = logits + r * V;
    for (int64_t v = 0; v < V; ++v) out[v] += base[v];
  }
}

}  // namespace hs
