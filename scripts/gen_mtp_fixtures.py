#!/usr/bin/env python3
"""Outside oracle for hyperstream's MTP drafter (issue 16): DeepSeek-V4's MTP block, written in
PyTorch after DeepSeek's reference inference code (inference/model.py of DeepSeek-V4-Flash:
`MTPBlock`, `Block`, `Attention` for a compress ratio of 0, `Gate`/`Expert`/`MoE`, `ParallelHead.hc_head`,
`precompute_freqs_cis`/`apply_rotary_emb`; kernel.py's `hc_split_sinkhorn` and `sparse_attn` as
ds4-model-spec.md sections 4 and 5.6 restate them), run on random weights at the tiny fixture's
widths in float64 with no quantisation simulation (hyperstream's --numerics reference). The shared
expert clamps like the routed ones (REF-v2, ds4-model-spec.md section 0).

The block (ds4-model-spec.md section 7), for rows p = 0..T-1 at start_pos 0:
    e = enorm(embed[t_p]);  X_in[p, j] = e_proj(e) + h_proj(hnorm(X[p, j]))   (each of the hc streams)
    X_out = Block_L(X_in)       (L = n_layers: SWA-only attention with its own window, score-routed MoE)
    logits = head(norm(hc_head(X_out)))   (the MTP's hc_head and norm, the main model's head)
X (the main model's final HC state, an input of the block) is random here: the block is a function
of it and of the tokens only.

Writes OUTDIR/mtp-tiny/:
    config.json          HF-style config of the main model (the tiny fixture's) + num_nextn_predict_layers 1
    model.safetensors    official DeepSeek naming, F32: embed.weight, head.weight and every mtp.0.* tensor
    expected.safetensors tokens I32 [T], hidden F32 [T, hc, D] (the input X), logits F32 [T, vocab]
                         and hidden_out F32 [T, hc, D] (X_out, the next draft's input) of every row
    meta.json            generator, versions, seed

Needs only torch and numpy (CPU is enough; the GPU machine has both):
    python3 scripts/gen_mtp_fixtures.py tests/data
"""
import json
import math
import os
import sys

import struct

import numpy as np
import torch
import torch.nn.functional as F

DT = torch.float64

CFG = dict(vocab_size=320, hidden_size=64, moe_intermediate_size=32, num_hidden_layers=6, num_attention_heads=4,
           head_dim=32, rope_dim=8, q_lora_rank=32, num_experts_per_tok=2, n_routed_experts=8,
           routed_scaling_factor=1.5, sliding_window=8, o_groups=2, o_lora_rank=16, index_n_heads=8,
           index_head_dim=16, index_topk=3, yarn_orig=64, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
           norm_eps=1e-6, rope_theta=10000.0, swiglu_limit=10.0, ratios=[0, 0, 4, 8, 4, 8], n_hash=3)
T = 20  # more than the window (8): the window slides
SEED = 16


def save_file(tensors, path):
    """A safetensors file (8-byte header length, JSON header, raw little-endian data) of numpy arrays."""
    names = {np.dtype(np.float32): "F32", np.dtype(np.int32): "I32"}
    header, off = {}, 0
    for k, a in tensors.items():
        header[k] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes())


def hf_config(c):
    m = {0: "sliding_attention", 4: "compressed_sparse_attention", 8: "heavily_compressed_attention"}
    n = c["num_hidden_layers"]
    return {
        "model_type": "deepseek_v4", "vocab_size": c["vocab_size"], "hidden_size": c["hidden_size"],
        "moe_intermediate_size": c["moe_intermediate_size"], "num_hidden_layers": n,
        "num_attention_heads": c["num_attention_heads"], "num_key_value_heads": 1, "head_dim": c["head_dim"],
        "qk_rope_head_dim": c["rope_dim"], "partial_rotary_factor": c["rope_dim"] / c["head_dim"],
        "q_lora_rank": c["q_lora_rank"], "num_experts_per_tok": c["num_experts_per_tok"],
        "n_routed_experts": c["n_routed_experts"], "n_shared_experts": 1, "scoring_func": "sqrtsoftplus",
        "norm_topk_prob": True, "routed_scaling_factor": c["routed_scaling_factor"],
        "sliding_window": c["sliding_window"], "o_groups": c["o_groups"], "o_lora_rank": c["o_lora_rank"],
        "index_n_heads": c["index_n_heads"], "index_head_dim": c["index_head_dim"], "index_topk": c["index_topk"],
        "hc_mult": c["hc_mult"], "hc_sinkhorn_iters": c["hc_sinkhorn_iters"], "hc_eps": c["hc_eps"],
        "rms_norm_eps": c["norm_eps"], "rope_theta": c["rope_theta"], "compress_rope_theta": 160000.0,
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": c["rope_theta"],
                     "partial_rotary_factor": c["rope_dim"] / c["head_dim"]},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0,
                         "original_max_position_embeddings": c["yarn_orig"], "beta_fast": 32.0, "beta_slow": 1.0,
                         "attention_factor": 1.0, "partial_rotary_factor": c["rope_dim"] / c["head_dim"]}},
        "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        "layer_types": [m[r] for r in c["ratios"]],
        "mlp_layer_types": ["hash_moe" if i < c["n_hash"] else "moe" for i in range(n)],
        "swiglu_limit": c["swiglu_limit"], "max_position_embeddings": 1024, "bos_token_id": 0, "eos_token_id": 1,
        "num_nextn_predict_layers": 1, "tie_word_embeddings": False,
    }


def random_weights(c, gen):
    """Official names (the MTP block is mtp.0.*), values like gen_hf_fixtures.py randomise()."""
    D, H, HD, QL = c["hidden_size"], c["num_attention_heads"], c["head_dim"], c["q_lora_rank"]
    G, R, E, I, HC = c["o_groups"], c["o_lora_rank"], c["n_routed_experts"], c["moe_intermediate_size"], c["hc_mult"]
    V, MIX = c["vocab_size"], (2 + c["hc_mult"]) * c["hc_mult"]

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=DT) * std + mean

    def mat(o, i):
        return normal((o, i), 1.0 / math.sqrt(i))

    w = {"embed.weight": normal((V, D), 1.0), "head.weight": mat(V, D)}
    m = "mtp.0."
    w[m + "e_proj.weight"] = mat(D, D)
    w[m + "h_proj.weight"] = mat(D, D)
    for n in ("enorm", "hnorm", "norm", "attn_norm", "ffn_norm"):
        w[m + n + ".weight"] = normal((D,), 0.1, 1.0)
    w[m + "hc_head_fn"] = mat(HC, HC * D)
    w[m + "hc_head_base"] = normal((HC,), 0.5)
    w[m + "hc_head_scale"] = torch.rand((1,), generator=gen, dtype=DT) + 0.5
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
    return w


def rmsnorm(x, weight, eps):  # RMSNorm
    return weight * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps))


def freqs_cis(rd, n, theta):  # precompute_freqs_cis without YaRN (ratio-0 layers)
    freqs = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=DT) / rd))
    ang = torch.outer(torch.arange(n, dtype=DT), freqs)
    return torch.polar(torch.ones_like(ang), ang)


def rope(x, fc, inverse=False):  # apply_rotary_emb on the last rd channels: interleaved pairs
    rd = fc.shape[-1] * 2
    head, tail = x[..., :-rd], x[..., -rd:]
    z = torch.view_as_complex(tail.contiguous().unflatten(-1, (-1, 2)))
    fc = fc.conj() if inverse else fc
    shape = [fc.shape[0]] + [1] * (z.dim() - 2) + [fc.shape[1]]
    z = torch.view_as_real(z * fc.view(shape)).flatten(-2)
    return torch.cat([head, z], dim=-1)


def hc_split_sinkhorn(mixes, scale, base, hc, iters, eps):  # ds4-model-spec.md 4.1
    pre = torch.sigmoid(mixes[..., :hc] * scale[0] + base[:hc]) + eps
    post = 2 * torch.sigmoid(mixes[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    comb = (mixes[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
    comb = torch.softmax(comb, dim=-1) + eps
    comb = comb / (comb.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        comb = comb / (comb.sum(-1, keepdim=True) + eps)
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
    return pre, post, comb


def hc_pre(x, fn, scale, base, c):  # Block.hc_pre; x [T, hc, D]
    flat = x.flatten(1)
    rs = torch.rsqrt(flat.square().mean(-1, keepdim=True) + c["norm_eps"])
    mixes = F.linear(flat, fn) * rs
    pre, post, comb = hc_split_sinkhorn(mixes, scale, base, c["hc_mult"], c["hc_sinkhorn_iters"], c["hc_eps"])
    return torch.sum(pre.unsqueeze(-1) * x, dim=1), post, comb


def hc_post(y, residual, post, comb):  # Block.hc_post: X'_k = post_k y + sum_j comb[j][k] X_j
    return post.unsqueeze(-1) * y.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=1)


def attention(x, w, c):  # Attention.forward, compress ratio 0, start_pos 0 (window rows only)
    Tn = x.shape[0]
    H, HD, rd, win, eps = c["num_attention_heads"], c["head_dim"], c["rope_dim"], c["sliding_window"], c["norm_eps"]
    a = "mtp.0.attn."
    fc = freqs_cis(rd, Tn, c["rope_theta"])
    q = rmsnorm(F.linear(x, w[a + "wq_a.weight"]), w[a + "q_norm.weight"], eps)
    q = F.linear(q, w[a + "wq_b.weight"]).unflatten(-1, (H, HD))
    q = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + eps)
    q = rope(q, fc)
    kv = rope(rmsnorm(F.linear(x, w[a + "wkv.weight"]), w[a + "kv_norm.weight"], eps), fc)
    # sparse_attn over the window rows max(0, p - win + 1) .. p, with the per-head sink logit
    o = torch.zeros(Tn, H, HD, dtype=DT)
    scale = HD ** -0.5
    sink = w[a + "attn_sink"]
    for p in range(Tn):
        rows = kv[max(0, p - win + 1):p + 1]                 # [n, HD]
        logits = (q[p] @ rows.T) * scale                      # [H, n]
        m = torch.maximum(logits.max(-1).values, sink)
        e = torch.exp(logits - m.unsqueeze(-1))
        o[p] = (e @ rows) / (e.sum(-1) + torch.exp(sink - m)).unsqueeze(-1)
    o = rope(o, fc, inverse=True)
    G, R = c["o_groups"], c["o_lora_rank"]
    o = o.reshape(Tn, G, -1)
    wo_a = w[a + "wo_a.weight"].view(G, R, -1)
    o = torch.einsum("sgd,grd->sgr", o, wo_a)
    return F.linear(o.flatten(1), w[a + "wo_b.weight"])


def expert(x, w1, w3, w2, limit, weights=None):  # Expert.forward with the clamps
    gate, up = F.linear(x, w1), F.linear(x, w3)
    up = torch.clamp(up, min=-limit, max=limit)
    gate = torch.clamp(gate, max=limit)
    h = F.silu(gate) * up
    if weights is not None:
        h = weights * h
    return F.linear(h, w2)


def moe(x, w, c):  # Gate (score-routed, sqrtsoftplus, bias for selection only) + MoE
    f = "mtp.0.ffn."
    scores = F.softplus(F.linear(x, w[f + "gate.weight"])).sqrt()
    idx = (scores + w[f + "gate.bias"]).topk(c["num_experts_per_tok"], dim=-1)[1]
    weights = scores.gather(1, idx)
    weights = weights / weights.sum(-1, keepdim=True) * c["routed_scaling_factor"]
    y = torch.zeros_like(x)
    lim = c["swiglu_limit"]
    for e in range(c["n_routed_experts"]):  # ascending expert id, as REF accumulates
        rows, top = torch.where(idx == e)
        if rows.numel() == 0:
            continue
        g = f + f"experts.{e}."
        y[rows] += expert(x[rows], w[g + "w1.weight"], w[g + "w3.weight"], w[g + "w2.weight"], lim,
                          weights[rows, top, None])
    s = f + "shared_experts."
    return y + expert(x, w[s + "w1.weight"], w[s + "w3.weight"], w[s + "w2.weight"], lim)


def mtp_block(X, tokens, w, c):  # MTPBlock.forward (all rows' logits, not only the last)
    eps, m = c["norm_eps"], "mtp.0."
    e = rmsnorm(w["embed.weight"][tokens], w[m + "enorm.weight"], eps)
    x = rmsnorm(X, w[m + "hnorm.weight"], eps)
    x = F.linear(e, w[m + "e_proj.weight"]).unsqueeze(1) + F.linear(x, w[m + "h_proj.weight"])
    # Block.forward
    res = x
    u, post, comb = hc_pre(x, w[m + "hc_attn_fn"], w[m + "hc_attn_scale"], w[m + "hc_attn_base"], c)
    y = attention(rmsnorm(u, w[m + "attn_norm.weight"], eps), w, c)
    x = hc_post(y, res, post, comb)
    res = x
    u, post, comb = hc_pre(x, w[m + "hc_ffn_fn"], w[m + "hc_ffn_scale"], w[m + "hc_ffn_base"], c)
    y = moe(rmsnorm(u, w[m + "ffn_norm.weight"], eps), w, c)
    x_out = hc_post(y, res, post, comb)
    # ParallelHead with the MTP's hc_head and norm
    flat = x_out.flatten(1)
    rs = torch.rsqrt(flat.square().mean(-1, keepdim=True) + eps)
    mixes = F.linear(flat, w[m + "hc_head_fn"]) * rs
    pre = torch.sigmoid(mixes * w[m + "hc_head_scale"] + w[m + "hc_head_base"]) + c["hc_eps"]
    h = torch.sum(pre.unsqueeze(-1) * x_out, dim=1)
    logits = F.linear(rmsnorm(h, w[m + "norm.weight"], eps), w["head.weight"])
    return logits, x_out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = os.path.join(sys.argv[1], "mtp-tiny")
    os.makedirs(out, exist_ok=True)
    c = CFG
    gen = torch.Generator().manual_seed(SEED)
    w = random_weights(c, gen)
    tokens = torch.randint(3, c["vocab_size"], (T,), generator=gen)
    X = torch.randn((T, c["hc_mult"], c["hidden_size"]), generator=gen, dtype=DT)
    with torch.no_grad():
        logits, x_out = mtp_block(X, tokens, w, c)
        # The block is causal: row p's outputs must not depend on rows after it.
        l2, _ = mtp_block(X[:T // 2], tokens[:T // 2], w, c)
        causal = float((l2 - logits[:T // 2]).abs().max())
    assert causal < 1e-9, causal
    f32 = lambda t: np.ascontiguousarray(t.to(torch.float32).numpy())
    save_file({k: f32(v) for k, v in w.items()}, os.path.join(out, "model.safetensors"))
    save_file({"tokens": np.ascontiguousarray(tokens.to(torch.int32).numpy()), "hidden": f32(X),
               "logits": f32(logits), "hidden_out": f32(x_out)}, os.path.join(out, "expected.safetensors"))
    with open(os.path.join(out, "config.json"), "w") as fh:
        json.dump(hf_config(c), fh, indent=2)
    meta = {"generator": "scripts/gen_mtp_fixtures.py: DeepSeek-V4 MTPBlock after inference/model.py, float64, CPU",
            "torch": torch.__version__, "numpy": np.__version__, "seed": SEED, "T": T,
            "causal_check_max_abs": causal, "logits_max_abs": float(logits.abs().max())}
    with open(os.path.join(out, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
    print(f"wrote {out}: T={T}, logits max |x| {meta['logits_max_abs']:.3f}")


if __name__ == "__main__":
    main()
