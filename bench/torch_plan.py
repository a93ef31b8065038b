#!/usr/bin/python3
"""torch_plan.py: rematplan (python/) against PyTorch's own recomputation, on
CPU (issue 23's targets; docs/PYTORCH.md, "Measured").

Models: --model gpt, shape A's GPT of bench/bench_torch.py (the same layout:
pre-norm blocks, fused qkv, GELU tanh, tied head, learned positions, no
dropout), or --model uvit, the same blocks with U-Net skips (block i's output
added to the input of block L-1-i, as remat's --model uvit): not a chain.
Configurations, each timed for --steps steps after one warm-up, in
--rounds rounds whose order alternates; step times are medians:
  none                 store everything (the activations' 100%)
  block                torch.utils.checkpoint(use_reentrant=False) per block
  seq:K                checkpoint_sequential's split into K segments
  remat:F              rematplan.plan at F of store-all's measured peak
  remat@C              rematplan.plan at the measured peak of configuration C
  amb:F                torch.compile with activation_memory_budget F (torch >= 2.4)
Memory: the step's activation peak by PyTorch's CPU allocator count (the
profiler's memory events; parameters' gradients allocated before the step,
so not counted), once per configuration. Prints one JSON line per
configuration and a summary; --out FILE writes them all.
Threads: torch.set_num_threads(--threads); OPENBLAS_NUM_THREADS and
OMP_NUM_THREADS set before torch loads, OMP_WAIT_POLICY=PASSIVE unless set;
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (for every configuration alike).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["gpt", "uvit"], default="gpt")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budgets", default="0.5,0.25", help="fractions of store-all for remat:F")
    ap.add_argument("--segments", default="2,3,4,6", help="checkpoint_sequential segment counts")
    ap.add_argument("--amb", default="", help="activation_memory_budget fractions (torch >= 2.4), e.g. 0.5,0.25")
    ap.add_argument("--at-peaks", action="store_true", help="also remat@C at every baseline's measured peak")
    ap.add_argument("--plan-only", type=int, default=0, help="time planning a GPT of this many blocks and exit")
    ap.add_argument("--out")
    return ap.parse_args()


def main():
    a = parse()
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(k, None)
    # idle OpenMP threads sleep instead of spinning (every configuration alike): on a shared,
    # loaded machine spinning made a 4-layer GPT's step 20x slower (7.4 s against 0.37 s)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = str(a.threads)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint
    import rematplan
    from rematplan._verify import measure_step

    torch.set_num_threads(a.threads)
    C, H, T, V, L, B = a.dim, a.heads, a.context, a.vocab, a.layers, a.batch

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.c_attn, self.c_proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.ln_2, self.c_fc, self.mlp_proj = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

        def forward(self, x):
            Bx, Tx, Cx = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q = q.view(Bx, Tx, H, C // H).transpose(1, 2)
            k = k.view(Bx, Tx, H, C // H).transpose(1, 2)
            v = v.view(Bx, Tx, H, C // H).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
            att = att.masked_fill(~self.mask[:Tx, :Tx], float("-inf")).softmax(dim=-1)
            x = x + self.c_proj((att @ v).transpose(1, 2).reshape(Bx, Tx, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self, layers=L, skips=False):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.h = nn.ModuleList([Block() for _ in range(layers)])
            self.ln_f = nn.LayerNorm(C)
            self.skips = skips
            self.mode, self.k = "none", 0
            self.register_buffer("pos", torch.arange(T), persistent=False)
            for n, p in self.named_parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if n.endswith("proj.weight") else 0.02)
                elif n.endswith("bias"):
                    nn.init.zeros_(p)

        def blocks(self, x):
            n = len(self.h)
            if self.skips:  # U-Net: block i's output joins block n-1-i's input
                outs = []
                for i, blk in enumerate(self.h):
                    if i >= n - n // 2:
                        x = x + outs[n - 1 - i]
                    x = checkpoint(blk, x, use_reentrant=False) if self.mode == "block" else blk(x)
                    outs.append(x)
                return x
            if self.mode == "block":
                for blk in self.h:
                    x = checkpoint(blk, x, use_reentrant=False)
                return x
            if self.mode == "seq":  # checkpoint_sequential's split: k segments, the last one not recomputed
                size = n // self.k
                end = -1
                for start in range(0, size * (self.k - 1), size):
                    end = start + size - 1
                    x = checkpoint(lambda t, s=start, e=end: seq(self.h, s, e, t), x, use_reentrant=False)
                return seq(self.h, end + 1, n - 1, x)
            for blk in self.h:
                x = blk(x)
            return x

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(self.pos[: idx.shape[1]])
            x = self.ln_f(self.blocks(x))
            return F.cross_entropy(F.linear(x, self.wte.weight).view(-1, V), targets.view(-1))

    def seq(blocks, s, e, t):
        for j in range(s, e + 1):
            t = blocks[j](t)
        return t

    if a.plan_only:
        torch.manual_seed(0)
        m = GPT(layers=a.plan_only, skips=a.model == "uvit")
        g = torch.Generator().manual_seed(1)
        idx = torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        from rematplan.profile import profile
        gm, prof = profile(m, (idx, idx), repeats=1)
        t1 = time.perf_counter()
        times = []
        for f in (0.5, 0.25):
            s = time.perf_counter()
            P = rematplan.plan_graph(prof.graph, f)
            times.append(time.perf_counter() - s)
        print(json.dumps({"blocks": a.plan_only, "nodes": len(prof.graph["nodes"]), "profile_s": round(t1 - t0, 2),
                          "plan_s_50": round(times[0], 3), "plan_s_25": round(times[1], 3),
                          "planner": P.planner}))
        return 0

    torch.manual_seed(1337)
    model = GPT(skips=a.model == "uvit")
    g = torch.Generator().manual_seed(1337)
    data = torch.randint(0, V, (B, T + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    args = (x, y)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)

    configs = {}  # name -> (module, info)

    def add(name, mod, **info):
        configs[name] = (mod, info)

    add("none", model)
    base_peak = measure_step(model, args)
    for kind in (["block"] + ["seq:%s" % k for k in a.segments.split(",") if k and 2 <= int(k) <= L and a.model == "gpt"]):
        m = GPT(skips=a.model == "uvit")
        m.load_state_dict(model.state_dict())
        m.mode, m.k = (kind.split(":")[0], int(kind.split(":")[1]) if ":" in kind else 0)
        add(kind, m)
    if a.amb:
        import torch._functorch.config as fc
        for f in a.amb.split(","):
            m = GPT(skips=a.model == "uvit")
            m.load_state_dict(model.state_dict())
            run = _compiled(torch, m, float(f), fc)
            for p in m.parameters():
                p.grad = torch.zeros_like(p)
            run(*args).backward()  # compiles (not measured)
            add("amb:" + f, run, fraction=float(f))
    peaks = {"none": base_peak}
    for name, (mod, info) in configs.items():
        if name != "none":
            peaks[name] = measure_step(mod, args)
    first = None
    for f in [float(v) for v in a.budgets.split(",") if v]:
        budget = int(f * base_peak)
        t0 = time.perf_counter()
        try:
            P = rematplan.plan(model, args, budget=budget, verbose=False, reuse=first)
            first = first or P
        except rematplan.BudgetError as e:
            print(json.dumps({"config": "remat:%g" % f, "refused": str(e)}))
            continue
        add("remat:%g" % f, rematplan.apply(model, P), budget=budget, predicted_peak=P.peak_bytes,
            predicted_overhead=P.overhead, planner=P.planner, plan_s=time.perf_counter() - t0)
        peaks["remat:%g" % f] = P.measured_peak
    if a.at_peaks:
        for c in [c for c in list(configs) if c != "none" and not c.startswith("remat")]:
            try:
                P = rematplan.plan(model, args, budget=peaks[c], verbose=False, reuse=first)
            except rematplan.BudgetError as e:
                print(json.dumps({"config": "remat@" + c, "refused": str(e)}))
                continue
            add("remat@" + c, rematplan.apply(model, P), budget=peaks[c], predicted_peak=P.peak_bytes,
                predicted_overhead=P.overhead, planner=P.planner)
            peaks["remat@" + c] = P.measured_peak

    times = {n: [] for n in configs}
    order = list(configs)
    for r in range(a.rounds):
        for name in (order if r % 2 == 0 else order[::-1]):
            mod = configs[name][0]
            mod.zero_grad(set_to_none=False)
            mod(*args).backward()  # warm-up
            for _ in range(a.steps):
                t0 = time.perf_counter()
                mod(*args).backward()
                times[name].append((time.perf_counter() - t0) * 1e3)
    base_ms = statistics.median(times["none"])
    rows = []
    for name, (mod, info) in configs.items():
        ms = statistics.median(times[name])
        row = {"config": name, "step_ms": round(ms, 1), "x_none": round(ms / base_ms, 4),
               "peak_bytes": peaks[name], "x_store_all": round(peaks[name] / base_peak, 4)}
        for k, v in info.items():
            row[k] = round(v, 4) if isinstance(v, float) else v
        if "budget" in info:
            row["within_budget"] = peaks[name] <= info["budget"]
            row["overhead_measured"] = round(ms / base_ms - 1, 4)
            row["overhead_target"] = round(1.1 * info["predicted_overhead"] + 0.05, 4)
        rows.append(row)
        print(json.dumps(row))
    summary = {"model": a.model, "torch": torch.__version__, "threads": a.threads, "steps": a.steps,
               "rounds": a.rounds, "shape": [L, C, H, T, V, B], "store_all_bytes": base_peak,
               "store_all_ms": round(base_ms, 1)}
    for f in [float(v) for v in a.budgets.split(",") if v]:
        name = "remat:%g" % f
        if name not in configs:
            continue
        budget = configs[name][1]["budget"]
        fit = [r for r in rows if r["config"] in peaks and not r["config"].startswith("remat")
               and r["config"] != "none" and r["peak_bytes"] <= budget]
        best = min(fit, key=lambda r: r["step_ms"]) if fit else None
        mine = next(r for r in rows if r["config"] == name)
        summary[name] = {"budget": budget, "peak": mine["peak_bytes"], "ms": mine["step_ms"],
                         "best_baseline_that_fits": best["config"] if best else None,
                         "ratio_to_best": round(mine["step_ms"] / best["step_ms"], 4) if best else None}
    print(json.dumps(summary))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"rows": rows, "summary": summary}, f, indent=1)
    return 0


def _compiled(torch, m, fraction, fc):
    """m under torch.compile with activation_memory_budget = fraction (set while it compiles)."""
    cm = torch.compile(m)

    class Run(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m
            self.compiled = False

        def forward(self, *args):
            if not self.compiled:
                prev = fc.activation_memory_budget
                fc.activation_memory_budget = fraction
                try:
                    out = cm(*args)
                finally:
                    fc.activation_memory_budget = prev
                self.compiled = True
                return out
            return cm(*args)
    return Run()


if __name__ == "__main__":
    sys.exit(main())
