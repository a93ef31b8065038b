#!/usr/bin/python3
"""bench_torch.py: the PyTorch peer of `remat train` for the speed benchmark.

The same GPT as remat's (nanoGPT layout: pre-norm blocks, fused qkv, GELU
with the tanh approximation, tied head, learned positions), eager mode,
float32, AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on 2-D weights),
gradient clipping at 1.0 (remat's default), no dropout, random tokens.
Runs --warmup untimed steps and --steps timed ones and prints one JSON
object: step_ms_median, step_ms (all timed steps), peak_rss_bytes (getrusage
ru_maxrss of this process: includes the ~100-300 MB of the Python and torch
libraries, see base_rss_bytes, the peak right after importing torch),
params, tokens_per_step, threads, torch version...

Threads: torch.set_num_threads(N) for ATen's OpenMP pool, and
OPENBLAS_NUM_THREADS=N (set here before torch loads OpenBLAS; Debian's torch
multiplies matrices with the system's libblas, i.e. OpenBLAS).

Recomputation, for comparisons with remat's --checkpoint:
  --checkpoint none        keep everything (default)
  --checkpoint block       each transformer block under
                           torch.utils.checkpoint.checkpoint(use_reentrant=False)
                           (--reentrant: use_reentrant=True, the older autograd.Function
                           implementation)
  --checkpoint selective   per op, as far as 1.13 allows: in each block the
                           attention core (scores, softmax, weighted sum) and the
                           GELU are recomputed: checkpoint of the attention core, and
                           of GELU + the projection after it (that projection's
                           weight gradient reads the GELU's output, so checkpointing
                           the GELU alone would keep it); other outputs are kept
  --checkpoint sequential --segments K
                           the blocks split as checkpoint_sequential does
                           (K segments, the last one not recomputed); with
                           use_reentrant=False where this torch's
                           checkpoint_sequential accepts it, otherwise the same
                           split applied here with checkpoint(use_reentrant=False).

--model llama: the peer of `remat train --model llama` instead (docs/MODELS.md):
RMSNorm (eps 1e-6), rotate_half RoPE (theta 10000), SwiGLU (--ffn-dim, default
8/3 dim rounded up to 64), no biases, untied head, no position table.

--autocast bf16: the forward and the loss under torch.autocast("cpu",
dtype=torch.bfloat16), the peer of remat's --precision bf16 (bench/bf16.sh);
--sdpa: the attention as F.scaled_dot_product_attention (torch 2.x), as the
issue 29 measurements did.

Usage: /usr/bin/python3 bench/bench_torch.py --layers 12 --dim 384 --heads 6
       --context 256 --vocab 256 --batch 8 --threads 2 --warmup 2 --steps 10
"""
import argparse
import json
import math
import os
import resource
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description="PyTorch GPT training-step benchmark (remat's peer)")
    ap.add_argument("--model", choices=["gpt", "llama"], default="gpt")
    ap.add_argument("--ffn-dim", type=int, default=0, help="llama: SwiGLU hidden size (0: 8/3 dim up to 64)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0, help="0 disables")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--checkpoint", choices=["none", "block", "sequential", "selective"], default="none")
    ap.add_argument("--reentrant", action="store_true", help="--checkpoint block with use_reentrant=True")
    ap.add_argument("--segments", type=int, default=4, help="for --checkpoint sequential")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--autocast", choices=["none", "bf16"], default="none",
                    help="bf16: forward and loss under torch.autocast('cpu', dtype=torch.bfloat16), the peer of "
                         "remat's --precision bf16 (fp32 master weights and AdamW)")
    ap.add_argument("--sdpa", action="store_true",
                    help="gpt: attention through F.scaled_dot_product_attention(is_causal=True) (torch >= 2.0)")
    a = ap.parse_args()
    if a.dim % a.heads:
        ap.error("--dim must be divisible by --heads")
    if a.steps < 1 or a.threads < 1:
        ap.error("--steps and --threads must be >= 1")
    return a


def maxrss_bytes():
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r if sys.platform == "darwin" else r * 1024  # Linux reports KiB


def main():
    a = parse()
    # before torch (and with it OpenBLAS) is loaded: OpenBLAS reads these once
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    base_rss = maxrss_bytes()
    C, H, T, V, L, B = a.dim, a.heads, a.context, a.vocab, a.layers, a.batch

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(C, eps=1e-5)
            self.c_attn = nn.Linear(C, 3 * C)
            self.c_proj = nn.Linear(C, C)
            self.ln_2 = nn.LayerNorm(C, eps=1e-5)
            self.c_fc = nn.Linear(C, 4 * C)
            self.mlp_proj = nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

        def attend(self, qkv):
            Bx, Tx, _ = qkv.shape
            q, k, v = qkv.split(C, dim=2)
            q = q.view(Bx, Tx, H, C // H).transpose(1, 2)
            k = k.view(Bx, Tx, H, C // H).transpose(1, 2)
            v = v.view(Bx, Tx, H, C // H).transpose(1, 2)
            if a.sdpa:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(Bx, Tx, C)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask[:Tx, :Tx], float("-inf")).softmax(dim=-1)
            return (att @ v).transpose(1, 2).reshape(Bx, Tx, C)

        def forward(self, x):
            qkv = self.c_attn(self.ln_1(x))
            if a.checkpoint == "selective":  # recompute the attention core and GELU, keep the linears
                x = x + self.c_proj(checkpoint(self.attend, qkv, use_reentrant=False))
                mlp_out = checkpoint(lambda t: self.mlp_proj(F.gelu(t, approximate="tanh")),
                                     self.c_fc(self.ln_2(x)), use_reentrant=False)
                return x + mlp_out
            x = x + self.c_proj(self.attend(qkv))
            x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
            return x

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, C)
            self.wpe = nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f = nn.LayerNorm(C, eps=1e-5)
            self.register_buffer("pos", torch.arange(T), persistent=False)
            for n, p in self.named_parameters():  # GPT-2 init
                if p.dim() == 2:
                    std = 0.02 / math.sqrt(2 * L) if n.endswith("proj.weight") else 0.02
                    nn.init.normal_(p, 0.0, std)
                elif n.endswith("bias"):
                    nn.init.zeros_(p)

        def blocks(self, x):
            if a.checkpoint == "block":
                for blk in self.h:
                    x = checkpoint(blk, x, use_reentrant=a.reentrant)
                return x
            if a.checkpoint == "sequential":
                return run_sequential(list(self.h), a.segments, x)
            for blk in self.h:
                x = blk(x)
            return x

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(self.pos[: idx.shape[1]])
            x = self.ln_f(self.blocks(x))
            logits = F.linear(x, self.wte.weight)  # tied head
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    class LlamaBlock(nn.Module):
        """HF LlamaDecoderLayer's computation, no biases."""
        def __init__(self, F_dim):
            super().__init__()
            self.input_layernorm = nn.Parameter(torch.ones(C))
            self.q_proj, self.k_proj = nn.Linear(C, C, bias=False), nn.Linear(C, C, bias=False)
            self.v_proj, self.o_proj = nn.Linear(C, C, bias=False), nn.Linear(C, C, bias=False)
            self.post_attention_layernorm = nn.Parameter(torch.ones(C))
            self.gate_proj, self.up_proj = nn.Linear(C, F_dim, bias=False), nn.Linear(C, F_dim, bias=False)
            self.down_proj = nn.Linear(F_dim, C, bias=False)
            hd = C // H
            inv = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
            emb = torch.outer(torch.arange(T, dtype=torch.float32), inv).repeat(1, 2)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

        @staticmethod
        def rms(x, w):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

        def rope(self, x):
            h = x.shape[-1] // 2
            return x * self.cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * self.sin

        def forward(self, x):
            Bx, Tx, _ = x.shape
            h = self.rms(x, self.input_layernorm)
            q, k, v = (p(h).view(Bx, Tx, H, C // H).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
            q, k = self.rope(q), self.rope(k)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask[:Tx, :Tx], float("-inf")).softmax(dim=-1)
            x = x + self.o_proj((att @ v).transpose(1, 2).reshape(Bx, Tx, C))
            h = self.rms(x, self.post_attention_layernorm)
            return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    class Llama(nn.Module):
        def __init__(self):
            super().__init__()
            F_dim = a.ffn_dim or ((8 * C + 2) // 3 + 63) // 64 * 64
            self.embed_tokens = nn.Embedding(V, C)
            self.h = nn.ModuleList([LlamaBlock(F_dim) for _ in range(L)])
            self.norm = nn.Parameter(torch.ones(C))
            self.lm_head = nn.Linear(C, V, bias=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            x = self.embed_tokens(idx)
            for blk in self.h:
                x = checkpoint(blk, x, use_reentrant=False) if a.checkpoint == "block" else blk(x)
            logits = self.lm_head(LlamaBlock.rms(x, self.norm))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    seq_impl = "none"

    def run_sequential(fns, segments, x):
        nonlocal seq_impl
        from torch.utils.checkpoint import checkpoint_sequential
        try:
            y = checkpoint_sequential(fns, segments, x, use_reentrant=False)
            seq_impl = "checkpoint_sequential(use_reentrant=False)"
            return y
        except (TypeError, ValueError):
            pass  # torch < 2.1: no use_reentrant; apply the same split here
        seq_impl = "checkpoint_sequential's split, checkpoint(use_reentrant=False)"
        size = len(fns) // segments

        def seg(s, e):
            def f(inp):
                for j in range(s, e + 1):
                    inp = fns[j](inp)
                return inp
            return f
        end = -1
        for start in range(0, size * (segments - 1), size):
            end = start + size - 1
            x = checkpoint(seg(start, end), x, use_reentrant=False)
        return seg(end + 1, len(fns) - 1)(x)

    if a.model == "llama" and a.checkpoint == "sequential":
        sys.exit("bench_torch.py: --model llama takes --checkpoint none or block")
    model = Llama() if a.model == "llama" else GPT()
    params = list(model.parameters())
    n_params = sum(p.numel() for p in params)
    decay = [p for p in params if p.dim() == 2]
    nodecay = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(a.seed)
    times, losses = [], []
    for step in range(a.warmup + a.steps):
        data = torch.randint(0, V, (B, T + 1), generator=g)
        x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.autocast == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(x, y)
        else:
            loss = model(x, y)
        loss.backward()
        if a.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.grad_clip)
        opt.step()
        lv = loss.item()
        dt = (time.perf_counter() - t0) * 1e3
        if step >= a.warmup:
            times.append(dt)
            losses.append(lv)
    st = sorted(times)
    res = {
        "impl": "torch",
        "model": a.model,
        "torch_version": torch.__version__,
        "shape": {"layers": L, "dim": C, "heads": H, "context": T, "vocab": V, "batch": B},
        "params": n_params,
        "tokens_per_step": B * T,
        "threads": a.threads,
        "torch_threads": torch.get_num_threads(),
        "checkpoint": a.checkpoint,
        "autocast": a.autocast,
        "sdpa": a.sdpa,
        "segments": a.segments if a.checkpoint == "sequential" else None,
        "checkpoint_impl": seq_impl if a.checkpoint == "sequential" else (
            "checkpoint(use_reentrant=%s) per block" % a.reentrant if a.checkpoint == "block" else
            "checkpoint of the attention core and GELU per block" if a.checkpoint == "selective" else None),
        "warmup": a.warmup,
        "steps": a.steps,
        "step_ms_median": st[len(st) // 2] if len(st) % 2 else 0.5 * (st[len(st) // 2 - 1] + st[len(st) // 2]),
        "step_ms_min": st[0],
        "step_ms_max": st[-1],
        "step_ms": [round(t, 3) for t in times],
        "final_loss": losses[-1],
        "peak_rss_bytes": maxrss_bytes(),
        "base_rss_bytes": base_rss,
        "openblas_env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
                                                        "OPENBLAS_NUM_THREADS")},
    }
    return emit(res, a.out)


def emit(res, out):
    """Prints the result as JSON, and writes it to `out` too (when given)."""
    s = json.dumps(res, indent=1)
    print(s)
    if out:
        with open(out, "w") as f:
            f.write(s + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
