"""rematplan against what a training script does around it, run by
tests/python_rematplan.py (make test: torch 1.13, CPU) and
tests/python_rematplan_hf.py (make test-torch2):

  - the applied model's top-level parameters and buffers are the model's,
    whatever replaces them: .to(torch.bfloat16) (Module._apply replaces
    buffers) and load_state_dict(assign=True) (torch 2.x) replaced them on
    the applied model alone, and the forward ran on the old tensors (a raw
    dtype error, or an optimizer training tensors the forward never read);
    register_buffer, setattr, copies (deepcopy, torch.save) and train/eval
    share them too; a converted model steps bit for bit as the plain model
    converted alike, and says once that it is not the step planned;
  - plan() inside the training's autocast context measures steps that make
    their casts, as a training step in a fresh context does (autocast kept
    the first pass's casts for the context's life: the store-all and the
    plans measured without them, and training ran over the budget);
  - a budget string with a control character (a NUL cut it at the C
    string's end: "64\\0MiB" was 64 bytes; a newline split the message) is a
    one-line ValueError, and every whole number of bytes above 2^60 is
    refused (2^60 + 1 was 2^60: libremat's parser reads a double);
  - plan() leaves the global RNG as it found it (the rates measured by the
    first plan() of a process drew from it);
  - a step that trains plainly and fails only while rematplan records it
    (torch.func transforms refuse saved-tensor hooks; torch 1.13's mode
    cannot make tensor subclasses) is a ModelError saying so, not torch's
    raw RuntimeError;
  - plan(reuse=P) takes P's profile only where P is a plan of this model for
    these inputs (a profile of a batch of 8 planned a batch of 256 six times
    over its budget), else a TypeError or ValueError;
  - plan_graph answers a graph dict edited since its last call as the graph
    it is now (answers were kept by the object); its numbers (scale, inner,
    store_all_bytes) and graphs nested past Python's stack are refused with
    a message; a "block" after node 0 had none (a SIGSEGV in libremat);
  - verify() and forget() given what is not a model, and the compile
    solver given memory it cannot plan, refuse with a message.
"""
import copy
import io
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

import rematplan
from python_rematplan_ops import MLP, Noisy
from python_rematplan_small import plan_or_least, quiet, same, step


class TopLevel(nn.Module):
    """Tokens in (their dtype never changes), a parameter and a buffer on the model itself (ViT's
    position embedding, a fixed bias), blocks below it."""

    def __init__(self, vocab=64, d=64, layers=4):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(16, d) / 8)
        self.register_buffer("bias", torch.randn(d) / 8)
        self.fcs = nn.ModuleList(nn.Linear(d, d) for _ in range(layers))
        self.head = nn.Linear(d, vocab)

    def forward(self, idx, y):
        x = self.emb(idx) + self.pos + self.bias
        for fc in self.fcs:
            x = x + torch.tanh(fc(x))
        return F.cross_entropy(self.head(x).float().flatten(0, 1), y.flatten())


def _planned_top_level():
    torch.manual_seed(0)
    m = TopLevel()
    g = torch.Generator().manual_seed(1)
    args = (torch.randint(0, 64, (8, 16), generator=g), torch.randint(0, 64, (8, 16), generator=g))
    return m, rematplan.apply(m, plan_or_least(m, args, 0.4)), args


def _shared(cm):
    """Whether the applied model's entries are its model's: the same objects, names and order."""
    m = cm.remat_model
    return (list(cm.named_parameters()) == list(m.named_parameters()) and
            all(a is b for (_, a), (_, b) in zip(cm.named_parameters(), m.named_parameters())) and
            list(cm.state_dict()) == list(m.state_dict()) and
            all(a is b for a, b in zip(cm.state_dict(keep_vars=True).values(), m.state_dict(keep_vars=True).values())))


def test_entries_shared(check):
    """.to(torch.bfloat16) of the applied model: the model it runs is converted, its steps (and an
    optimizer's over the applied model's parameters) bit for bit those of the plain model converted
    alike, and a RuntimeWarning says once that this is not the step planned. Also register_buffer,
    setattr, train/eval, deepcopy and torch.save."""
    m, cm, args = _planned_top_level()
    ref = copy.deepcopy(m).to(torch.bfloat16)
    cm = cm.to(torch.bfloat16)
    ok = check(_shared(cm) and m.bias.dtype == m.pos.dtype == torch.bfloat16,
               ".to(bfloat16) of the applied model converts the model it runs (bias %s, pos %s)"
               % (m.bias.dtype, m.pos.dtype))
    if ok:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            runs = [_trained(cm, args), _trained(ref, args)]
        said = [w for w in said if "rematplan" in str(w.message) and "model changed" in str(w.message)]
        check(all(torch.equal(a[0], b[0]) and same(a[1], b[1]) for a, b in zip(*runs)) and
              cm.remat_last.stats["recipes"] > 0,
              "the applied model in bfloat16 trains bit for bit as the plain model converted alike")
        check(len(said) == 1, "a converted model says once that its step is not the one planned: %d" % len(said))
    cm.register_buffer("extra", torch.ones(3))
    cm.scale = nn.Parameter(torch.ones(1))
    check(getattr(m, "extra", None) is cm.extra and getattr(m, "scale", None) is cm.scale and _shared(cm),
          "register_buffer and setattr of a parameter on the applied model give them to the model")
    cm.eval()
    check(not m.training and not m.fcs[0].training, "eval() of the applied model: the model's training mode")
    cm.train()
    for how, c2 in (("deepcopy", copy.deepcopy(cm)), ("torch.save", _saved(cm))):
        c2 = c2.double()
        check(_shared(c2) and c2.remat_model.bias.dtype == torch.float64 and c2.remat_model is not m,
              "a copy (%s) of the applied model shares its own model's entries" % how)
    rematplan.forget(m)


def test_transparent(check):
    """The applied model stands for the model where a training loop looks at it: its forward's
    signature is the model's (HF's Trainer keeps the dataset columns the forward names: with
    (*args, **kwargs) it dropped them all, "the batch received was empty"), and what it does not have
    itself is the model's (.config, methods); copies keep both, and run bit for bit."""
    import inspect
    m, cm, args = _planned_top_level()
    m.config = {"d": 64}
    m.describe = lambda: "top"
    sig = inspect.signature(cm.forward)
    check(list(sig.parameters) == ["idx", "y"] and sig == inspect.signature(m.forward),
          "the applied model's forward has the model's signature: %s" % sig)
    check(getattr(cm, "config", None) is m.config and getattr(cm, "describe", lambda: None)() == "top" and
          cm.fcs is m.fcs,
          "an attribute the applied model does not have is the model's (config, a method)")
    try:
        cm.no_such_thing
        missing = "found"
    except AttributeError as e:
        missing = str(e)
    check("no_such_thing" in missing, "a name neither has: AttributeError naming it (%s)" % missing)
    del m.describe  # (a local function: not to be pickled)
    ref = step(m, args, 4)
    for how, c2 in (("deepcopy", copy.deepcopy(cm)), ("torch.save", _saved(cm))):
        got = step(c2, args, 4)
        check(list(inspect.signature(c2.forward).parameters) == ["idx", "y"] and c2.forward.__self__ is c2 and
              equal_steps(ref, got) and c2.remat_last.stats["recipes"] > 0,
              "a copy (%s) keeps the signature, runs its own plan, bit for bit" % how)
    rematplan.forget(m)


def equal_steps(a, b):
    return torch.equal(a[0], b[0]) and same(a[1], b[1])


def _trained(module, args, steps=2):
    """(loss, gradients) of each of `steps` steps, an SGD step over module.parameters() after each."""
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    out = []
    for _ in range(steps):
        out.append(step(module, args, 5)[:2])
        opt.step()
    return out


def _saved(module):
    buf = io.BytesIO()
    torch.save(module, buf)
    buf.seek(0)
    load = torch.load
    return load(buf, weights_only=False) if "weights_only" in load.__code__.co_varnames else load(buf)


def test_load_assign(check):
    """load_state_dict(sd, assign=True) (torch >= 2.1) of the applied model: the model it runs gets
    the checkpoint's tensors, its step is the plain model's with that checkpoint, and an optimizer
    over the applied model's parameters trains what the forward reads. Skipped where this torch
    has no assign."""
    m, cm, args = _planned_top_level()
    torch.manual_seed(3)
    sd = {k: torch.randn_like(v) for k, v in cm.state_dict().items()}
    try:
        cm.load_state_dict(sd, assign=True)
    except TypeError:
        print("test_load_assign: this torch (%s) has no load_state_dict(assign=True): skipped" % torch.__version__)
        rematplan.forget(m)
        return
    ref = TopLevel()
    ref.load_state_dict(sd)
    check(m.pos is cm.pos and m.bias is cm.bias and _shared(cm) and torch.equal(m.pos, sd["pos"]),
          "load_state_dict(assign=True): the model it runs holds the checkpoint's tensors")
    a, b = step(cm, args, 4), step(ref, args, 4)
    check(torch.equal(a[0], b[0]) and same(a[1], b[1]),
          "load_state_dict(assign=True): loss and gradients those of the plain model with the checkpoint")
    rematplan.forget(m)


def _fresh_step_peak(model, args):
    """The allocator's peak of one training step as a loop runs it: a fresh autocast context for the
    forward, the backward after it."""
    from rematplan.memory import Events, allocator_peak, collect
    collect()
    with Events(allocator_only=True) as ev:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(*args)
        loss.backward()
        del loss
    return allocator_peak(ev.events())


def test_autocast_cache(check):
    """plan() inside the training's autocast context, as the docs advise, after a step in that context:
    the store-all it measures makes the weights' casts, as a training step does in a fresh context
    (never below that step's peak), and the applied model's training step is within the budget.
    Before, the context's cache held the first pass's casts: the store-all measured 13% under a
    training step, and the recorded step lacked the casts' ops, so the plan named other ops in
    training (5 of them; its step 1.9x the budget)."""
    torch.manual_seed(0)
    m = MLP(d=128, layers=4)  # (its weights' casts cached for the autocast context's life)
    args = (torch.randn(256, 128), torch.randint(0, 10, (256,)))
    for p in m.parameters():
        p.grad = torch.zeros_like(p)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        m(*args)  # a step before plan(), in the same context: its casts cached
        P = plan_or_least(m, args, 0.5)
    fresh = _fresh_step_peak(m, args)
    check(fresh <= P.store_all_bytes <= 1.1 * fresh, "plan() inside autocast: the measured store-all %d is a "
          "training step's %d, or above it by the casts no backward reads (held by plan()'s context to the step's "
          "end, freed where the training's context exits)" % (P.store_all_bytes, fresh))
    cm = rematplan.apply(m, P)
    applied = _fresh_step_peak(cm, args)
    other = cm.remat_last.stats["other_op"]
    check(applied <= P.budget_bytes and other == 0, "plan() inside autocast: the applied model's training step "
          "%d is within the budget %d, every op the plan names found (%d others)" % (applied, P.budget_bytes, other))
    rematplan.forget(m)


def test_autocast_loop(check):
    """A loop inside one autocast context: its later steps find the weights' casts in autocast's cache
    and make none, so the casts count for nothing in the op keys (they shifted every later op of each
    module call: the plan's recomputation landed on no op, 8 recipes a step fell to 2, and the steps
    measured 16% over the budget)."""
    from rematplan.memory import Events, allocator_peak, collect
    torch.manual_seed(0)
    m = nn.Sequential(*[nn.Sequential(nn.Conv2d(c, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
                        for c, o in ((3, 16), (16, 16), (16, 32))])
    model = _ConvLoss(m)
    args = (torch.randn(8, 3, 24, 24), torch.randint(0, 10, (8,)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        P = plan_or_least(model, args, 0.01)
    A = rematplan.apply(model, P)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    peaks, recipes = [], []
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(3):
            collect()
            with Events(allocator_only=True) as ev:
                loss = A(*args)
                loss.backward()
                del loss
            peaks.append(allocator_peak(ev.events()))
            recipes.append(A.remat_last.stats["recipes"])
    # (the first step's recipes include the casts' own, which the later steps do not make)
    check(max(peaks) <= P.budget_bytes and recipes[1] == recipes[2] >= recipes[0] // 2,
          "a loop in one autocast context: peaks %s within the budget %d, the plan's recipes made each step %s"
          % (peaks, P.budget_bytes, recipes))
    rematplan.forget(model)


class _ConvLoss(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.body, self.head = body, nn.Linear(32, 10)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.body(x).mean((2, 3))), y)


def test_budget_text(check):
    """A control character in a budget string is refused, one line, before anything runs (a NUL cut the
    C string: "64\\0MiB" was 64 bytes, and plan() planned "900000\\0 junk" at 900000); a whole number of
    bytes above 2^60 is refused in libremat's words however near (2^60 + 1 was 2^60), and one below is
    taken exactly."""
    from rematplan.planning import budget_bytes
    for text in ("64\x00MiB", "900000\x00 junk", "50%\x00x", "3MiB\n", "\r3MiB", "3\tMiB", "3MiB\x1b", "3\u2028MiB"):
        try:
            got = budget_bytes(text, 10 ** 6)
            check(False, "budget %r: taken as %d bytes" % (text, got))
        except ValueError as e:
            msg = str(e)
            check(len(msg.splitlines()) == 1 and repr(text) in msg and "control character" in msg,
                  "budget %r: a one-line ValueError naming the control character: %r" % (text, msg))
    try:  # (a model whose forward returns no loss: a capture would refuse it)
        quiet(rematplan.plan, nn.Linear(2, 2), torch.randn(1, 2), "900000\x00 junk")
        check(False, "plan() with a NUL in its budget: planned")
    except Exception as e:  # noqa: BLE001 (which error, and what it says, is the check)
        check(isinstance(e, ValueError) and "control character" in str(e),
              "plan() with a NUL in its budget: refused before the capture: %s" % e)
    for b in (1 << 60, (1 << 60) - 1, 123456789012345678):
        check(budget_bytes(b, 1) == b and budget_bytes(str(b), 1) == b, "budget %d bytes: taken exactly" % b)
    for b in ((1 << 60) + 1, (1 << 60) + 1000, 1 << 61, 1 << 70, str((1 << 60) + 1), "9" * 30):
        try:
            got = budget_bytes(b, 1)
            check(False, "budget %r bytes above 2^60: taken as %d" % (str(b)[:30], got))
        except ValueError as e:
            check("too large: at most 2^60 bytes" in str(e), "budget %s bytes: refused: %s" % (str(b)[:30], e))


def test_rng_kept(check):
    """The first plan() of a process (here: after forget_rates()) leaves the global RNG as it was: its
    rates are measured on random tensors, which drew from it."""
    import os
    from rematplan import pricing
    kept, rates_file = dict(pricing._memo), os.environ.pop("REMATPLAN_RATES", None)  # (forget_rates deletes it)
    try:
        rematplan.forget_rates()
        torch.manual_seed(0)
        m = Noisy()  # (random draws in its step: their class's rate, and a mask's rebuild, are measured too)
        args = (torch.randn(128, 128), torch.randint(0, 10, (128,)))
        before = torch.get_rng_state()
        plan_or_least(m, args, 0.5)
        check(torch.equal(before, torch.get_rng_state()), "the first plan() of a process leaves the CPU RNG as it was")
        rematplan.forget(m)
    finally:
        pricing._memo.update(kept)  # the rates the other tests priced with
        if rates_file is not None:
            os.environ["REMATPLAN_RATES"] = rates_file


class FuncGrad(nn.Module):
    """A gradient penalty by torch.func.grad (functorch's grad on torch 1.13) inside the forward."""

    def __init__(self, grad):
        super().__init__()
        self.fc, self.head, self.grad = nn.Linear(16, 16), nn.Linear(16, 1), grad

    def forward(self, x):
        h = torch.tanh(self.fc(x))
        g = self.grad(lambda v: torch.sin(v).sum())(h)
        return self.head(h).pow(2).mean() + g.pow(2).mean()


class Subclassed(nn.Module):
    """A tensor subclass made in the forward (as_subclass)."""

    class Tagged(torch.Tensor):
        pass

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.tanh(self.fc(x)).as_subclass(self.Tagged)
        return torch.sigmoid(h).pow(2).mean().as_subclass(torch.Tensor)


def _func_grad():
    if hasattr(torch, "func") and hasattr(torch.func, "grad"):
        return torch.func.grad
    try:
        import functorch
        return functorch.grad
    except ImportError:
        return None


def test_recording_errors(check):
    """A step that trains plainly but fails under rematplan's hooks and mode: a ModelError that says
    so (it was torch's RuntimeError), the model as it was; a model's own error stays its own."""
    x = torch.randn(8, 16)
    models = [("torch.func.grad", FuncGrad(_func_grad()))] if _func_grad() else []
    models.append(("as_subclass", Subclassed()))
    for name, m in models:
        state = copy.deepcopy(m.state_dict())
        try:
            quiet(rematplan.plan, m, (x,), 0.5)
            ok = name == "as_subclass"  # (torch 2.x records it)
            why = "planned"
        except rematplan.BudgetError as e:
            ok, why = name == "as_subclass", str(e)[:80]
        except rematplan.ModelError as e:
            ok, why = "trains without rematplan" in str(e), str(e)[:160]
        except Exception as e:  # noqa: B902
            ok, why = False, "%s: %s" % (type(e).__name__, str(e)[:160])
        check(ok and all(torch.equal(v, m.state_dict()[k]) for k, v in state.items())
              and all(p.grad is None for p in m.parameters()), "%s in the forward: %s" % (name, why))

    class Broken(nn.Module):
        def forward(self, x):
            raise KeyError("the model's own")
    try:
        quiet(rematplan.plan, Broken(), (x,), 0.5)
        check(False, "a model raising its own error: planned")
    except KeyError as e:
        check("the model's own" in str(e), "a model raising its own error: %r" % e)


def test_reuse(check):
    """plan(reuse=P): P's profile for the same model and inputs (not captured again); a plan of other
    inputs, of another model, or not a plan of a model: refused."""
    torch.manual_seed(0)
    m = MLP()
    small, big = (torch.randn(16, 256), torch.randint(0, 10, (16,))), (torch.randn(64, 256), torch.randint(0, 10, (64,)))
    P = plan_or_least(m, small, 0.5)
    Q = quiet(rematplan.plan, m, small, P.budget_bytes, reuse=P)
    check(Q.profile is P.profile, "reuse: the same model and inputs reuse the profile")
    for what, model, args, reuse, err in (("other inputs", m, big, P, ValueError),
                                          ("another model", MLP(), small, P, ValueError),
                                          ("a string", m, small, "my plan", TypeError)):
        try:
            quiet(rematplan.plan, model, args, 10 * P.budget_bytes, reuse=reuse)
            check(False, "reuse of %s: planned" % what)
        except err as e:
            check("reuse" in str(e) and "\n" not in str(e), "reuse of %s: %s" % (what, e))


def _graph(scale=1):
    return {"nodes": [{"name": "n%d" % i, "forward_time": 1.0, "backward_time": 2.0, "output_bytes": 1000 * scale}
                      for i in range(6)],
            "edges": [{"producer": i, "consumer": i + 1} for i in range(5)]}


def test_graph_edited(check):
    """plan_graph of a dict edited since its last call plans the graph as it is now; bad numbers, deep
    nesting and a "block" after none are refused with a message."""
    g = _graph()
    P = rematplan.plan_graph(g, 6000)
    for nd in g["nodes"]:
        nd["output_bytes"] *= 100
    try:
        Q = rematplan.plan_graph(g, 6000)
        check(False, "an edited graph: planned from its old answers (store-all %d)" % Q.store_all_bytes)
    except rematplan.BudgetError as e:
        check(e.store_all_bytes == 100 * P.store_all_bytes, "an edited graph: store-all %d" % e.store_all_bytes)
    g = _graph()
    g["nodes"][1]["name"] = "n0"
    try:
        rematplan.plan_graph(g, 6000)
        check(False, "an edited graph with two nodes named n0: planned")
    except rematplan.RematError as e:
        check("named" in str(e), "an edited graph with two nodes named n0: %s" % e)
    deep = []
    for _ in range(100000):
        deep = [deep]
    bad = [("deep", dict(_graph(), extra=deep), {}, rematplan.RematError),
           ("block after none", dict(_graph(), nodes=[dict(nd, block=0) if i == 1 else nd
                                                      for i, nd in enumerate(_graph()["nodes"])]), {},
            rematplan.RematError),
           ("scale nan", _graph(), {"scale": float("nan")}, ValueError),
           ("scale -1", _graph(), {"scale": -1}, ValueError),
           ("scale '2'", _graph(), {"scale": "2"}, TypeError),
           ("inner nan", _graph(), {"inner": float("nan")}, ValueError),
           ("store_all_bytes nan", _graph(), {"store_all_bytes": float("nan")}, ValueError)]
    for what, graph, kw, err in bad:
        try:
            rematplan.plan_graph(graph, 6000, **kw)
            check(False, "plan_graph with %s: planned" % what)
        except err as e:
            check("\n" not in str(e), "plan_graph with %s: %s" % (what, e))


def test_not_a_model(check):
    """verify() and forget() given a function, the compile solver given memory it cannot plan: a message."""
    for what, call in (("verify(a function)", lambda: rematplan.verify(len, (torch.ones(1),))),
                       ("forget('model')", lambda: rematplan.forget("model"))):
        try:
            call()
            check(False, "%s: no error" % what)
        except rematplan.ModelError as e:
            check("nn.Module" in str(e), "%s: %s" % (what, e))
    from rematplan.compile import solve
    check(solve([1.0, 2.0], None, float("inf")) == ([0, 1], []), "the compile solver with an infinite budget")
    for what, memory, budget in (("a negative memory", [1.0, -2.0], 1.0), ("a NaN budget", [1.0, 2.0], float("nan")),
                                 ("100001 candidates", [1.0] * 100001, 1.0)):
        try:
            solve(memory, None, budget)
            check(False, "the compile solver given %s: solved" % what)
        except rematplan.RematError as e:
            check("compile solver" in str(e), "the compile solver given %s: %s" % (what, e))


def run(check):
    import time
    for t in (test_entries_shared, test_transparent, test_load_assign, test_autocast_cache, test_autocast_loop, test_budget_text,
              test_rng_kept,
              test_recording_errors, test_reuse, test_graph_edited, test_not_a_model):
        t0 = time.perf_counter()
        t(check)
        print("%s: %.1f s" % (t.__name__, time.perf_counter() - t0))
