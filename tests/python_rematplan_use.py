"""An applied plan as people use it: autograd's calls, keyword arguments,
saving it, planning it again. Run by tests/python_rematplan.py (make test:
torch 1.13, CPU) and tests/python_rematplan_hf.py (make test-torch2).

A recomputed tensor is a handle autograd saves; the backward unpacks it and
rematplan rebuilds the value. Autograd may unpack a handle more than once:
  - retain_graph=True, then a second backward of the same graph (two
    losses of one forward, a GAN's generator step);
  - create_graph=True (a gradient penalty, MAML): the first backward keeps
    the graph and the second goes through the forward's nodes again;
  - a custom Function reading ctx.saved_tensors twice in its backward.
Before, the recipe had let go of what it reads after its first unpack, and
the second raised a raw AttributeError. Also: torch.autograd.grad for a
part of the graph (handles never unpacked), two forwards summed into one
backward (gradient accumulation), a forward whose backward never runs.
Each: loss and gradients bit for bit those of the model without the plan
(dropout on), and once autograd lets go of the graph, no recipe holds
anything (Step.stats["dead"] == stats["recipes"]).

A model called with keyword arguments (model(**batch)): plan() and verify()
take the mapping (before, it was the one positional argument and the model
raised inside its forward).

An applied model given to plan() and apply() again (another budget): the
model it runs is planned and gets the new plan (before: plan() captured the
applied model's own recording and refused every budget below store-all). A
function given as the model: a ModelError saying so (was AttributeError),
and so is a model holding an applied plan as a module (was: every budget
below store-all refused), a model on the meta device (was a TypeError about
the loss); a device other than the inputs' is a ValueError (was torch's
AssertionError, "Torch not compiled with CUDA enabled");
so is plan() with gradients off (inside torch.no_grad(): was "the forward
must return the loss"; torch.inference_mode(): a raw RuntimeError), and a
model whose lazy modules have not made their parameters yet (torch's raw
ValueError from inside rematplan). A model
that recomputes with torch.utils.checkpoint itself (transformers'
gradient_checkpointing_enable()): a refusal and the plan's summary say so
and how to let rematplan choose (before: a refusal naming a least equal to
store-all, no reason given).

A forward that returns no loss: the ModelError says what it returned (a
tensor of another shape, None, a scalar that does not require grad, an
output whose .loss is None: labels not given), not only what it must.

A model whose own step fails (an in-place op on a tensor its backward reads,
which PyTorch refuses without rematplan too): a ModelError naming the op
that saved it, from the capture, whether plan() measures or not (before:
check=False planned it, and check=True raised "a rematplan bug").

A forward that writes its inputs in place (x.mul_(0.5)): plan() and verify()
leave the user's batch as it was (before: changed once per pass plan() ran,
and verify() compared the plain step on one batch with the applied step on
another, reporting a mismatch where there was none); an input that gets a
gradient keeps its .grad (before: every pass's gradient added into it).

A step on other inputs than the plan's (a larger batch): bit for bit, and a
RuntimeWarning, once, that its peak is not the one measured.

The applied model pickled whole (torch.save(model), copy.deepcopy): the copy
runs the plan (it recomputes; gradients bit for bit). Before, torch.save
raised "cannot pickle 'PyCapsule' object" (the Plan's captured step).
"""
import copy
import io
import gc

import torch
import torch.nn as nn
import torch.nn.functional as F

import rematplan
from python_rematplan_small import plan_or_least


class Twice(torch.autograd.Function):
    """x * w, whose backward reads its saved tensors twice."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x * w

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        x2, w2 = ctx.saved_tensors
        return g * w2, (g * x2).sum(0)


class Net(nn.Module):
    """Linear, F.gelu, dropout, a layer norm and a custom Function, six times."""

    def __init__(self, d=96, layers=6):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.scales = nn.ParameterList(nn.Parameter(torch.ones(d)) for _ in range(layers))
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        for fc, norm, s in zip(self.fcs, self.norms, self.scales):
            x = x + Twice.apply(F.dropout(F.gelu(fc(norm(x))), 0.1, self.training), s)
        return F.cross_entropy(self.head(x), y)


def grads_of(model):
    return [None if p.grad is None else p.grad.clone() for p in model.parameters()]


def run_both(model, cm, args, seed, body):
    """body(module) on the model and on the applied model from the same RNG state and no gradients:
    (what body returned, gradients) of each."""
    out = []
    for mod in (model, cm):
        for p in model.parameters():
            p.grad = None
        torch.manual_seed(seed)
        r = body(mod)
        out.append((r, grads_of(model)))
    return out


def equal(a, b):
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


def all_dead(cm):
    gc.collect()
    s = cm.remat_last.stats
    return s["recipes"] > 0 and s["dead"] == s["recipes"], s


def planned_net():
    """Net, its applied plan at 0.4 (or the least), the plan, the inputs."""
    torch.manual_seed(0)
    m = Net()
    x, y = torch.randn(64, 96), torch.randint(0, 10, (64,))
    P = plan_or_least(m, (x, y), 0.4)
    return m, rematplan.apply(m, P), P, (x, y)


def test_autograd(check):
    m, cm, P, (x, y) = planned_net()
    check(P.n_recomputed() > 0, "autograd: the plan recomputes: %r" % P)

    def plain(mod):
        loss = mod(x, y)
        loss.backward()
        return loss.detach()
    (l0, g0), (l1, g1) = run_both(m, cm, (x, y), 1, plain)
    check(equal(l0, l1) and equal(g0, g1), "a step: loss and gradients bit for bit")
    ok, s = all_dead(cm)
    check(ok, "after a backward, every recipe is dead: %s" % s)

    def retained(mod):
        loss = mod(x, y)
        loss.backward(retain_graph=True)
        first = grads_of(m)
        (2 * loss).backward()
        return first
    try:
        (a0, g0), (a1, g1) = run_both(m, cm, (x, y), 2, retained)
        check(equal(a0, a1) and equal(g0, g1), "retain_graph, then a second backward: gradients bit for bit")
        ok, s = all_dead(cm)
        check(ok, "retain_graph: once the graph goes, every recipe is dead: %s" % s)
    except Exception as e:  # noqa: BLE001 (the test reports what was raised)
        check(False, "retain_graph, then a second backward: raised %s: %s" % (type(e).__name__, e))

    def penalty(mod):
        xx = x.clone().requires_grad_()
        loss = mod(xx, y)
        gx, = torch.autograd.grad(loss, xx, create_graph=True)
        (loss + gx.pow(2).sum()).backward()
        return gx.detach()
    try:
        (a0, g0), (a1, g1) = run_both(m, cm, (x, y), 3, penalty)
        check(equal(a0, a1) and equal(g0, g1), "create_graph (a gradient penalty): gradients bit for bit")
    except Exception as e:  # noqa: BLE001
        check(False, "create_graph (a gradient penalty): raised %s: %s" % (type(e).__name__, e))

    def part(mod):
        xx = x.clone().requires_grad_()
        gx, = torch.autograd.grad(mod(xx, y), xx)
        return gx
    (a0, _), (a1, _) = run_both(m, cm, (x, y), 4, part)
    check(equal(a0, a1), "torch.autograd.grad for the input alone: bit for bit")
    ok, s = all_dead(cm)
    check(ok, "autograd.grad for a part: once the graph goes, every recipe is dead: %s" % s)

    x2 = torch.randn(32, 96)
    y2 = torch.randint(0, 10, (32,))

    def accumulate(mod):
        loss = mod(x, y) + mod(x2, y2)
        loss.backward()
        return loss.detach()
    (l0, g0), (l1, g1) = run_both(m, cm, (x, y), 5, accumulate)
    check(equal(l0, l1) and equal(g0, g1), "two forwards, one backward: loss and gradients bit for bit")

    def abandoned(mod):
        mod(x, y)  # its graph dropped unused
        loss = mod(x, y)
        loss.backward()
        return loss.detach()
    (l0, g0), (l1, g1) = run_both(m, cm, (x, y), 6, abandoned)
    check(equal(l0, l1) and equal(g0, g1), "a forward whose backward never runs, then a step: bit for bit")
    rematplan.forget(m)


def test_saved(check):
    m, cm, _, (x, y) = planned_net()
    for how in ("torch.save", "copy.deepcopy"):
        try:
            if how == "torch.save":
                buf = io.BytesIO()
                torch.save(cm, buf)
                buf.seek(0)
                load = torch.load
                c2 = load(buf, weights_only=False) if "weights_only" in load.__code__.co_varnames else load(buf)
            else:
                c2 = copy.deepcopy(cm)
        except Exception as e:  # noqa: BLE001 (the test reports what was raised)
            check(False, "the applied model through %s: raised %s: %s" % (how, type(e).__name__, e))
            continue
        m2 = c2.remat_model
        check(c2.remat_plan is None and c2.remat_table is not None and m2 is not m,
              "%s: the copy keeps the table, not the Plan" % how)
        res = []
        for a, b in ((m, cm), (m2, c2)):
            for p in a.parameters():
                p.grad = None
            torch.manual_seed(8)
            loss = b(x, y)
            loss.backward()
            res.append((loss, grads_of(a)))
        check(equal(res[0][0], res[1][0]) and equal(res[0][1], res[1][1]) and c2.remat_last.stats["recipes"] > 0,
              "%s: the copy recomputes (%s), loss and gradients bit for bit" % (
                  how, c2.remat_last.stats if c2.remat_last is not None else None))
    rematplan.forget(m)


class Keywords(nn.Module):
    """A forward taking keyword arguments and returning {"loss": ...}, as transformers' models do."""

    def __init__(self, vocab=100, d=64):
        super().__init__()
        self.emb, self.head = nn.Embedding(vocab, d), nn.Linear(d, vocab)
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(6))

    def forward(self, input_ids, labels=None, attention_mask=None, deep=True):
        x = self.emb(input_ids) * attention_mask[..., None]
        for fc in self.fcs if deep else self.fcs[:2]:
            x = F.dropout(F.gelu(fc(x)), 0.1, self.training)
        logits = self.head(x)
        return {"loss": F.cross_entropy(logits.view(-1, logits.size(-1)), labels.view(-1)), "logits": logits}


def test_keywords(check):
    from collections import UserDict
    torch.manual_seed(0)
    m = Keywords()
    batch = UserDict(input_ids=torch.randint(0, 100, (8, 32)), labels=torch.randint(0, 100, (8, 32)),
                     attention_mask=torch.ones(8, 32))
    try:
        P = plan_or_least(m, batch, 0.5)
    except Exception as e:  # noqa: BLE001 (the test reports what was raised)
        check(False, "keyword arguments: plan() raised %s: %s" % (type(e).__name__, e))
        return
    cm = rematplan.apply(m, P)
    (l0, g0), (l1, g1) = run_both(m, cm, batch, 9, lambda mod: mod(**batch)["loss"].backward())
    check(P.n_recomputed() > 0 and equal(g0, g1) and P.measured_peak <= P.budget_bytes,
          "keyword arguments (a mapping): planned (%r), gradients bit for bit" % P)
    r = rematplan.verify(cm, batch, raise_on_mismatch=False)
    check(r["ok"] and r["within_budget"], "keyword arguments: verify clean: %s" % r)
    try:
        rematplan.plan(m, {0: batch["input_ids"]}, 0.5, verbose=False)
        check(False, "a mapping whose keys are not names is refused")
    except TypeError as e:
        check("argument names" in str(e), "a mapping whose keys are not names: %s" % e)
    # a plain value among the keywords makes another step: another profile, not the first one's
    P1 = plan_or_least(m, UserDict(batch, deep=True), 0.5)
    P2 = plan_or_least(m, UserDict(batch, deep=False), 0.5)
    check(P2.profile is not P1.profile and len(P2.graph["nodes"]) < len(P1.graph["nodes"]),
          "keyword arguments: deep=False is planned as its own step, not deep=True's (%d nodes against %d)"
          % (len(P2.graph["nodes"]), len(P1.graph["nodes"])))
    rematplan.forget(m)


class Lazy(nn.Module):
    """A module whose forward returns the loss of `net` (lazy modules inside)."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


class Holder(nn.Module):
    """A model whose one module is another model (here: an applied plan)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x, y):
        return self.inner(x, y)


def test_planned_again(check):
    m, cm, P, (x, y) = planned_net()
    try:
        P2 = plan_or_least(cm, (x, y), 0.3)
        cm2 = rematplan.apply(cm, P2)
    except Exception as e:  # noqa: BLE001 (the test reports what was raised)
        check(False, "an applied model planned again: raised %s: %s" % (type(e).__name__, e))
        return
    check(P2.model is m and cm2.remat_model is m and P2.budget_bytes < P.budget_bytes and
          P2.measured_peak <= P2.budget_bytes,
          "an applied model planned again at 0.3: the model it runs, within the budget (%r after %r)" % (P2, P))
    (_, g0), (_, g1) = run_both(m, cm2, (x, y), 10, lambda mod: mod(x, y).backward())
    check(equal(g0, g1) and cm2.remat_last.stats["recipes"] > 0, "an applied model planned again: bit for bit")
    try:
        rematplan.plan(lambda a, b: (a * b).sum(), (x, y), 0.5, verbose=False)
        check(False, "a function as the model is refused")
    except TypeError as e:
        check("nn.Module" in str(e), "a function as the model: %s" % e)
    for off in (torch.no_grad, getattr(torch, "inference_mode", None)):
        if off is None:
            continue
        try:
            with off():
                rematplan.plan(m, (x, y), 0.5, verbose=False)
            check(False, "plan() with gradients off (%s) is refused" % off.__name__)
        except rematplan.ModelError as e:
            check("gradients are off" in str(e), "plan() inside %s: %s" % (off.__name__, e))
    rematplan.forget(m)
    try:
        rematplan.plan(Holder(cm), (x, y), 0.5, verbose=False)
        check(False, "a model holding an applied plan is refused")
    except rematplan.ModelError as e:
        check("holds an applied plan (inner" in str(e), "a model holding an applied plan: %s" % e)
    try:
        import numpy as np
        from rematplan.planning import budget_bytes
        got = (budget_bytes(np.int64(10 ** 6), 4 * 10 ** 6), budget_bytes(np.float32(0.25), 4 * 10 ** 6))
        check(got == (10 ** 6, 10 ** 6), "numpy numbers as budgets (np.int64 bytes, np.float32 a fraction): %s"
              % (got,))
    except ImportError:
        pass
    for device, want in (("cuda:0", "the inputs are on cpu"), ("bogus", "device 'bogus'")):
        try:
            rematplan.plan(m, (x, y), 0.5, device=device, verbose=False)
            check(False, "device %r for inputs on the CPU is refused" % device)
        except ValueError as e:
            check(want in str(e), "device %r for inputs on the CPU: %s" % (device, e))
    try:
        rematplan.plan(Holder(Net().to("meta")), (x.to("meta"), y.to("meta")), 0.5, verbose=False)
        check(False, "a model on the meta device is refused")
    except rematplan.ModelError as e:
        check("meta device" in str(e), "a model on the meta device: %s" % e)
    lazy = nn.Sequential(nn.LazyLinear(96), nn.GELU(), nn.LazyLinear(10))
    lazy_model = Lazy(lazy)
    try:
        rematplan.plan(lazy_model, (x, y), 0.5, verbose=False)
        check(False, "a model with lazy parameters not made yet is refused")
    except rematplan.ModelError as e:
        check("not made yet" in str(e) and "0.weight" in str(e), "lazy parameters not made yet: %s" % e)
    lazy_model(x, y)  # the dry run that makes them: then it plans
    P3 = plan_or_least(lazy_model, (x, y), 0.5)
    check(P3.measured_peak <= P3.budget_bytes, "a lazy model after its first forward plans: %r" % P3)
    rematplan.forget(lazy_model)


class Checkpointed(nn.Module):
    """Net's blocks, each run through torch.utils.checkpoint (non-reentrant), as a user who switched
    on gradient checkpointing has it."""

    def __init__(self, d=96, layers=4):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.GELU(),
                                                  nn.Linear(4 * d, d)) for _ in range(layers))
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        from torch.utils.checkpoint import checkpoint
        for b in self.blocks:
            x = x + checkpoint(b, x, use_reentrant=False)
        return F.cross_entropy(self.head(x), y)


def test_structure_changed(check):
    """A layer frozen after a plan: plan() captures the step again (it is another step: no dW for the
    frozen weights), not the old profile (whose store-all was twice the new step's)."""
    m, _, P1, (x, y) = planned_net()
    for p in list(m.fcs[:4].parameters()) + list(m.norms[:4].parameters()):
        p.requires_grad_(False)
    P2 = plan_or_least(m, (x, y), 0.4)
    check(P2.profile is not P1.profile and P2.store_all_bytes < P1.store_all_bytes,
          "layers frozen after a plan: captured again (store-all %d after %d)" % (P2.store_all_bytes,
                                                                                 P1.store_all_bytes))
    r = rematplan.verify(rematplan.apply(m, P2), (x, y), raise_on_mismatch=False)
    check(r["ok"] and r["within_budget"], "layers frozen after a plan: the new plan verifies: %s"
          % {k: r.get(k) for k in ("ok", "grads_differ", "measured_peak", "budget")})
    rematplan.forget(m)


def test_other_inputs(check):
    """A step on other inputs than the plan's (a larger batch) runs the plan, bit for bit, and says
    once that its peak is not the one measured (RuntimeWarning); the plan's own inputs say nothing."""
    import warnings
    m, cm, _, (x, y) = planned_net()
    x2, y2 = torch.randn(128, 96), torch.randint(0, 10, (128,))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        cm(x, y).backward()
        quiet = len(got)
        (_, g0), (_, g1) = run_both(m, cm, (x2, y2), 13, lambda mod: mod(x2, y2).backward())
        cm(x2, y2).backward()
    said = [w for w in got if issubclass(w.category, RuntimeWarning) and "rematplan" in str(w.message)]
    check(quiet == 0 and len(said) == 1 and equal(g0, g1),
          "a larger batch than the plan's: bit for bit, said once (%d warnings, %d before)" % (len(said), quiet))
    rematplan.forget(m)


def test_autocast_kind(check):
    """plan() inside torch.autocast("cpu") plans that step, not the one captured outside it (torch's
    is_autocast_enabled() is CUDA's alone, and the profile captured outside was reused: the fp32 step's
    ops and bytes); an applied plan run under another autocast than it was made under runs bit for bit
    and says so once; under its own, nothing."""
    import warnings
    torch.manual_seed(0)
    m = Net()
    x, y = torch.randn(64, 96), torch.randint(0, 10, (64,))
    P32 = plan_or_least(m, (x, y), 0.5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        P16 = plan_or_least(m, (x, y), 0.5)
    check(P16.profile is not P32.profile and P16.store_all_bytes < P32.store_all_bytes,
          "autocast(cpu, bf16): its own capture (store-all %d bytes, fp32's %d)"
          % (P16.store_all_bytes, P32.store_all_bytes))
    a32, a16 = rematplan.apply(m, P32), rematplan.apply(m, P16)

    def step(mod):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = mod(x, y)
        loss.backward()
        return loss.detach()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        (l0, g0), (l1, g1) = run_both(m, a16, (x, y), 3, step)
        quiet = [w for w in got if "rematplan" in str(w.message)]
        (l2, g2), (l3, g3) = run_both(m, a32, (x, y), 3, step)
        step(a32)
        said = [str(w.message) for w in got if "rematplan" in str(w.message)]
    check(not quiet and equal(l0, l1) and equal(g0, g1), "the plan made under autocast, run under it: bit for bit, "
          "nothing said (%s)" % [str(w.message)[:80] for w in quiet])
    check(equal(l2, l3) and equal(g2, g3) and len(said) == 1 and "autocast(cpu, torch.bfloat16)" in said[0] and
          "planned: no autocast" in said[0], "the fp32 plan under autocast: bit for bit, said once: %s" % said)
    rematplan.forget(m)


def test_hooks_disabled(check):
    """Inside torch.autograd.graph.disable_saved_tensors_hooks: plan() is refused before it records (it
    failed in the capture as the model's own error), the applied model raises a RematError that says
    what to do (torch's raw RuntimeError carried the user's message alone), and runs after it."""
    m, cm, _, (x, y) = planned_net()
    msgs = []
    for what in (lambda: rematplan.plan(m, (x, y), 0.5, verbose=False), lambda: cm(x, y).backward()):
        try:
            with torch.autograd.graph.disable_saved_tensors_hooks("not here"):
                what()
            msgs.append("ran")
        except Exception as e:  # noqa: B902: which exception is what the test is about
            msgs.append("%s: %s" % (type(e).__name__, e))
    check(msgs[0].startswith("ModelError") and "disable_saved_tensors_hooks" in msgs[0] and "outside" in msgs[0],
          "plan() with saved-tensor hooks disabled: %s" % msgs[0][:200])
    check(msgs[1].startswith("RematError") and "not here" in msgs[1] and ".remat_model" in msgs[1],
          "the applied model with saved-tensor hooks disabled: %s" % msgs[1][:200])
    (_, g0), (_, g1) = run_both(m, cm, (x, y), 5, lambda mod: mod(x, y).backward())
    check(equal(g0, g1), "the applied model runs after it, bit for bit")
    rematplan.forget(m)


_OOM_CHILD = r"""
import resource, sys, torch, rematplan
import torch.nn as nn, torch.nn.functional as F
torch.set_num_threads(1)
class Net(nn.Module):
    def __init__(s):
        super().__init__()
        s.l = nn.ModuleList(nn.Linear(1024, 1024) for _ in range(8))
        s.h = nn.Linear(1024, 10)
    def forward(s, x, y):
        for l in s.l:
            x = F.gelu(l(x))
        return F.cross_entropy(s.h(x), y)
torch.manual_seed(0)
m = Net()
x, y = torch.randn(8192, 1024), torch.randint(0, 10, (8192,))  # store-all ~512 MB of activations
small = (x[:64], y[:64])
rematplan.plan(m, small, 0.7, verbose=False)  # libraries, allocator and profiler warmed up
vm = int(open("/proc/self/statm").read().split()[0]) * 4096
resource.setrlimit(resource.RLIMIT_AS, (vm + 300 * 2**20, resource.RLIM_INFINITY))
try:
    rematplan.plan(m, (x, y), 0.3, verbose=False)
    print("RESULT planned")
except Exception as e:
    print("RESULT %s: %s" % (type(e).__name__, e))
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
left = all(p.grad is None for p in m.parameters())
P = rematplan.plan(m, small, 0.7, verbose=False)
rematplan.apply(m, P)(*small).backward()
print("LEFT", left and all(p.grad is not None for p in m.parameters()))
"""


def test_out_of_memory(check):
    """A step whose store-all does not fit in the memory free (here: an address-space limit 300 MiB above
    what the process maps, for ~512 MB of activations): plan() says why and what to do in a RematError
    (it was the allocator's raw RuntimeError, "DefaultCPUAllocator: can't allocate memory"; CUDA's
    OutOfMemoryError alike), and leaves the model as it was. Skipped under ASan (its shadow memory
    cannot live under an address-space limit)."""
    import os
    import subprocess
    import sys
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        print("test_out_of_memory: under ASan (an address-space limit breaks its shadow memory): skipped")
        return
    p = subprocess.run([sys.executable, "-c", _OOM_CHILD], capture_output=True, text=True, timeout=300)
    said = [ln for ln in p.stdout.splitlines() if ln.startswith(("RESULT", "LEFT"))]
    check(len(said) == 2 and said[0].startswith("RESULT RematError") and "ran out of memory" in said[0] and
          "store-all" in said[0] and "free memory" in said[0] and said[1] == "LEFT True",
          "a store-all step that does not fit: a RematError saying why and what to do, the model as it was: %s %s"
          % (said, (p.stderr or "").strip().splitlines()[-1:]))


def test_checkpointed(check):
    torch.manual_seed(0)
    m = Checkpointed()
    x, y = torch.randn(64, 96), torch.randint(0, 10, (64,))
    try:
        P = rematplan.plan(m, (x, y), 0.3, verbose=False)
        said = P.summary()
    except rematplan.BudgetError as e:
        said = str(e)
    check("torch.utils.checkpoint" in said and "4 module calls" in said and "blocks.0" in said,
          "a model that checkpoints its blocks itself: rematplan says so: %s" % said)
    torch.manual_seed(0)
    plain = Net()  # a model without checkpoint: no note
    P = plan_or_least(plain, (x, y), 0.5)
    check("torch.utils.checkpoint" not in P.summary(), "no checkpoint note where there is none: %s" % P.summary())
    rematplan.forget(m)
    rematplan.forget(plain)


class InPlaceInput(nn.Module):
    """Scales and shifts its input in place before its layers."""

    def __init__(self, d=64):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(6))
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        x.mul_(0.5).add_(1.0)
        for fc in self.fcs:
            x = F.dropout(F.gelu(fc(x)), 0.1, self.training)
        return F.cross_entropy(self.head(x), y)


class OwnGenerator(nn.Module):
    """Adds noise drawn from a generator of its own (not the global RNG)."""

    def __init__(self, d=64):
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(6))
        self.head = nn.Linear(d, 10)
        self.gen = torch.Generator().manual_seed(123)

    def forward(self, x, y):
        for fc in self.fcs:
            x = F.gelu(fc(x)) + 0.01 * torch.randn(x.shape, generator=self.gen)
        return F.cross_entropy(self.head(x), y)


def test_own_generator(check):
    """plan() and verify() leave a generator the model holds as it was (before: plan() advanced it
    once per pass, and verify() drew the plain and the applied step from different states, reporting
    gradients that differ where the plan was right)."""
    torch.manual_seed(0)
    m = OwnGenerator()
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    before = m.gen.get_state().clone()
    P = plan_or_least(m, (x, y), 0.5)
    cm = rematplan.apply(m, P)
    r = rematplan.verify(cm, (x, y), raise_on_mismatch=False)
    check(torch.equal(before, m.gen.get_state()) and r["ok"],
          "a model's own generator: as it was after plan() and verify(), verify clean: %s"
          % {k: r.get(k) for k in ("ok", "grads_differ")})
    res = []
    for mod in (m, cm):
        m.gen.manual_seed(7)
        for p in m.parameters():
            p.grad = None
        mod(x, y).backward()
        res.append(grads_of(m))
    check(equal(res[0], res[1]) and P.n_recomputed() > 0, "a model's own generator: gradients bit for bit")
    rematplan.forget(m)


def test_inputs_kept(check):
    torch.manual_seed(0)
    m = InPlaceInput()
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
    x0 = x.clone()
    P = plan_or_least(m, (x, y), 0.5)
    check(torch.equal(x, x0), "plan() leaves inputs a forward writes in place as they were (max change %g)"
          % (x - x0).abs().max().item())
    cm = rematplan.apply(m, P)
    r = rematplan.verify(cm, (x, y), raise_on_mismatch=False)
    check(r["ok"] and torch.equal(x, x0), "verify() of a forward writing its input: clean, the input as it was: %s"
          % {k: r.get(k) for k in ("ok", "grads_differ", "mismatches")})
    res = []
    for mod in (m, cm):
        x.copy_(x0)
        for p in m.parameters():
            p.grad = None
        torch.manual_seed(12)
        mod(x, y).backward()
        res.append(grads_of(m))
    check(equal(res[0], res[1]) and P.n_recomputed() > 0, "a forward writing its input: gradients bit for bit")
    rematplan.forget(m)
    # an input that gets a gradient (an adversarial example): its .grad as the user left it
    m2, _, _, (x2, y2) = planned_net()
    x2.requires_grad_()
    mine = torch.full_like(x2, 7.0)
    x2.grad = mine
    P2 = plan_or_least(m2, (x2, y2), 0.3)
    rematplan.verify(rematplan.apply(m2, P2), (x2, y2), raise_on_mismatch=False)
    check(x2.grad is mine and bool((mine == 7.0).all()),
          "plan() and verify() leave an input's .grad as it was (it gathered every pass's gradient)")
    rematplan.forget(m2)


class WritesSaved(nn.Module):
    """tanh saves its output; the forward then adds to it in place: PyTorch's backward refuses."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(16, 32), nn.Linear(32, 1)

    def forward(self, x):
        h = torch.tanh(self.a(x))
        h.transpose(0, 1).add_(1.0)
        return self.b(h).pow(2).mean()


def test_model_fails_alone(check):
    """The model's own step fails (PyTorch raises the same without rematplan): plan() says so, naming
    the op, as a ModelError, measured or not."""
    torch.manual_seed(0)
    m, x = WritesSaved(), torch.randn(4, 8, 16)
    try:
        m(x).backward()
        check(False, "the test's premise: PyTorch refuses this step")
    except RuntimeError as e:
        check("modified by an inplace operation" in str(e), "PyTorch refuses it: %s" % str(e)[:80])
    for measured in (True, False):
        rematplan.forget(m)
        try:
            rematplan.plan(m, (x,), 0.5, verbose=False, check=measured)
            check(False, "a model whose own step fails is refused (check=%s)" % measured)
        except rematplan.ModelError as e:
            check("aten.tanh" in str(e) and "in-place" in str(e) and "PyTorch's own backward fails" in str(e),
                  "a model whose own step fails (check=%s): %s" % (measured, e))
        except Exception as e:  # noqa: B902 (what it was before: a plan, or "a rematplan bug")
            check(False, "a model whose own step fails (check=%s): %s: %s" % (measured, type(e).__name__, e))


class Returns(nn.Module):
    """A linear layer whose forward returns what `kind` says instead of a loss."""

    class Output:
        loss = None  # transformers' output without labels

    def __init__(self, kind):
        super().__init__()
        self.a, self.kind = nn.Linear(8, 8), kind

    def forward(self, x):
        y = self.a(x)
        if self.kind == "one":  # shape (1,): .backward() takes it as it takes a scalar
            return F.gelu(self.a(F.gelu(y))).pow(2).mean().unsqueeze(0)
        return {"shape": y, "none": None, "detached": y.pow(2).mean().detach(),
                "no loss": Returns.Output(), "pair": (y, y)}[self.kind]


def test_not_a_loss(check):
    """What the forward returned, named in the refusal."""
    x = torch.randn(4, 8)
    for kind, said in (("shape", "a tensor of shape (4, 8)"), ("none", "returned None"),
                       ("detached", "does not require grad"), ("no loss", "whose .loss is None"),
                       ("pair", "a tuple of 2 items, 0 of them a one-element tensor that requires grad")):
        try:
            rematplan.plan(Returns(kind), (x,), 0.5, verbose=False)
            check(False, "a forward returning %s is refused" % kind)
        except rematplan.ModelError as e:
            check(said in str(e), "a forward returning %s: the refusal says %r: %s" % (kind, said, e))
    # a loss of shape (1,) (loss.unsqueeze(0), a DataParallel-style gather) trains plainly: planned (it was
    # refused as "a tensor of shape (1,)")
    torch.manual_seed(0)
    m = Returns("one")
    P = plan_or_least(m, (x,), 0.5)
    (l0, g0), (l1, g1) = run_both(m, rematplan.apply(m, P), (x,), 2, lambda mod: mod(x).backward())
    check(P.n_recomputed() > 0 and equal(g0, g1), "a loss of shape (1,): planned (%d recomputed), bit for bit"
          % P.n_recomputed())
    rematplan.forget(m)


def test_slow_store_all_step(check):
    """The store-all step plan() times is one sample: one taken 1000x slow (a shared machine's swing,
    here made up) must not make the plan's prediction 1000x: the plan step measured for the peak is
    another measurement of the store-all step (budget.Search.store_all_from), the least taken."""
    from rematplan import _verify
    torch.manual_seed(0)
    m = Net()
    x, y = torch.randn(64, 96), torch.randint(0, 10, (64,))
    real = _verify.store_all_step

    def slow(*a, **k):
        peak, ms = real(*a, **k)
        return peak, ms * 1000
    _verify.store_all_step = slow
    try:
        P = plan_or_least(m, (x, y), 0.4)
    finally:
        _verify.store_all_step = real
    ms = _verify.time_step(m, (x, y), runs=3, warm=1)
    check(P.measured_peak is not None and P.store_all_ms < 100 * ms and P.predicted_step_ms < 100 * ms,
          "a store-all step timed 1000x slow: the plan's store-all %.1f ms and prediction %.1f ms, a plain "
          "step %.1f ms" % (P.store_all_ms, P.predicted_step_ms, ms))
    rematplan.forget(m)


def run(check):
    import time
    for t in (test_autograd, test_saved, test_keywords, test_planned_again, test_structure_changed,
              test_other_inputs, test_autocast_kind, test_hooks_disabled, test_out_of_memory, test_checkpointed, test_inputs_kept, test_own_generator, test_model_fails_alone,
              test_not_a_loss, test_slow_store_all_step):
        t0 = time.perf_counter()
        t(check)
        print("%s: %.1f s" % (t.__name__, time.perf_counter() - t0))
