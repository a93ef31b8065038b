"""hf_llama.py: a Hugging Face LlamaForCausalLM folder written by PyTorch,
and the model's computation, for tests/hf_torch.py and bench/.

No transformers (Debian has none): the folder is what save_pretrained writes
for LlamaForCausalLM (config.json; model.safetensors, or shards and
model.safetensors.index.json), the safetensors format written by hand (an
8-byte little-endian header length, a JSON header, raw little-endian data),
and the forward pass is transformers' LlamaForCausalLM written out:
RMSNorm (rms_norm_eps), RoPE with rotate_half (rope_theta), grouped-query
attention with repeat_kv (each key/value head repeated for its group of
num_attention_heads / num_key_value_heads query heads), SwiGLU, tied or
untied head."""
import json
import math
import os
import struct

import torch
import torch.nn.functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def hf_config(cfg, v5=False):
    """config.json of a LlamaForCausalLM of shape cfg (layers, dim, heads, kv_heads, ffn, vocab, ...); v5: as
    transformers 5 writes it (RoPE's base in rope_parameters, head_dim and dtype given, no rope_scaling)."""
    if v5:
        c = hf_config(cfg)
        for k in ("rope_theta", "rope_scaling", "torch_dtype"):
            del c[k]
        c.update({"rope_parameters": {"rope_theta": cfg.get("theta", 10000.0), "rope_type": "default"},
                  "head_dim": cfg["dim"] // cfg["heads"], "dtype": "bfloat16", "pad_token_id": None,
                  "transformers_version": "5.25.0"})
        return c
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": cfg["dim"], "num_hidden_layers": cfg["layers"], "num_attention_heads": cfg["heads"],
        "num_key_value_heads": cfg["kv_heads"], "intermediate_size": cfg["ffn"], "vocab_size": cfg["vocab"],
        "rms_norm_eps": cfg.get("eps", 1e-5), "rope_theta": cfg.get("theta", 10000.0), "rope_scaling": None,
        "tie_word_embeddings": cfg.get("tie", False), "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": 0.0, "mlp_bias": False, "max_position_embeddings": 2048, "pretraining_tp": 1,
        "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16",
        "transformers_version": "4.44.0", "use_cache": True,
    }


def shapes(cfg):
    """(name, shape) of every tensor, in LlamaForCausalLM's order."""
    L, C, V, Fd = cfg["layers"], cfg["dim"], cfg["vocab"], cfg["ffn"]
    Ckv = C // cfg["heads"] * cfg["kv_heads"]
    out = [("model.embed_tokens.weight", (V, C))]
    for l in range(L):
        p = "model.layers.%d." % l
        out += [(p + "input_layernorm.weight", (C,)),
                (p + "self_attn.q_proj.weight", (C, C)), (p + "self_attn.k_proj.weight", (Ckv, C)),
                (p + "self_attn.v_proj.weight", (Ckv, C)), (p + "self_attn.o_proj.weight", (C, C)),
                (p + "post_attention_layernorm.weight", (C,)),
                (p + "mlp.gate_proj.weight", (Fd, C)), (p + "mlp.up_proj.weight", (Fd, C)),
                (p + "mlp.down_proj.weight", (C, Fd))]
    out.append(("model.norm.weight", (C,)))
    if not cfg.get("tie", False):
        out.append(("lm_head.weight", (V, C)))
    return out


def random_params(cfg, seed, dtype="BF16", std=0.02):
    """Random weights (norms near 1, matrices N(0, std)), rounded to dtype and
    widened back to fp32: what a checkpoint in that dtype holds."""
    g = torch.Generator().manual_seed(seed)
    P = {}
    for name, shape in shapes(cfg):
        if len(shape) == 1:
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            t = std * torch.randn(shape, generator=g)
        P[name] = t.to(DTYPES[dtype]).to(torch.float32)
    return P


def st_bytes(tensors, dtype, metadata=None):
    """A safetensors file of tensors (name -> fp32 tensor) stored as dtype."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().to(DTYPES[dtype]).contiguous()
        raw = (t.view(torch.int16) if dtype in ("F16", "BF16") else t).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def read_st(path):
    """name -> fp32 tensor of a safetensors file (F32, F16, BF16)."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base, out = 8 + n, {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = bytearray(data[base + b:base + en])
        if e["dtype"] == "F32":
            t = torch.frombuffer(raw, dtype=torch.float32)
        else:
            t = torch.frombuffer(raw, dtype=torch.int16).view(DTYPES[e["dtype"]]).to(torch.float32)
        out[name] = t.reshape(e["shape"]).clone()
    return out


def write_folder(path, cfg, P, dtype="BF16", shards=1, config=None):
    """config.json and the weights: model.safetensors, or `shards` files and the index."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config if config is not None else hf_config(cfg), f, indent=2)
    names = [n for n, _ in shapes(cfg)]
    if shards == 1:
        with open(os.path.join(path, "model.safetensors"), "wb") as f:
            f.write(st_bytes({n: P[n] for n in names}, dtype, {"format": "pt"}))
        return
    per = (len(names) + shards - 1) // shards
    weight_map = {}
    for s in range(shards):
        fname = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = names[s * per:(s + 1) * per]
        with open(os.path.join(path, fname), "wb") as f:
            f.write(st_bytes({n: P[n] for n in part}, dtype, {"format": "pt"}))
        weight_map.update({n: fname for n in part})
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f, indent=2)


def write_random_folder(path, cfg, seed, dtype="BF16", std=0.02):
    """A one-file folder of random weights (as random_params draws them),
    generated and written a tensor at a time, so a 1B-parameter model never
    sits in memory whole (bench/hf_finetune.sh's TinyLlama shape)."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config(cfg), f, indent=2)
    size = 4 if dtype == "F32" else 2
    header, off = {}, 0
    for name, shape in shapes(cfg):
        n = size * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    g = torch.Generator().manual_seed(seed)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for name, shape in shapes(cfg):
            t = 1.0 + 0.1 * torch.randn(shape, generator=g) if len(shape) == 1 else std * torch.randn(shape, generator=g)
            t = t.to(DTYPES[dtype]).contiguous()
            f.write((t.view(torch.int16) if dtype in ("F16", "BF16") else t).numpy().tobytes())
            del t


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(T, hd, theta, dtype):
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    emb = torch.outer(torch.arange(T, dtype=torch.float32), inv_freq)
    emb = torch.cat((emb, emb), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def repeat_kv(x, n_rep):
    """transformers' repeat_kv: (B,K,T,hd) -> (B,K*n_rep,T,hd), each head n_rep times in place."""
    B, K, T, hd = x.shape
    return x[:, :, None].expand(B, K, n_rep, T, hd).reshape(B, K * n_rep, T, hd)


def logits(P, cfg, idx, linear=F.linear):
    """LlamaForCausalLM's logits (B,T,V) for ids idx (B,T). linear(x, name) may
    add LoRA to a projection (default: the plain weight)."""
    L, C, H, K = cfg["layers"], cfg["dim"], cfg["heads"], cfg["kv_heads"]
    B, T = idx.shape
    hd = C // H
    eps, theta = cfg.get("eps", 1e-5), cfg.get("theta", 10000.0)
    dtype = P["model.norm.weight"].dtype
    cos, sin = rope(T, hd, theta, dtype)
    lin = (lambda x, n: F.linear(x, P[n])) if linear is F.linear else linear
    x = P["model.embed_tokens.weight"][idx]
    for l in range(L):
        p = "model.layers.%d." % l
        h = rms_norm(x, P[p + "input_layernorm.weight"], eps)
        q = lin(h, p + "self_attn.q_proj.weight").view(B, T, H, hd).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj.weight").view(B, T, K, hd).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj.weight").view(B, T, K, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = repeat_kv(k, H // K), repeat_kv(v, H // K)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        s = s.masked_fill(~torch.tril(torch.ones(T, T, dtype=torch.bool)), float("-inf"))
        a = (s.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(a, p + "self_attn.o_proj.weight")
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        m = F.silu(lin(h, p + "mlp.gate_proj.weight")) * lin(h, p + "mlp.up_proj.weight")
        x = x + lin(m, p + "mlp.down_proj.weight")
    head = P["model.embed_tokens.weight"] if cfg.get("tie", False) else P["lm_head.weight"]
    return F.linear(rms_norm(x, P["model.norm.weight"], eps), head)
