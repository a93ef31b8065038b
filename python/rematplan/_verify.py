"""verify(): one step of an applied model against the same step of the
model without the plan, and against itself.

  - The loss and every parameter's gradient, bit for bit, against a step of
    the unplanned model from the same RNG state (dropout on): a plan must not
    change what the model computes (a user's hook that ran twice, a skipped
    block that ran anyway, a stale value would show here).
  - Every recomputed tensor against its first computation: while verifying,
    the applied model's recipes (recompute.py) hash each value they make in
    the forward (BLAKE2b of its bytes) and compare the hash when the
    backward rebuilds it.
  - Peak memory, the step's high-water mark above what was allocated before
    it: on CUDA torch.cuda.max_memory_allocated (reset before the step); on
    CPU the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
    above its RSS before the step, and PyTorch's own count of the bytes its
    CPU allocator hands out (the profiler's memory events, summed in time
    order), which is what the plan predicts.
Parameters' gradients are allocated before the step, so neither counts
them: the plan's budget is the activations' (with their gradients and the
kernels' workspaces), as remat's is.
"""
import hashlib

import torch

from ._lib import RematError
from ._tree import Example
from .capture import ModelState, loss_of
from .memory import Events, allocator_only_works, allocator_peak, collect
from .recompute import MODIFIED, _storage_numel


class VerifyError(AssertionError):
    pass


def digest(t):
    t = t.detach()
    b = t.reshape(-1).contiguous().view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)
    return hashlib.blake2b(b.cpu().numpy().tobytes(), digest_size=16).hexdigest(), tuple(t.shape), str(t.dtype)


class Checker:
    """The recipes' values hashed where the forward makes them and where the backward rebuilds them."""

    def __init__(self):
        self.first = {}  # (id(recipe), version) -> (digest, size, stride, offset)
        self.recorded = self.compared = 0
        self.mismatches = []
        self.unreproducible = []  # recomputed tensors whose op gives other bytes on the same inputs itself
        self.keep = []   # the recipes hashed: ids stay unique while verifying

    def before(self, step):
        pass

    def made(self, recipe, version, t):
        self.keep.append(recipe)
        self.first[(id(recipe), version)] = (digest(t), tuple(t.shape), tuple(t.stride()), t.storage_offset())
        self.recorded += 1

    def rebuilt(self, recipe, version, base, again=None):
        """again(): the op run once more on the rebuild's inputs (None: not asked). A rebuilt value that
        differs from its first computation where the op itself differs from run to run on the same
        inputs is the op's, not the plan's: noted, and the gradients are what verify() compares."""
        f = self.first.get((id(recipe), version))
        if f is None:
            return
        d, size, stride, offset = f

        def as_made(x):  # the tensor hashed in the forward, as a view of the rebuilt storage x
            return x.as_strided(size, stride, offset - recipe.offset + x.storage_offset())
        t = as_made(base)
        self.compared += 1
        if digest(t) == d:
            return
        what = "a recomputed tensor %s %s differs from its first computation (op %s)" % (
            d[1], d[2], recipe.steps[version - 1].func)
        runs = []  # (held: each run's output is another allocation)
        for fill in (0xA5, 0x5A, 0x00) if again is not None else ():
            _poison(base, fill)
            runs.append(again())
            if digest(as_made(runs[-1])) != digest(t):
                self.unreproducible.append(what + ", and so does the op run again on the same inputs: its own "
                                           "bytes, not the plan's")
                return
        self.mismatches.append(what)


def _poison(like, fill):
    """A freed block of like's storage size holding `fill`: the next allocation of that size may reuse it,
    so bytes an op leaves unwritten show it (a run on fresh zeroed pages gave the same bytes as the rebuild
    and hid that the op's workspace is partly unwritten: mkldnn_rnn_layer's)."""
    torch.empty(_storage_numel(like) * like.element_size(), dtype=torch.uint8, device=like.device).fill_(fill)


def _rss():
    with open("/proc/self/status") as f:
        st = dict(line.split(":", 1) for line in f if ":" in line)
    return int(st["VmRSS"].split()[0]) * 1024, int(st["VmHWM"].split()[0]) * 1024


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(step, device=None, allocator=True, rss=True, timed=False, prime=False):
    """Runs step() once; returns {"rss_delta", "allocator_peak" or "cuda_peak"} in bytes, and where
    timed "ms", the wall time of the step whose peak is counted (on CPU the profiler records the
    allocator's events and no op's: memory.Events). Python's garbage is collected first: tensors
    freed by a collection during the step (of garbage from before it) would count against the
    step's own allocations; so are autocast's cached casts (fresh()). prime: a step before it, profiled,
    where no RSS step runs (the step measured follows steps no profiler saw)."""
    import contextlib
    import time
    out = {}
    fresh()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize(dev)
        ms = (time.perf_counter() - t0) * 1e3
        out["cuda_peak"] = torch.cuda.max_memory_allocated(dev) - base
    else:
        rss0, _ = _rss()
        if rss and _reset_hwm():
            with Events(allocator_only=True) if allocator else contextlib.nullcontext():
                step()  # (profiled: see below)
            _, hwm = _rss()
            out["rss_delta"] = max(hwm - rss0, 0)
            fresh()
        elif allocator and prime:
            with Events(allocator_only=True):
                step()
            fresh()
        ms = None
        if allocator:
            # The profiler drops the free of a block allocated while no profiler ran: what the step before
            # left and this one frees (spectral_norm's `weight` attribute, a model's kept tensors) counted
            # as still held. After verify()'s unprofiled steps the count was up to 53% over the steady
            # state's; the step before it is profiled (the RSS step, or `prime`'s)
            with Events(allocator_only=True) as prof:
                t0 = time.perf_counter()
                step()
                ms = (time.perf_counter() - t0) * 1e3
            out["allocator_peak"] = allocator_peak(prof.events())
    if timed and ms is not None:
        out["ms"] = ms
    return out


def fresh():
    """Before a measured step: Python's garbage collected (measure()), and autocast's cache of parameter
    casts emptied, so that the step makes its casts as a training loop's step in a fresh `with
    autocast():` does. Inside one autocast context (plan() called inside the training's) torch keeps
    the casts of the context's first pass: the steps after it ran without the casts' ops (an applied
    plan's op keys then named other ops) and measured without their bytes, and a plan measured within
    its budget ran over it in training. Emptied outside the measured span: emptied inside it, the
    casts of an earlier step were freed there and lowered the step's peak."""
    collect()
    torch.clear_autocast_cache()


def _step(model, args, kept):
    """One training step as a loop runs it: what the forward returns is held through the backward."""
    from ._apply import RematModel
    applied = isinstance(model, RematModel)

    def step():
        kept.rewind()
        out = args.call(model)
        try:
            loss_of(out).backward()
        except RuntimeError as e:
            # the plain model's own error is its own (and so is the one the applied model's hooks raise as
            # PyTorch does: recompute.MODIFIED)
            if "modified by an inplace operation" in str(e) and applied and MODIFIED not in str(e):
                raise RematError("rematplan: a recomputed region read a tensor an in-place op changed (%s); "
                                 "this is a rematplan bug: please report it with the model" % e) from None
            raise
    return step


def measure_step(model, inputs, device=None, timed=False):
    """The activation peak of one training step of model(*inputs), in bytes: PyTorch's allocator
    count on CPU, max_memory_allocated on CUDA; timed: (the peak, the step's wall time in ms, or None
    where this torch's profiler records every op in it). The model is left as it was."""
    args = Example.of(inputs)
    with ModelState(model, zero_grads=True, inputs=args) as k:
        r = measure(_step(model, args, k), device, rss=False, timed=timed)
    peak = r.get("cuda_peak", r.get("allocator_peak"))
    if not timed:
        return peak
    return peak, r.get("ms") if "cuda_peak" in r or allocator_only_works() else None


def store_all_step(model, inputs, device=None):
    """(measure_step's peak, time_step's time) of the store-all step, from one step: no dispatch mode
    runs in it, and on CPU the profiler records the allocator's events and no op's (memory.Events),
    so the step runs at its plain speed. Where this torch records every op (allocator_only_works()
    false), the time is of a second step, time_step's. The model is left as it was."""
    args = Example.of(inputs)
    with ModelState(model, zero_grads=True, inputs=args) as k:
        r = measure(_step(model, args, k), device, rss=False, timed=True)
    peak = r.get("cuda_peak", r.get("allocator_peak"))
    ms = r["ms"] if "cuda_peak" in r or allocator_only_works() else time_step(model, inputs, device)
    return peak, ms


def time_step(model, inputs, device=None, runs=1, warm=0):
    """The wall time of one training step of model(*inputs) in ms (the fastest of `runs`, after `warm`
    more); the model is left as it was."""
    import time
    args = Example.of(inputs)
    cuda = device is not None and torch.device(device).type == "cuda"
    best = None
    with ModelState(model, zero_grads=True, inputs=args) as k:
        step = _step(model, args, k)
        for i in range(runs + warm):
            if cuda:
                torch.cuda.synchronize(device)
            torch.clear_autocast_cache()  # (fresh(): each step makes its casts)
            t0 = time.perf_counter()
            step()
            if cuda:
                torch.cuda.synchronize(device)
            ms = (time.perf_counter() - t0) * 1e3
            if i >= warm:
                best = ms if best is None else min(best, ms)
    return best


def _grads(model):
    return [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]


def _same(a, b):
    """Bit for bit, sparse gradients too (nn.Embedding(sparse=True): torch.equal has no sparse kernel)."""
    if a is None or b is None:
        return a is None and b is None
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    if a.layout == torch.sparse_coo:
        a, b = a.coalesce(), b.coalesce()
        return torch.equal(a.indices(), b.indices()) and torch.equal(a.values(), b.values())
    if a.layout != torch.strided:
        a, b = a.to_dense(), b.to_dense()
    return torch.equal(a, b)


def verify(model, inputs, device=None, check_memory=True, raise_on_mismatch=True):
    """One step of an applied model: its loss and gradients against the unplanned model's from the same
    RNG state, its recomputed tensors against their first computation (bit for bit: "mismatches"; where
    the op itself gives other bytes when run again on the same inputs, "unreproducible" instead), its
    peak measured against the plan. Leaves the model's buffers, gradients and RNG as it found them.
    Returns a dict."""
    if not isinstance(model, torch.nn.Module):
        from .capture import ModelError
        raise ModelError("rematplan.verify: the model must be the applied model (rematplan.apply's result) or an "
                         "nn.Module, not a %s" % type(model).__name__)
    plan = getattr(model, "remat_plan", None)
    plain = getattr(model, "remat_model", model)
    args = Example.of(inputs)
    res = {}
    with ModelState(model, zero_grads=True, inputs=args) as k:
        k.rewind()
        torch.clear_autocast_cache()  # each step makes its casts (fresh()), the ops the plan's keys name
        with ModelState(plain, zero_grads=True):  # buffers back as they were for the planned step
            out = args.call(plain)
            loss0 = loss_of(out).detach().clone()
            loss_of(out).backward()
            want = _grads(plain)
            del out
        k.rewind()
        torch.clear_autocast_cache()
        check = Checker()
        if hasattr(model, "remat_check"):
            object.__setattr__(model, "remat_check", check)
        try:
            with ModelState(plain, zero_grads=True):
                out = args.call(model)
                loss1 = loss_of(out).detach().clone()
                loss_of(out).backward()
                got = _grads(plain)
                del out
        finally:
            if hasattr(model, "remat_check"):
                object.__setattr__(model, "remat_check", None)
        res["loss_equal"] = _same(loss0, loss1)
        res["grads_differ"] = [n for (n, _), a, b in zip(plain.named_parameters(), want, got) if not _same(a, b)]
        res["recorded"], res["compared"], res["mismatches"] = check.recorded, check.compared, list(check.mismatches)
        res["unreproducible"] = list(check.unreproducible)
        if check_memory:
            res.update(measure(_step(model, args, k), device, prime=True))
    if plan is not None:
        res["predicted_peak"] = plan.peak_bytes
        res["budget"] = plan.budget_bytes
    measured = res.get("cuda_peak", res.get("allocator_peak"))
    if measured is not None and plan is not None:
        res["measured_peak"] = measured
        res["within_budget"] = measured <= plan.budget_bytes
    problems = list(res["mismatches"])
    if not res["loss_equal"]:
        problems.insert(0, "the loss differs from the unplanned model's (%r vs %r)" % (loss1.item(), loss0.item()))
    if res["grads_differ"]:
        problems.insert(0, "%d gradients differ from the unplanned model's: %s" % (
            len(res["grads_differ"]), ", ".join(res["grads_differ"][:5])))
    res["ok"] = not problems
    if raise_on_mismatch and problems:
        raise VerifyError("rematplan.verify: " + "; ".join(problems[:6]))
    return res
