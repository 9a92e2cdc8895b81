#include "engine/attn_parts.h"

namespace hs {

namespace {
Ops::Bf16Round rounding(const AttnCtx& a, bool in, bool out) {
  return a.model ? Ops::Bf16Round{in, out} : Ops::Bf16Round{};
}
}  // namespace

const float* attn_linear_input(const AttnCtx& a, const float* x_in) {
  if (!a.model) return x_in;
  float* xq = a.ops.alloc(a.n * a.c.dim);
  a.ops.act_quant_fp8_copy(xq, x_in, a.n, a.c.dim, false);
  return xq;
}

namespace {
// attn_query after wq_a (cq [n, q_lora_rank] = wq_a x): q_norm, wq_b, the per-head norm and RoPE.
const float* query_from(const AttnCtx& a, float* cq, float* q) {
  const ModelConfig& c = a.c;
  const int64_t n = a.n, H = c.n_heads, hd = c.head_dim;
  // c_q is read only as the FP8 input of wq_b and the indexer's wq_b: quantised in place.
  if (a.model) a.ops.rmsnorm_bf16_fp8(cq, a.L.q_norm, n, c.norm_eps, cq, cq, rounding(a, true, true));
  else a.ops.rmsnorm_bf16(cq, a.L.q_norm, n, c.norm_eps, cq, rounding(a, true, true));
  const float* cq_in = cq;
  a.ops.matmul(a.L.wq_b, cq_in, n, q);
  a.ops.rmsnorm_rope_bf16(q, nullptr, n, H, hd, c.norm_eps, a.rope, a.pos, rounding(a, true, false),
                          rounding(a, false, true));
  return cq_in;
}
// attn_kv after wkv: kv_norm and RoPE.
void kv_from(const AttnCtx& a, float* kv) {
  a.ops.rmsnorm_rope_bf16(kv, &a.L.kv_norm, a.n, 1, a.c.head_dim, a.c.norm_eps, a.rope, a.pos, rounding(a, true, true),
                          {});
}
}  // namespace

void attn_kv(const AttnCtx& a, const float* x, float* kv) {
  a.ops.matmul(a.L.wkv, x, a.n, kv);
  kv_from(a, kv);
}

const float* attn_query_kv(const AttnCtx& a, const float* x, float* q, float* kv) {
  float* cq = a.ops.alloc(a.n * a.c.q_lora_rank);
  const Mat* W[2] = {&a.L.wq_a, &a.L.wkv};
  float* y[2] = {cq, kv};
  a.ops.matmuls(W, y, 2, x, a.n);
  const float* cq_in = query_from(a, cq, q);
  kv_from(a, kv);
  return cq_in;
}

void attn_output(const AttnCtx& a, float* o, float* y) {
  const ModelConfig& c = a.c;
  const int64_t n = a.n;
  a.ops.rope_bf16(o, n, c.n_heads, c.head_dim, a.rope, a.pos, -1, rounding(a, true, true));
  float* r = a.ops.alloc(n * c.o_groups * c.o_lora_rank);
  a.ops.grouped_matmul(a.L.wo_a, c.o_groups, o, n, r);
  if (a.model) a.ops.act_quant_fp8_copy(r, r, n, c.o_groups * c.o_lora_rank, true);  // bf16(r), then FP8
  a.ops.matmul(a.L.wo_b, r, n, y);
  if (a.model) a.ops.round_bf16(y, n * c.dim);
}

void block_hc_post(const AttnCtx& a, const float* y, const float* post, const float* comb, float* X) {
  if (a.model) a.ops.hc_post_bf16(y, post, comb, a.n, a.c, X);
  else a.ops.hc_post(y, post, comb, a.n, a.c, X);
}

void ffn_sublayer(const AttnCtx& a, const int32_t* tokens, float* X, float* u, float* post, float* comb, float* xn,
                  float* y) {
  // Under model numerics the experts' FP8 input comes out of the norm's launch as well.
  float* xq = a.model ? a.ops.alloc(a.n * a.c.dim) : nullptr;
  a.ops.hc_post_pre(y, post, comb, a.model, a.n, a.c, X,
                    {&a.L.hc_ffn, &a.L.ffn_norm, u, post, comb, xn, xq, rounding(a, true, true)});
  a.ops.moe(a.L, a.c, xn, xq, tokens, a.n, a.model ? Numerics::Model : Numerics::Reference, y);
}

}  // namespace hs
