"""Tests of rematplan (python/), run by tests/test_python.sh with the package
installed in a venv and libremat from `make install` into a scratch prefix.
On Debian's torch 1.13, CPU:
  - gradients bit for bit equal to the model without recomputation, dropout on,
    on a chain (GPT: rm_plan_chain, nested regions) and on a graph with a long
    skip (rm_plan_graph);
  - BatchNorm's running statistics equal those of a run without recomputation
    (and plain torch.utils.checkpoint updates them twice: pytorch#96136);
  - verify(): every recomputed saved tensor equal to its first computation,
    and the measured peak (PyTorch's allocator) within the budget;
  - a budget below the least is refused, naming the least, which then plans;
  - `remat plan --chain/--graph` on the saved files gives libremat's same answer.
Prints "test_python: N passed, N failed".
"""
import argparse
import contextlib
import io
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F

import rematplan

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + msg)


class Block(nn.Module):
    def __init__(self, C, H, T, p):
        super().__init__()
        self.H = H
        self.ln_1, self.c_attn, self.c_proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.ln_2, self.c_fc, self.mlp_proj = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop = nn.Dropout(p)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = self.drop(att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1))
        x = x + self.drop(self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, L=3, C=32, H=2, T=16, V=64, p=0.1):
        super().__init__()
        self.V = V
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H, T, p) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("pos", torch.arange(T), persistent=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(self.pos[: idx.shape[1]])
        for b in self.h:
            x = b(x)
        return F.cross_entropy(F.linear(self.ln_f(x), self.wte.weight).view(-1, self.V), targets.view(-1))


class BNNet(nn.Module):
    """Linear, BatchNorm, ReLU, Dropout layers: a chain with side effects."""

    def __init__(self, d=64, layers=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(), nn.Dropout(0.2))
                                    for _ in range(layers))
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.head(x), y)


class UNet(nn.Module):
    """Down, middle and up layers whose first output skips to the last: not a chain."""

    def __init__(self, d=64):
        super().__init__()
        self.down = nn.ModuleList(nn.Linear(d, d) for _ in range(3))
        self.mid = nn.Linear(d, d)
        self.up = nn.ModuleList(nn.Linear(d, d) for _ in range(3))
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        skips = []
        for layer in self.down:
            x = self.drop(torch.tanh(layer(x)))
            skips.append(x)
        x = torch.relu(self.mid(x))
        for layer in self.up:
            x = torch.tanh(layer(x)) + skips.pop()
        return F.cross_entropy(self.head(x), y)


class Counted(nn.Module):
    """Layers one of which counts its calls in a buffer: a side effect that must run once a step."""

    def __init__(self, d=64):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, 10)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x, y):
        h = torch.tanh(self.a(x))
        self.calls.add_(1)
        h = torch.tanh(self.b(h * 2))
        return F.cross_entropy(self.c(torch.tanh(h)), y)


def grads_after(model, args, seed):
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    loss = model(*args)
    loss.backward()
    return loss.detach().clone(), [p.grad.clone() for p in model.parameters()]


def same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def quiet(fn, *a, **k):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        r = fn(*a, **k)
    return r, out.getvalue()


def test_gpt(remat):
    torch.manual_seed(0)
    m = GPT()
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    ref_loss, ref = grads_after(m, (x, y), 7)
    plan, text = quiet(rematplan.plan, m, (x, y), budget=0.5)
    check(plan.planner.startswith("chain"), "GPT: planned as a chain: %s" % plan.planner)
    check("predicted peak" in text and "overhead" in text, "plan() prints the predicted peak and overhead: %r" % text)
    check(plan.peak_bytes <= plan.budget_bytes < plan.store_all_bytes and plan.n_regions() > 0,
          "GPT: %r" % plan)
    cm = rematplan.apply(m, plan)
    loss, got = grads_after(cm, (x, y), 7)
    check(torch.equal(loss, ref_loss) and same(got, ref), "GPT at 50%: gradients bit for bit (dropout on)")
    r = rematplan.verify(cm, (x, y))
    check(r["compared"] > 0 and not r["mismatches"] and r["compared"] >= r["recorded"] // 2,
          "GPT: verify compared %d recomputed tensors, mismatches %s" % (r["compared"], r["mismatches"]))
    check(r["measured_peak"] <= plan.budget_bytes,
          "GPT: measured peak %d <= budget %d (predicted %d)" % (r["measured_peak"], plan.budget_bytes,
                                                                  plan.peak_bytes))
    _, g2 = grads_after(cm, (x, y), 7)  # verify left the model as it was
    check(same(g2, ref), "GPT: verify() leaves parameters, buffers and RNG as they were")
    # the same plan from the remat command, on the chain file
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "chain.json")
        plan.save_chain(f)
        out = subprocess.run([remat, "plan", "--chain", f, "--memory-budget", str(plan.planner_budget), "--json"],
                             capture_output=True, text=True)
        ans = json.loads(out.stdout) if out.returncode == 0 else {}
        check(ans.get("sequence") == plan.answer["sequence"],
              "remat plan --chain reproduces the plan: %s / %s" % (out.stderr[:200], ans.get("sequence")))
    # refused below the least, which then plans and holds
    try:
        rematplan.plan(m, (x, y), budget=1000, verbose=False)
        check(False, "GPT: a budget of 1000 bytes is refused")
    except rematplan.BudgetError as e:
        least = e.least_bytes
        check(str(least) in str(e) and 1000 < least < plan.store_all_bytes,
              "GPT: the refusal names the least budget: %s" % e)
        p2 = rematplan.plan(m, (x, y), budget=least, verbose=False)
        cm2 = rematplan.apply(m, p2)
        loss2, got2 = grads_after(cm2, (x, y), 7)
        check(same(got2, ref), "GPT at its least budget: gradients bit for bit")
        r2 = rematplan.verify(cm2, (x, y))
        check(not r2["mismatches"] and r2["measured_peak"] <= least,
              "GPT at its least budget %d: measured %d" % (least, r2["measured_peak"]))
    for bad in ("lots", -5, 1.5, 0.0):
        try:
            rematplan.plan(m, (x, y), budget=bad, verbose=False)
            check(False, "budget %r refused" % (bad,))
        except (ValueError, TypeError) as e:
            check("budget" in str(e), "budget %r refused: %s" % (bad, e))


def test_batchnorm():
    torch.manual_seed(0)
    m = BNNet()
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    try:
        plan = rematplan.plan(m, (x, y), budget=0.5, verbose=False)
    except rematplan.BudgetError as e:
        plan = rematplan.plan(m, (x, y), budget=e.least_bytes, verbose=False)
    cm = rematplan.apply(m, plan)
    ref = BNNet()
    ref.load_state_dict(m.state_dict())
    _, g_ref = grads_after(ref, (x, y), 3)
    _, g = grads_after(cm, (x, y), 3)
    check(plan.n_regions() > 0, "BatchNorm net: something is recomputed: %r" % plan)
    check(same(g, g_ref), "BatchNorm net: gradients bit for bit")
    sd, sd_ref = m.state_dict(), ref.state_dict()
    stats = [k for k in sd if "running" in k or "num_batches" in k]
    check(stats and all(torch.equal(sd[k], sd_ref[k]) for k in stats),
          "BatchNorm statistics equal a run without recomputation: %s" %
          [k for k in stats if not torch.equal(sd[k], sd_ref[k])])
    # plain non-reentrant checkpoint around a layer updates them twice (pytorch#96136)
    plain = BNNet()
    plain.load_state_dict(ref.state_dict())
    before = plain.layers[0][1].num_batches_tracked.clone()
    torch.manual_seed(3)
    h = torch.utils.checkpoint.checkpoint(plain.layers[0], x, use_reentrant=False)
    for layer in plain.layers[1:]:
        h = layer(h)
    F.cross_entropy(plain.head(h), y).backward()
    check(int(plain.layers[0][1].num_batches_tracked - before) == 2,
          "torch.utils.checkpoint alone counts the batch twice (pytorch#96136): %d"
          % int(plain.layers[0][1].num_batches_tracked - before))
    r = rematplan.verify(cm, (x, y))
    check(r["compared"] > 0 and not r["mismatches"] and r["measured_peak"] <= plan.budget_bytes,
          "BatchNorm net: verify %s" % {k: r[k] for k in ("compared", "measured_peak", "budget")})


def test_graph(remat):
    torch.manual_seed(0)
    m = UNet()
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))
    _, ref = grads_after(m, (x, y), 5)
    top = rematplan.plan(m, (x, y), budget=1.0, verbose=False)
    check(top.n_regions() == 0 and top.peak_bytes == top.store_all_bytes, "U-Net: store-all: %r" % top)
    try:
        plan = rematplan.plan(m, (x, y), budget=0.9, verbose=False)
    except rematplan.BudgetError as e:
        plan = rematplan.plan(m, (x, y), budget=e.least_bytes, verbose=False)
    check(plan.planner.startswith("graph") and plan.n_regions() > 0 and plan.peak_bytes <= plan.budget_bytes,
          "U-Net: a graph, planned by rm_plan_graph: %r" % plan)
    cm = rematplan.apply(m, plan)
    _, got = grads_after(cm, (x, y), 5)
    check(same(got, ref), "U-Net: gradients bit for bit (dropout on)")
    r = rematplan.verify(cm, (x, y))
    check(r["compared"] > 0 and not r["mismatches"] and r["measured_peak"] <= plan.budget_bytes,
          "U-Net: verify %s" % {k: r.get(k) for k in ("compared", "measured_peak", "budget", "predicted_peak")})
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "graph.json")
        plan.save_graph(f)
        out = subprocess.run([remat, "plan", "--graph", f, "--memory-budget", str(plan.planner_budget), "--json"],
                             capture_output=True, text=True)
        ans = json.loads(out.stdout) if out.returncode == 0 else {}
        check(ans.get("keep") == plan.answer["keep"] and ans.get("recompute") == plan.answer["recompute"],
              "remat plan --graph reproduces the plan: %s" % out.stderr[:200])


def test_side_effect():
    torch.manual_seed(0)
    m = Counted()
    x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))
    _, ref = grads_after(m, (x, y), 1)
    try:
        plan = rematplan.plan(m, (x, y), budget=0.7, verbose=False)
    except rematplan.BudgetError as e:
        plan = rematplan.plan(m, (x, y), budget=e.least_bytes, verbose=False)
    side = [nd["name"] for nd in plan.graph["nodes"] if nd.get("side_effect")]
    check(side, "the profile records the in-place update of a buffer: %s" % side)
    cm = rematplan.apply(m, plan)
    before = int(m.calls)
    _, got = grads_after(cm, (x, y), 1)
    check(int(m.calls) == before + 1 and same(got, ref),
          "an op with a side effect runs once a step (calls %d -> %d), gradients bit for bit; %r"
          % (before, int(m.calls), plan))


def test_lib():
    check(rematplan.libremat_version().count(".") == 2, "libremat version")
    from rematplan import _lib
    rc, ans, msg = _lib.price_graph({"nodes": [{"forward_time": 1, "backward_time": 1, "output_bytes": 8}]},
                                    {"modes": ["sometimes"]})
    check(rc != 0 and ans is None and "mode" in msg, "rm_price_graph refuses a bad plan: %s" % msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    test_lib()
    test_gpt(a.remat)
    test_batchnorm()
    test_graph(a.remat)
    test_side_effect()
    print("torch %s, libremat %s (%s)" % (torch.__version__, rematplan.libremat_version(),
                                          rematplan._lib.lib().path))
    print("test_python: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
