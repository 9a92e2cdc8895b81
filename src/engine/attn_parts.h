// The row-wise parts of a V4 attention sub-layer (ds4-model-spec.md §5), shared by the model's
// layers (Shard::attention) and the DSpark drafter's stages (engine/dspark.h), which differ only
// in where the keys come from. Under model numerics the BF16/FP8 points of §9; under reference
// numerics everything stays f32. Every call runs over n rows at host positions pos[n].
#pragma once
#include <cstdint>

#include "engine/ops.h"

namespace hs {

struct AttnCtx {
  Ops& ops;
  const ModelConfig& c;
  const LayerWeights& L;
  const RopeTable& rope;
  const int64_t* pos;
  int64_t n;
  bool model;  // Numerics::Model
};

// The FP8-quantised copy of the sub-layer's input the FP8 linears take (x itself in reference
// numerics); scratch from a.ops.
const float* attn_linear_input(const AttnCtx& a, const float* x_in);
// The shared K = V row of each token: RoPE(kv_norm(wkv x)) [n, hd] (before any KV round trip).
void attn_kv(const AttnCtx& a, const float* x, float* kv);
// Query: c_q = q_norm(wq_a x) [n, q_lora_rank] (returned: the input of wq_b, which the indexer
// shares), q = RoPE(rms(wq_b c_q)) [n, H, hd]; and attn_kv of the same x, the two input
// projections (wq_a, wkv) as one Ops::matmuls.
const float* attn_query_kv(const AttnCtx& a, const float* x, float* q, float* kv);
// Output: inverse RoPE of o [n, H, hd] (in place), the grouped low-rank wo_a, then wo_b into y [n, D].
void attn_output(const AttnCtx& a, float* o, float* y);

// The rest of a block, the same for both: hc_post of a sub-layer's output y [n, D] into the HC
// state X (bf16(X) after it under model numerics); the FFN sub-layer from the attention's output
// y and its post [n, hc] / comb [n, hc, hc]: the hand-over (hc_post of y, the FFN's hc_pre and norm:
// Ops::hc_post_pre) and moe(ffn_norm(...)) into y, with the caller's scratch u/xn [n, D]; tokens
// [n] drive the hash-routed layers. post/comb then hold the FFN's coefficients: its hc_post
// (block_hc_post, or the hand-over to the next layer) is the caller's.
void block_hc_post(const AttnCtx& a, const float* y, const float* post, const float* comb, float* X);
void ffn_sublayer(const AttnCtx& a, const int32_t* tokens, float* X, float* u, float* post, float* comb, float* xn,
                  float* y);

}  // namespace hs
