#!/usr/bin/python3
"""lora_torch.py: the PyTorch peer of `remat train --init DIR --lora R` for
bench/finetune.sh (issue 21's targets): a LlamaForCausalLM (transformers'
computation, tests/hf_llama.py: RMSNorm, rotate_half RoPE, grouped-query
attention with repeat_kv, SwiGLU, tied or untied head) with LoRA written
by hand as PEFT computes it, y = x W^T + (alpha/r) (dropout(x) A^T) B^T on
q/k/v/o/gate/up/down, the base frozen in fp32 (requires_grad False, so
autograd computes no weight gradient for it), A Kaiming-uniform and B zero
(as PEFT; B is set to small random values here so the adapters' gradients
are not trivially zero), AdamW on the adapters only (betas 0.9/0.95, eps
1e-8, decay 0.1 on the 2-D adapters, as remat's default), no clipping,
random weights and tokens (nothing is downloaded; the values do not change
the arithmetic).

  --checkpoint none     keep every activation
  --checkpoint layers   each decoder layer under torch.utils.checkpoint.checkpoint
                        (use_reentrant=True, with the embeddings' output made to
                        require grad, as PEFT's enable_input_require_grads does):
                        what transformers' gradient_checkpointing_enable() does.
                        In this torch (Debian's 1.13) use_reentrant=False kept
                        about 211 MB a layer at the SmolLM2 shape against 25 MB
                        reentrant (measured: 2 and 6 layers, vocab 1000), so the
                        reentrant form is PyTorch's best setting here;
                        --non-reentrant measures the other

Threads: torch.set_num_threads(N), OPENBLAS_NUM_THREADS=N (set before torch
loads). Prints one JSON object: step_ms_median over the timed steps,
peak_rss_bytes (getrusage ru_maxrss: includes Python and torch's libraries,
see base_rss_bytes, the peak right after importing torch), params.
"""
import argparse
import json
import math
import os
import resource
import sys
import time


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--ffn-dim", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--tie", action="store_true")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--checkpoint", choices=["none", "layers"], default="layers")
    ap.add_argument("--non-reentrant", action="store_true", help="checkpoint with use_reentrant=False")
    ap.add_argument("--out")
    return ap.parse_args()


def main():
    a = parse()
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    C, H, K, L, V, Fd = a.dim, a.heads, a.kv_heads, a.layers, a.vocab, a.ffn_dim
    hd, Ckv = C // H, C // H * K
    scale = a.alpha / a.rank

    def frozen(*shape):
        return torch.randn(*shape) * 0.02  # requires_grad False

    class LoraLinear(torch.nn.Module):
        def __init__(self, out, inp):
            super().__init__()
            self.w = frozen(out, inp)
            self.A = torch.nn.Parameter(torch.empty(a.rank, inp))
            torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))
            self.B = torch.nn.Parameter(torch.randn(out, a.rank) * 1e-3)

        def forward(self, x):
            return F.linear(x, self.w) + scale * F.linear(F.linear(x, self.A), self.B)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    emb = torch.outer(torch.arange(a.context, dtype=torch.float32), inv_freq)
    emb = torch.cat((emb, emb), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    causal = torch.tril(torch.ones(a.context, a.context, dtype=torch.bool))

    def rot(x):
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat((-x2, x1), dim=-1)

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = torch.ones(C), torch.ones(C)
            self.q, self.k, self.v, self.o = LoraLinear(C, C), LoraLinear(Ckv, C), LoraLinear(Ckv, C), LoraLinear(C, C)
            self.gate, self.up, self.down = LoraLinear(Fd, C), LoraLinear(Fd, C), LoraLinear(C, Fd)

        def forward(self, x):
            B, T, _ = x.shape
            h = rms(x, self.n1)
            q = self.q(h).view(B, T, H, hd).transpose(1, 2)
            k = self.k(h).view(B, T, K, hd).transpose(1, 2)
            v = self.v(h).view(B, T, K, hd).transpose(1, 2)
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            k = k[:, :, None].expand(B, K, H // K, T, hd).reshape(B, H, T, hd)
            v = v[:, :, None].expand(B, K, H // K, T, hd).reshape(B, H, T, hd)
            s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
            s = s.masked_fill(~causal, float("-inf"))
            att = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
            x = x + self.o(att)
            h = rms(x, self.n2)
            return x + self.down(F.silu(self.gate(h)) * self.up(h))

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = frozen(V, C)
            self.layers = torch.nn.ModuleList([Layer() for _ in range(L)])
            self.norm = torch.ones(C)
            self.head = self.embed if a.tie else frozen(V, C)

        def forward(self, idx, tgt):
            x = self.embed[idx]
            if a.checkpoint == "layers" and not a.non_reentrant:
                x.requires_grad_()  # PEFT's enable_input_require_grads: reentrant checkpoints need an input that does
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=not a.non_reentrant) if a.checkpoint == "layers" else layer(x)
            logits = F.linear(rms(x, self.norm), self.head)
            return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))

    m = Model()
    adapters = [p for p in m.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(adapters, lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    g = torch.Generator().manual_seed(7)
    times = []
    for step in range(a.warmup + a.steps):
        idx = torch.randint(0, V, (a.batch, a.context + 1), generator=g)
        t0 = time.perf_counter()
        loss = m(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = (time.perf_counter() - t0) * 1e3
        if step >= a.warmup:
            times.append(dt)
        print("torch step %d: %.1f ms, loss %.4f" % (step, dt, float(loss)), file=sys.stderr)
    times_sorted = sorted(times)
    out = {
        "step_ms_median": times_sorted[len(times) // 2], "step_ms": times,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "base_rss_bytes": base_rss,
        "params": sum(p.numel() for p in adapters), "checkpoint": a.checkpoint + ("-nonreentrant" if a.non_reentrant else ""), "threads": a.threads,
        "torch": torch.__version__,
        "shape": "L%d C%d H%d K%d F%d V%d T%d B%d r%d" % (L, C, H, K, Fd, V, a.context, a.batch, a.rank),
    }
    print(json.dumps(out))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
