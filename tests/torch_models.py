#!/usr/bin/python3
"""torch_models.py: the PyTorch cross-check (tests/torch_crosscheck.py) for
the models of issue 11: a small LLaMA, U-ViT-style GPT and encoder-decoder
written here in PyTorch, with the tensor names remat uses.

Usage: /usr/bin/python3 tests/torch_models.py --remat build/remat [--keep DIR] [--verbose] [--only NAME]

Each scenario writes random weights with these names to a .safetensors file,
runs `remat train --init FILE ... --steps 5 --dropout 0 --save OUT`, replays
the same 5 steps here in float32 (and float64 for the round-off scale) and
compares every parameter, the last training loss and the validation loss,
with torch_crosscheck.py's tolerances (SGD 1e-5, AdamW 5e-5, losses 1e-5).
Printed last: "test_torch_models: N passed, N failed".

  * llama: Hugging Face LlamaForCausalLM's computation and names: RMSNorm
    (eps 1e-6), rotate_half RoPE (theta 10000), SwiGLU, no biases, untied
    lm_head. A file that passes here loads into transformers' LlamaForCausalLM
    (not installed here) with num_key_value_heads = heads, rms_norm_eps 1e-6,
    tie_word_embeddings False.
  * uvit: nanoGPT blocks; for i < L//2 the input of block L-1-i is
    Linear(2C->C)(cat(x, h_i)).
  * encdec: pre-norm encoder-decoder with key padding masks and a loss that
    ignores PAD; data from a tab-separated pairs file, batches drawn with
    Philox exactly as src/train/seq2seq.c does (implemented below).
"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_crosscheck as tc  # noqa: E402

BOS, EOS, PAD, ENCDEC_VOCAB = 256, 257, 258, 259
EVAL_SEED = 0x6576616C  # cli/train.c: encdec evaluates on batches of seed ^ this
SEED = 1337             # remat train's default --seed


def normal(g, shape, std, mean=0.0):
    return (torch.randn(shape, generator=g, dtype=torch.float64) * std + mean).float().numpy()


def random_init(names_shapes, seed):
    """(name, shape, std) -> [(name, array)]; std None: a gain 1 + N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    return [(n, normal(g, s, 0.1, 1.0) if std is None else normal(g, s, std)) for n, s, std in names_shapes]


# ---- llama -------------------------------------------------------------------

def llama_ffn(cfg):
    f = (8 * cfg["dim"] + 2) // 3
    return cfg.get("ffn_dim") or (f + 63) // 64 * 64


def llama_shapes(cfg):
    L, C, V, Fd = cfg["layers"], cfg["dim"], cfg["vocab"], llama_ffn(cfg)
    out = [("model.embed_tokens.weight", (V, C), 0.3)]
    for l in range(L):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", (C,), None),
                (p + "self_attn.q_proj.weight", (C, C), 0.3), (p + "self_attn.k_proj.weight", (C, C), 0.3),
                (p + "self_attn.v_proj.weight", (C, C), 0.3), (p + "self_attn.o_proj.weight", (C, C), 0.1),
                (p + "post_attention_layernorm.weight", (C,), None),
                (p + "mlp.gate_proj.weight", (Fd, C), 0.3), (p + "mlp.up_proj.weight", (Fd, C), 0.3),
                (p + "mlp.down_proj.weight", (C, Fd), 0.1)]
    return out + [("model.norm.weight", (C,), None), ("lm_head.weight", (V, C), 0.3)]


def rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_cos_sin(T, hd, dtype, theta=10000.0):
    """HF LlamaRotaryEmbedding: inv_freq = 1/theta^(2i/hd), emb = cat(freqs, freqs)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    freqs = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def heads(x, H):  # (B,T,C) -> (B,H,T,hd)
    B, T, C = x.shape
    return x.view(B, T, H, C // H).transpose(1, 2)


def attend(q, k, v, causal, key_mask=None):
    """q (B,H,Tq,hd), k, v (B,H,Tk,hd); key_mask (B,Tk) bool, True = visible."""
    s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if causal:
        Tq, Tk = s.shape[-2], s.shape[-1]
        s = s.masked_fill(~torch.tril(torch.ones(Tq, Tk, dtype=torch.bool)), float("-inf"))
    if key_mask is not None:
        s = s.masked_fill(~key_mask[:, None, None, :], float("-inf"))
    y = s.softmax(dim=-1) @ v
    B, H, Tq, hd = y.shape
    return y.transpose(1, 2).reshape(B, Tq, H * hd)


def llama_logits(P, idx, cfg, lin=None):
    """LlamaForCausalLM's logits; lin(x, name) applies the linear layer whose
    weight is `name` (F.linear by default; tests/torch_lora.py adds LoRA)."""
    lin = lin or (lambda x, n: F.linear(x, P[n]))
    L, C, H = cfg["layers"], cfg["dim"], cfg["heads"]
    T = idx.shape[1]
    dtype = P["lm_head.weight"].dtype
    cos, sin = rope_cos_sin(T, C // H, dtype)
    x = P["model.embed_tokens.weight"][idx]
    for l in range(L):
        p = "model.layers.%d." % l
        h = rms_norm(x, P[p + "input_layernorm.weight"])
        q = heads(lin(h, p + "self_attn.q_proj.weight"), H)
        k = heads(lin(h, p + "self_attn.k_proj.weight"), H)
        v = heads(lin(h, p + "self_attn.v_proj.weight"), H)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        x = x + lin(attend(q, k, v, True), p + "self_attn.o_proj.weight")
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"])
        m = F.silu(lin(h, p + "mlp.gate_proj.weight")) * lin(h, p + "mlp.up_proj.weight")
        x = x + lin(m, p + "mlp.down_proj.weight")
    return lin(rms_norm(x, P["model.norm.weight"]), "lm_head.weight")


def llama_loss(P, idx, tgt, cfg, lin=None):
    logits = llama_logits(P, idx, cfg, lin)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


# ---- uvit --------------------------------------------------------------------

def uvit_names(cfg):
    L = cfg["layers"]
    extra = []
    for i in range(L // 2):
        p = "transformer.h.%d.skip_linear." % (L - 1 - i)
        extra += [p + "weight", p + "bias"]
    return tc.gpt_names(L) + extra


def uvit_init(cfg, seed):
    C = cfg["dim"]
    out = tc.gpt_init(cfg["layers"], C, cfg["context"], cfg["vocab"], seed)
    g = torch.Generator().manual_seed(seed + 1)
    for n in uvit_names(cfg)[len(out):]:
        out.append((n, normal(g, (C, 2 * C), 0.2) if n.endswith("weight") else normal(g, (C,), 0.05)))
    return out


def gpt_block(P, p, x, H):
    C = x.shape[-1]
    h = F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], 1e-5)
    q, k, v = F.linear(h, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"]).split(C, dim=2)
    y = attend(heads(q, H), heads(k, H), heads(v, H), True)
    x = x + F.linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])
    h = F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], 1e-5)
    h = F.gelu(F.linear(h, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"]), approximate="tanh")
    return x + F.linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])


def uvit_loss(P, idx, tgt, cfg):
    L, C, H = cfg["layers"], cfg["dim"], cfg["heads"]
    T = idx.shape[1]
    x = P["transformer.wte.weight"][idx] + P["transformer.wpe.weight"][:T]
    hs = []
    for l in range(L):
        p = "transformer.h.%d." % l
        i = L - 1 - l
        if i < L // 2:  # U-ViT's long skip from block i
            x = F.linear(torch.cat([x, hs[i]], dim=-1), P[p + "skip_linear.weight"], P[p + "skip_linear.bias"])
        x = gpt_block(P, p, x, H)
        if l < L // 2:
            hs.append(x)
    x = F.layer_norm(x, (C,), P["transformer.ln_f.weight"], P["transformer.ln_f.bias"], 1e-5)
    logits = F.linear(x, P["transformer.wte.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


# ---- encdec --------------------------------------------------------------------

def encdec_shapes(cfg):
    C, T, V = cfg["dim"], cfg["context"], cfg["vocab"]

    def ln(p):
        return [(p + ".weight", (C,), None), (p + ".bias", (C,), 0.05)]

    def attn(p):
        out = []
        for k in ("q_proj", "k_proj", "v_proj", "o_proj"):
            out += [("%s.%s.weight" % (p, k), (C, C), 0.1 if k == "o_proj" else 0.3),
                    ("%s.%s.bias" % (p, k), (C,), 0.05)]
        return out

    def mlp(p):
        return [(p + ".mlp.fc.weight", (4 * C, C), 0.3), (p + ".mlp.fc.bias", (4 * C,), 0.05),
                (p + ".mlp.proj.weight", (C, 4 * C), 0.05), (p + ".mlp.proj.bias", (C,), 0.05)]

    out = [("encoder.embed_tokens.weight", (V, C), 0.3), ("encoder.embed_positions.weight", (T, C), 0.3)]
    for l in range(cfg["enc_layers"]):
        p = "encoder.layers.%d" % l
        out += ln(p + ".ln_1") + attn(p + ".attn") + ln(p + ".ln_2") + mlp(p)
    out += ln("encoder.ln_f")
    out += [("decoder.embed_tokens.weight", (V, C), 0.3), ("decoder.embed_positions.weight", (T, C), 0.3)]
    for l in range(cfg["dec_layers"]):
        p = "decoder.layers.%d" % l
        out += ln(p + ".ln_1") + attn(p + ".self_attn") + ln(p + ".ln_2") + attn(p + ".cross_attn")
        out += ln(p + ".ln_3") + mlp(p)
    return out + ln("decoder.ln_f") + [("lm_head.weight", (V, C), 0.3)]


def encdec_loss(P, src, mask, tok, tgt, cfg):
    C, H = cfg["dim"], cfg["heads"]
    T = src.shape[1]
    keys = mask.bool()

    def ln(x, p):
        return F.layer_norm(x, (C,), P[p + ".weight"], P[p + ".bias"], 1e-5)

    def lin(x, p):
        return F.linear(x, P[p + ".weight"], P[p + ".bias"])

    def attn(xq, xkv, p, causal, key_mask):
        y = attend(heads(lin(xq, p + ".q_proj"), H), heads(lin(xkv, p + ".k_proj"), H),
                   heads(lin(xkv, p + ".v_proj"), H), causal, key_mask)
        return lin(y, p + ".o_proj")

    def mlp(x, p):
        return lin(F.gelu(lin(x, p + ".mlp.fc"), approximate="tanh"), p + ".mlp.proj")

    x = P["encoder.embed_tokens.weight"][src] + P["encoder.embed_positions.weight"][:T]
    for l in range(cfg["enc_layers"]):
        p = "encoder.layers.%d" % l
        h = ln(x, p + ".ln_1")
        x = x + attn(h, h, p + ".attn", False, keys)
        x = x + mlp(ln(x, p + ".ln_2"), p)
    enc = ln(x, "encoder.ln_f")
    y = P["decoder.embed_tokens.weight"][tok] + P["decoder.embed_positions.weight"][:T]
    for l in range(cfg["dec_layers"]):
        p = "decoder.layers.%d" % l
        h = ln(y, p + ".ln_1")
        y = y + attn(h, h, p + ".self_attn", True, None)
        y = y + attn(ln(y, p + ".ln_2"), enc, p + ".cross_attn", False, keys)
        y = y + mlp(ln(y, p + ".ln_3"), p)
    logits = F.linear(ln(y, "decoder.ln_f"), P["lm_head.weight"])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=PAD)


# Philox4x32-10 and rm_philox_uniform, as src/util/philox.c
M32 = 0xFFFFFFFF


def philox_uniform(seed, a, b, i):
    c = [i & M32, (i >> 32) & M32, a & M32, b & M32]
    k = [seed & M32, (seed >> 32) & M32]
    for r in range(10):
        if r > 0:
            k = [(k[0] + 0x9E3779B9) & M32, (k[1] + 0xBB67AE85) & M32]
        p0, p1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & M32, p1 & M32, ((p0 >> 32) ^ c[3] ^ k[1]) & M32, p0 & M32]
    return (c[0] >> 8) / 16777216.0


def seq2seq_row(src, tgt, T):
    """rm_seq2seq_row: source/PAD, mask, BOS + shifted target, target + EOS/PAD."""
    source = [src[t] if t < len(src) else PAD for t in range(T)]
    mask = [1 if t < len(src) else 0 for t in range(T)]
    targets = [tgt[t] if t < len(tgt) else EOS if t == len(tgt) else PAD for t in range(T)]
    tokens = [BOS] + [PAD if y == EOS else y for y in targets[:-1]]
    return source, mask, tokens, targets


def encdec_batch(part, k, cfg, dtype):
    """rm_seq2seq_batch over a pairs file: row r of batch k takes pair
    floor(u * n), u = rm_philox_uniform(seed, k, r, 0)."""
    pairs, seed = part
    rows = []
    for r in range(cfg["batch"]):
        i = min(int(math.floor(philox_uniform(seed, k, r, 0) * len(pairs))), len(pairs) - 1)
        rows.append(seq2seq_row(pairs[i][0], pairs[i][1], cfg["context"]))
    return tuple(torch.tensor([row[j] for row in rows], dtype=torch.int64) for j in range(4))


def encdec_data(name, opt):
    """Pairs "source<TAB>target" of random lowercase strings, some longer
    than the context (truncated), the target the reverse of the source."""
    rng = np.random.RandomState(len(name))
    pairs, lines = [], []
    for _ in range(12):
        n = int(rng.randint(1, 14))
        s = bytes(rng.randint(97, 123, size=n).astype(np.uint8))
        pairs.append((list(s), list(s[::-1])))
        lines.append(s + b"\t" + s[::-1])
    return b"\n".join(lines) + b"\n", (pairs, SEED), (pairs, SEED ^ EVAL_SEED)


tc.MODELS.update({
    "llama": dict(names=lambda cfg: [n for n, _, _ in llama_shapes(cfg)],
                  init=lambda cfg, seed: random_init(llama_shapes(cfg), seed), loss=llama_loss,
                  batch=tc.gpt_batch, val_batches=tc.lm_val_batches, data=tc.text_data,
                  args=lambda cfg: tc.layer_args(cfg) + (["--ffn-dim", str(cfg["ffn_dim"])] if cfg.get("ffn_dim") else [])),
    "uvit": dict(names=uvit_names, init=uvit_init, loss=uvit_loss, batch=tc.gpt_batch,
                 val_batches=tc.lm_val_batches, args=tc.layer_args, data=tc.text_data),
    "encdec": dict(names=lambda cfg: [n for n, _, _ in encdec_shapes(cfg)],
                   init=lambda cfg, seed: random_init(encdec_shapes(cfg), seed), loss=encdec_loss,
                   batch=encdec_batch, val_batches=lambda val, cfg: 20, data=encdec_data,
                   args=lambda cfg: ["--enc-layers", str(cfg["enc_layers"]), "--dec-layers", str(cfg["dec_layers"]),
                                     "--dim", str(cfg["dim"]), "--heads", str(cfg["heads"])]),
})


def main():
    llama = {"model": "llama", "layers": 2, "dim": 32, "heads": 4, "context": 16, "vocab": 256, "batch": 4}
    uvit = {"model": "uvit", "layers": 4, "dim": 32, "heads": 4, "context": 16, "vocab": 256, "batch": 4}
    encdec = {"model": "encdec", "enc_layers": 2, "dec_layers": 2, "dim": 32, "heads": 4, "context": 10,
              "vocab": ENCDEC_VOCAB, "batch": 4}
    base = {"steps": 5, "val_fraction": 0.1, "text_bytes": 1500, "weight_decay": 0.0}
    sgd = dict(base, optimizer="sgd", lr=0.1, grad_clip=0.0)
    adamw = dict(base, optimizer="adamw", lr=1e-3, weight_decay=0.1, grad_clip=1.0)
    scenarios = [
        ("llama_sgd", llama, sgd), ("llama_adamw_clip", llama, adamw),
        ("llama_ffn96_sgd", dict(llama, ffn_dim=96), sgd),
        ("llama_adamw_freeze", llama, dict(adamw, freeze="model.embed_tokens,model.layers.0.self_attn,lm_head")),
        ("uvit_sgd", uvit, sgd), ("uvit_adamw_clip", uvit, adamw),
        ("encdec_sgd", encdec, sgd), ("encdec_adamw_clip", encdec, adamw),
    ]
    return tc.run_all(scenarios, "test_torch_models")


if __name__ == "__main__":
    sys.exit(main())
