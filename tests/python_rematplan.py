"""Tests of rematplan (python/), run by tests/test_python.sh with the package
installed in a venv by `pip install ./python` (which builds and bundles
libremat), on Debian's torch 1.13 and torchvision, CPU. The same script runs
with torch >= 2.4 (`make test-torch2`, which adds transformers' models and
selective checkpointing: tests/python_rematplan_hf.py).

The models people train (tests/rematplan_models.py), at 0.5 and 0.25 of the
measured store-all step: a GPT as nanoGPT writes it, a language model on
nn.TransformerEncoder, torchvision's ResNet-50 (BatchNorm, ReLU(inplace)) and
a U-Net: the plan accepted, or refused naming the least budget, which then
plans; its measured peak (PyTorch's allocator count) within the budget;
gradients bit for bit those of the model without recomputation (dropout
on); BatchNorm's running statistics equal. The time plan() took is printed
(timing is bench/'s: bench/torch_plan.py --plan-times).
Also: the models of issue 23's tests (a GPT with dropout, BatchNorm layers,
a graph, a buffer that counts calls), models torch.fx cannot trace, in-place
ops on activations, budgets monotone and 100% always planned, `remat plan
--chain/--graph` reproducing a plan, the compile-mode solver running no
graph node, libremat's version and symbols checked on load, and the H200
GPT-2 profile (tests/data/gpt2_h200_graph.json) planned with its measured
store-all. Prints "test_python: N passed, N failed".
"""
import argparse
import contextlib
import copy
import io
import os
import sys
import time

import torch

import rematplan

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rematplan_models as M  # noqa: E402
import python_rematplan_small as small  # noqa: E402
import python_rematplan_ops as ops  # noqa: E402
import python_rematplan_use as use  # noqa: E402
import python_rematplan_rebuild as rebuild  # noqa: E402
import python_rematplan_harden as harden  # noqa: E402
import python_rematplan_adv as adv  # noqa: E402
import python_rematplan_adv2 as adv2  # noqa: E402
import python_rematplan_adv3 as adv3  # noqa: E402
from python_rematplan_small import same, step  # noqa: E402

passed = failed = 0


def check(cond, msg):
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
        print("FAIL: " + msg)
    return cond


def quiet(fn, *a, **k):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*a, **k)


def planned(model, args, budget):
    """plan() at budget, or at the least a refusal names (checked to be above the budget)."""
    t0 = time.perf_counter()
    try:
        return quiet(rematplan.plan, model, args, budget), time.perf_counter() - t0, None
    except rematplan.BudgetError as e:
        t1 = time.perf_counter() - t0
        P = quiet(rematplan.plan, model, args, e.least_bytes)
        return P, t1, e


def check_model(name, make, args, fractions=(0.5, 0.25)):
    """The model at each fraction of its measured store-all (see the module's docstring)."""
    torch.manual_seed(0)
    model = make()
    state = copy.deepcopy(model.state_dict())
    ref = copy.deepcopy(model)
    _, g_ref, b_ref = step(ref, args, 11)
    for f in fractions:
        model.load_state_dict(state)
        P, secs, refused = planned(model, args, f)
        full = P.store_all_bytes
        want = int(f * full)
        if refused is not None:
            check(refused.least_bytes > want and str(refused.least_bytes) in str(refused),
                  "%s at %g: refused naming the least budget: %s" % (name, f, refused))
            check(P.budget_bytes == refused.least_bytes, "%s: the least budget named plans: %r" % (name, P))
        check(P.measured_peak is not None and P.measured_peak <= P.budget_bytes,
              "%s at %g: measured peak %s <= budget %d" % (name, f, P.measured_peak, P.budget_bytes))
        cm = rematplan.apply(model, P)
        model.load_state_dict(state)
        _, g, b = step(cm, args, 11)
        check(same(g, g_ref), "%s at %g: gradients bit for bit (%r)" % (name, f, P))
        check(all(torch.equal(b[k], b_ref[k]) for k in b_ref),
              "%s at %g: buffers (BatchNorm statistics) equal: %s" % (name, f, [k for k in b_ref
                                                                          if not torch.equal(b[k], b_ref[k])][:3]))
        print("%-10s %4.2f: %s; predicted %d, measured %d (%.1f%%), budget %d, store-all %d, %.2f s%s"
              % (name, f, P.planner, P.peak_bytes, P.measured_peak, 100.0 * P.measured_peak / max(P.peak_bytes, 1),
                 P.budget_bytes, full, secs, ", refused: least %d" % refused.least_bytes if refused else ""))
        check(P.n_recomputed() > 0, "%s at %g: something is recomputed" % (name, f))
    rematplan.forget(model)
    return model


def test_models(vision=True):
    cfg = M.GPTConfig(block_size=64, vocab_size=128, n_layer=4, n_head=4, n_embd=64, dropout=0.1, flash=False)
    idx = torch.randint(0, 128, (4, 64), generator=torch.Generator().manual_seed(1))
    check_model("nanoGPT", lambda: M.GPT(cfg), (idx, idx))
    check_model("encoder", lambda: M.EncoderLM(vocab=128, d_model=64, nhead=4, layers=4, context=64), (idx, idx))
    g = torch.Generator().manual_seed(2)
    img, cls = torch.randn(2, 3, 96, 96, generator=g), torch.randint(0, 10, (2,), generator=g)
    if vision:
        check_model("resnet50", M.resnet50, (img, cls))
    img, seg = torch.randn(2, 3, 96, 96, generator=g), torch.randint(0, 4, (2, 96, 96), generator=g)
    check_model("unet", lambda: M.UNet(w=8), (img, seg))


def test_budgets(remat):
    """Every budget from the least up plans (monotone); 1.0 and "100%" plan store-all."""
    torch.manual_seed(0)
    m = small.GPT()
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    for b in (1.0, "100%"):
        P = quiet(rematplan.plan, m, (x, y), b)
        check(P.planner == "store-all" and P.measured_peak <= P.budget_bytes, "budget %r plans store-all: %r" % (b, P))
    try:
        quiet(rematplan.plan, m, (x, y), 1000)
        check(False, "a budget of 1000 bytes is refused")
        return
    except rematplan.BudgetError as e:
        least, full = e.least_bytes, e.store_all_bytes
    bad = []
    for k in range(9):
        b = least + (full - least) * k // 8
        try:
            P = quiet(rematplan.plan, m, (x, y), b)
            if P.measured_peak > b:
                bad.append((b, "measured %d" % P.measured_peak))
        except rematplan.BudgetError as e:
            bad.append((b, str(e)[:80]))
    check(not bad, "every budget from the least (%d) to store-all (%d) plans and holds: %s" % (least, full, bad))
    small.check_reproduce(check, m, (x, y), remat)


class HeldLogits(torch.nn.Module):
    """A language model whose forward returns its logits with the loss, as transformers' and
    nanoGPT's do."""

    def __init__(self, vocab=512, dim=64, layers=6):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                                                              torch.nn.Linear(4 * dim, dim)) for _ in range(layers))
        self.head = torch.nn.Linear(dim, vocab)

    def forward(self, idx, targets):
        x = self.emb(idx)
        for b in self.blocks:
            x = x + b(x)
        logits = self.head(x)
        return logits, torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def test_held_logits():
    """What the forward returns besides the loss is held to the end of the step and counted once,
    in the loss node, which names the node that made it ("holds"): the chain's loss stage does not
    count its input again. Before, the chain counted the logits twice (transformers' Llama on CPU:
    measured 0.81x the predicted peak; this model 0.73x, now 0.86-0.88x: the chain's model of the
    blocks over-counts too, but never under)."""
    torch.manual_seed(0)
    m = HeldLogits()
    g = torch.Generator().manual_seed(3)
    x, y = torch.randint(0, 512, (4, 64), generator=g), torch.randint(0, 512, (4, 64), generator=g)
    logits_bytes = 4 * 64 * 512 * 4
    for f in (0.7, 0.5):
        P, _, _ = planned(m, (x, y), f)
        loss = P.graph["nodes"][-1]
        check(loss.get("holds") and P.graph["nodes"][loss["holds"][0]]["name"].startswith("head"),
              "held logits: the loss node holds the head's output: %s" % loss.get("holds"))
        ratio = P.measured_peak / max(P.peak_bytes, 1)
        check(0.9 <= ratio <= 1.05 or P.measured_peak <= P.budget_bytes < logits_bytes * 4,
              "held logits at %g: measured / predicted %d / %d = %.3f in [0.9, 1.05]"
              % (f, P.measured_peak, P.peak_bytes, ratio))
    rematplan.forget(m)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--remat", required=True)
    ap.add_argument("--skip-models", action="store_true", help="not the four CPU models (a quick run)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    small.run(check, a.remat)
    ops.run(check)
    rebuild.run(check)
    use.run(check)
    harden.run(check)
    adv.run(check)
    adv2.run(check)
    adv3.run(check)
    test_budgets(a.remat)
    test_held_logits()
    if not a.skip_models:
        test_models()
    print("torch %s, libremat %s (%s), %.1f s" % (torch.__version__, rematplan.libremat_version(),
                                                  rematplan._lib.lib().path, time.perf_counter() - t0))
    print("test_python: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
