#!/usr/bin/env python3
"""Outside oracle for hyperstream's DSpark drafter (issue 16; docs/speculative.md): the DSpark
draft of DeepSeek-V4-Flash-0731 written in PyTorch after DeepSpec's reference code
(deepseek-ai/DeepSpec: modeling/dspark/common.py `create_noise_embed`, `create_position_ids`,
`create_dspark_attention_mask`; qwen3/modeling.py `_forward_backbone` (fc + hidden_norm, context K/V
projected by every layer from the same fused target features, bidirectional block);
markov_head.py `VanillaMarkov`; eval/dspark/draft_ops.py `build_dspark_proposal`,
`_predict_confidence_logits`), with the Qwen3 layers replaced by DeepSeek-V4 blocks as the V4
checkpoint holds them (mtp.<s>.*: HC pre/post, SWA attention with sink, score-routed MoE; the
last stage's hc_head, norm, markov_head, confidence_head; stage 0's main_proj/main_norm). The V4
block pieces are those of scripts/gen_mtp_fixtures.py (DeepSeek's inference/model.py, ratio 0),
imported from it. float64, no quantisation simulation (hyperstream's --numerics reference).

The draft (docs/speculative.md "Data flow"), for context positions 0..P-1 and the anchor at P:
    main_x   = main_norm(main_proj(taps))                       taps [P, T*D] random here
    ctx_s    = rope_p(kv_norm_s(wkv_s(main_x)))                 each stage s, positions 0..P-1
    X0       = embed([anchor, noise, ...]) in every hc stream   positions P .. P+B-1
    stage s  = V4 block; its attention: block queries over [ctx_s of the last `window` positions ;
               the block's own kv] (no causal mask inside the block), sink per head
    h        = hc_head(X_S);  base = head(norm(h))
    for j:   logits_j = base_j + markov_w2(markov_w1[prev_j]);  conf_j = confidence([h_j; markov_w1[prev_j]])
             d_j = argmax(logits_j);  prev_0 = anchor, prev_{j+1} = d_j

Writes OUTDIR/dspark-tiny/:
    config.json          the tiny fixture's HF config + dspark_block_size, dspark_noise_token_id,
                         dspark_target_layer_ids, dspark_markov_rank (the stage count is counted
                         from the tensors, as for the real checkpoint)
    model.safetensors    official DeepSeek naming, F32: embed.weight, head.weight and every mtp.<s>.*
    expected.safetensors taps F32 [P_MAX, T*D]; for each case k: context_k I32 [1] (P_k), anchor_k I32 [1],
                         tokens_k I32 [B] (the greedy drafts), logits_k F32 [B, vocab] (with the
                         Markov bias), confidence_k F32 [B] (logits, before the sigmoid), h_k F32 [B, D]
    meta.json            generator, versions, seed, the cases' P

Needs only torch and numpy (CPU is enough; the GPU machine has both):
    python3 scripts/gen_dspark_fixtures.py tests/data
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_mtp_fixtures as v4  # noqa: E402  (the V4 block pieces: rmsnorm, rope, hc_pre, ...)

DT = v4.DT
CFG = dict(v4.CFG)
STAGES, BLOCK, RANK = 3, 5, 8
TARGETS = [3, 4, 5]  # the last three of the tiny model's 6 layers (V4-Flash-0731: 40, 41, 42)
NOISE = CFG["vocab_size"] - 1
CASES = [5, 20]  # context rows: inside the window (8), and past it (the ring slides)
SEED = 31


def random_weights(c, gen):
    """Official names, values like gen_hf_fixtures.py randomise()."""
    D, H, HD, QL = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, R, E, I, HC = c["o_groups"], c["o_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"], c["hc_mult"]
    V, MIX, T = c["vocab_size"], (2 + c["hc_mult"]) * c["hc_mult"], len(TARGETS)

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=DT) * std + mean

    def mat(o, i):
        return normal((o, i), 1.0 / math.sqrt(i))

    w = {"embed.weight": normal((V, D), 1.0), "head.weight": mat(V, D)}
    w["mtp.0.main_proj.weight"] = mat(D, T * D)
    w["mtp.0.main_norm.weight"] = normal((D,), 0.1, 1.0)
    for s in range(STAGES):
        m = f"mtp.{s}."
        for n in ("attn_norm", "ffn_norm"):
            w[m + n + ".weight"] = normal((D,), 0.1, 1.0)
        for site in ("attn", "ffn"):
            w[m + f"hc_{site}_fn"] = mat(MIX, HC * D)
            w[m + f"hc_{site}_base"] = normal((MIX,), 0.5)
            w[m + f"hc_{site}_scale"] = torch.rand((3,), generator=gen, dtype=DT) + 0.5
        a = m + "attn."
        w[a + "wq_a.weight"] = mat(QL, D)
        w[a + "q_norm.weight"] = normal((QL,), 0.1, 1.0)
        w[a + "wq_b.weight"] = mat(H * HD, QL)
        w[a + "wkv.weight"] = mat(HD, D)
        w[a + "kv_norm.weight"] = normal((HD,), 0.1, 1.0)
        w[a + "wo_a.weight"] = mat(G * R, H * HD // G)
        w[a + "wo_b.weight"] = mat(D, G * R)
        w[a + "attn_sink"] = normal((H,), 1.0)
        f = m + "ffn."
        w[f + "gate.weight"] = mat(E, D)
        w[f + "gate.bias"] = normal((E,), 0.1)
        for e in range(E):
            w[f + f"experts.{e}.w1.weight"] = mat(I, D)
            w[f + f"experts.{e}.w3.weight"] = mat(I, D)
            w[f + f"experts.{e}.w2.weight"] = mat(D, I)
        w[f + "shared_experts.w1.weight"] = mat(I, D)
        w[f + "shared_experts.w3.weight"] = mat(I, D)
        w[f + "shared_experts.w2.weight"] = mat(D, I)
    L = f"mtp.{STAGES - 1}."
    w[L + "norm.weight"] = normal((D,), 0.1, 1.0)
    w[L + "hc_head_fn"] = mat(HC, HC * D)
    w[L + "hc_head_base"] = normal((HC,), 0.5)
    w[L + "hc_head_scale"] = torch.rand((1,), generator=gen, dtype=DT) + 0.5
    w[L + "markov_head.markov_w1.weight"] = normal((V, RANK), 1.0)  # an embedding table
    w[L + "markov_head.markov_w2.weight"] = mat(V, RANK)            # Linear(rank -> vocab)
    w[L + "confidence_head.proj.weight"] = mat(1, D + RANK)         # Linear(D + rank -> 1), no bias (V4)
    return w


def moe(x, w, c, f):  # v4.moe with the stage's prefix f ("mtp.<s>.ffn.")
    scores = F.softplus(F.linear(x, w[f + "gate.weight"])).sqrt()
    idx = (scores + w[f + "gate.bias"]).topk(c["num_experts_per_tok"], dim=-1)[1]
    weights = scores.gather(1, idx)
    weights = weights / weights.sum(-1, keepdim=True) * c["routed_scaling_factor"]
    y = torch.zeros_like(x)
    lim = c["swiglu_limit"]
    for e in range(c["n_routed_experts"]):
        rows, top = torch.where(idx == e)
        if rows.numel() == 0:
            continue
        g = f + f"experts.{e}."
        y[rows] += v4.expert(x[rows], w[g + "w1.weight"], w[g + "w3.weight"], w[g + "w2.weight"], lim,
                             weights[rows, top, None])
    s = f + "shared_experts."
    return y + v4.expert(x, w[s + "w1.weight"], w[s + "w3.weight"], w[s + "w2.weight"], lim)


def context_kv(main_x, w, c, s, fc):  # the stage's K = V rows of the target's fused features
    a, eps = f"mtp.{s}.attn.", c["norm_eps"]
    return v4.rope(v4.rmsnorm(F.linear(main_x, w[a + "wkv.weight"]), w[a + "kv_norm.weight"], eps), fc)


def block_attention(x, ctx, w, c, s, fcb):
    """Queries of the B block rows over [ctx (the last `window` context rows) ; the block's kv]: the
    DSpark mask of DeepSpec's create_dspark_attention_mask (context before the anchor, the whole
    block), V4's attention with sink and grouped output (v4.attention's pieces)."""
    B = x.shape[0]
    H, HD, eps = c["num_attention_heads"], c["head_dim"], c["norm_eps"]
    a = f"mtp.{s}.attn."
    q = v4.rmsnorm(F.linear(x, w[a + "wq_a.weight"]), w[a + "q_norm.weight"], eps)
    q = F.linear(q, w[a + "wq_b.weight"]).unflatten(-1, (H, HD))
    q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + eps)
    q = v4.rope(q, fcb)
    kv = v4.rope(v4.rmsnorm(F.linear(x, w[a + "wkv.weight"]), w[a + "kv_norm.weight"], eps), fcb)
    rows = torch.cat([ctx, kv], dim=0)
    o = torch.zeros(B, H, HD, dtype=DT)
    scale = HD ** -0.5
    sink = w[a + "attn_sink"]
    for j in range(B):
        logits = (q[j] @ rows.T) * scale
        m = torch.maximum(logits.max(-1).values, sink)
        e = torch.exp(logits - m.unsqueeze(-1))
        o[j] = (e @ rows) / (e.sum(-1) + torch.exp(sink - m)).unsqueeze(-1)
    o = v4.rope(o, fcb, inverse=True)
    G, R = c["o_groups"], c["o_lora_rank"]
    o = o.reshape(B, G, -1)
    wo_a = w[a + "wo_a.weight"].view(G, R, -1)
    o = torch.einsum("sgd,grd->sgr", o, wo_a)
    return F.linear(o.flatten(1), w[a + "wo_b.weight"])


def dspark_draft(taps, anchor, w, c):
    """The draft block after context rows 0..P-1 (taps [P, T*D]) with the anchor at position P."""
    P, eps, win, HC = taps.shape[0], c["norm_eps"], c["sliding_window"], c["hc_mult"]
    fc = v4.freqs_cis(c["rope_dim"], P + BLOCK, c["rope_theta"])
    main_x = v4.rmsnorm(F.linear(taps, w["mtp.0.main_proj.weight"]), w["mtp.0.main_norm.weight"], eps)
    tokens = torch.tensor([anchor] + [NOISE] * (BLOCK - 1))
    X = w["embed.weight"][tokens].unsqueeze(1).expand(BLOCK, HC, -1).clone()
    fcb = fc[P:P + BLOCK]
    for s in range(STAGES):
        m = f"mtp.{s}."
        ctx = context_kv(main_x, w, c, s, fc[:P])[max(0, P - win):]
        res = X
        u, post, comb = v4.hc_pre(X, w[m + "hc_attn_fn"], w[m + "hc_attn_scale"], w[m + "hc_attn_base"], c)
        y = block_attention(v4.rmsnorm(u, w[m + "attn_norm.weight"], eps), ctx, w, c, s, fcb)
        X = v4.hc_post(y, res, post, comb)
        res = X
        u, post, comb = v4.hc_pre(X, w[m + "hc_ffn_fn"], w[m + "hc_ffn_scale"], w[m + "hc_ffn_base"], c)
        y = moe(v4.rmsnorm(u, w[m + "ffn_norm.weight"], eps), w, c, m + "ffn.")
        X = v4.hc_post(y, res, post, comb)
    L = f"mtp.{STAGES - 1}."
    flat = X.flatten(1)
    rs = torch.rsqrt(flat.square().mean(-1, keepdim=True) + eps)
    mixes = F.linear(flat, w[L + "hc_head_fn"]) * rs
    pre = torch.sigmoid(mixes * w[L + "hc_head_scale"] + w[L + "hc_head_base"]) + c["hc_eps"]
    h = torch.sum(pre.unsqueeze(-1) * X, dim=1)  # [B, D]: the confidence head's input
    base = F.linear(v4.rmsnorm(h, w[L + "norm.weight"], eps), w["head.weight"])
    # VanillaMarkov.sample_block_tokens (greedy) with the confidence of each step.
    w1, w2 = w[L + "markov_head.markov_w1.weight"], w[L + "markov_head.markov_w2.weight"]
    logits, conf, drafts = [], [], []
    prev = anchor
    for j in range(BLOCK):
        e = w1[prev]
        lj = base[j] + F.linear(e, w2)
        logits.append(lj)
        conf.append(F.linear(torch.cat([h[j], e]), w[L + "confidence_head.proj.weight"])[0])
        prev = int(lj.argmax())
        drafts.append(prev)
    return torch.tensor(drafts), torch.stack(logits), torch.stack(conf), h


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.path.join(sys.argv[1], "dspark-tiny")
    os.makedirs(out, exist_ok=True)
    c = CFG
    gen = torch.Generator().manual_seed(SEED)
    w = random_weights(c, gen)
    T = len(TARGETS)
    taps = torch.randn((max(CASES), T * c["hidden_size"]), generator=gen, dtype=DT)
    anchors = [int(a) for a in torch.randint(3, c["vocab_size"] - 1, (len(CASES),), generator=gen)]
    f32 = lambda t: np.ascontiguousarray(t.to(torch.float32).numpy())
    i32 = lambda t: np.ascontiguousarray(t.to(torch.int32).numpy())
    ex = {"taps": f32(taps)}
    meta_cases = []
    with torch.no_grad():
        for k, (P, anchor) in enumerate(zip(CASES, anchors)):
            drafts, logits, conf, h = dspark_draft(taps[:P], anchor, w, c)
            # Context before the window must not matter (the ring keeps `window` rows).
            if P > c["sliding_window"]:
                d2, l2, _, _ = dspark_draft(torch.cat([torch.zeros_like(taps[:1]), taps[1:P]]), anchor, w, c)
                assert float((l2 - logits).abs().max()) < 1e-12
            ex[f"context_{k}"] = np.array([P], dtype=np.int32)
            ex[f"anchor_{k}"] = np.array([anchor], dtype=np.int32)
            ex[f"tokens_{k}"] = i32(drafts)
            ex[f"logits_{k}"] = f32(logits)
            ex[f"confidence_{k}"] = f32(conf)
            ex[f"h_{k}"] = f32(h)
            meta_cases.append({"P": P, "anchor": anchor, "drafts": drafts.tolist(),
                               "logits_max_abs": float(logits.abs().max()), "confidence": conf.tolist()})
    v4.save_file({k: f32(v) for k, v in w.items()}, os.path.join(out, "model.safetensors"))
    v4.save_file(ex, os.path.join(out, "expected.safetensors"))
    cfg = v4.hf_config(c)
    cfg.update({"dspark_block_size": BLOCK, "dspark_noise_token_id": NOISE, "dspark_target_layer_ids": TARGETS,
                "dspark_markov_rank": RANK})
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(cfg, fh, indent=2)
    meta = {"generator": "scripts/gen_dspark_fixtures.py: the DSpark draft (DeepSpec) with DeepSeek-V4 blocks, "
                         "float64, CPU",
            "torch": torch.__version__, "numpy": np.__version__, "seed": SEED, "stages": STAGES, "block": BLOCK,
            "markov_rank": RANK, "cases": meta_cases}
    with open(os.path.join(out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
    print(f"wrote {out}: cases {CASES}, drafts {[m['drafts'] for m in meta_cases]}")


if __name__ == "__main__":
    main()
