"""verify(): every recomputed tensor against its first computation, bit for
bit, and the measured peak against the plan's prediction.

Hashes go through saved-tensor hooks: while verifying, every push of a
saved-tensor hook pair is mirrored in a Python stack, so inside a region
the hooks checkpoint installed (its pack in the first run, its inner pack
in the recomputation) are known; the region pushes its own pair on top,
which hashes each tensor an op saves (BLAKE2b of its bytes) and passes it
on to checkpoint's. The first run records the hashes in order; the
recomputation, which saves the same tensors in the same order, compares.

Peak memory, the step's high-water mark above what was allocated before it:
  - CUDA: torch.cuda.max_memory_allocated (reset before the step);
  - CPU: the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
    above its RSS before the step; and PyTorch's own count of the bytes its
    CPU allocator hands out (the profiler's memory events, summed in time
    order), which is what the plan predicts.
Parameters' gradients are allocated before the step, so neither counts
them: the plan's budget is the activations' (with their gradients and the
kernels' workspaces), as remat's is.
"""
import gc
import hashlib

import torch
import torch.autograd.graph

from . import _apply
from ._lib import RematError
from .capture import ModelState, loss_of


class VerifyError(AssertionError):
    pass


class _HookMirror:
    """Mirrors torch's saved-tensor hook stack; hands regions a recording pair."""

    def __init__(self, model):
        # parameters and buffers are not recomputed (BatchNorm's statistics change in the step)
        self.skip = {t.data_ptr() for t in list(model.parameters()) + list(model.buffers())}
        self.stack = []
        self.compared = 0
        self.recorded = 0
        self.mismatches = []

    def __enter__(self):
        A = torch._C._autograd
        self.push0, self.pop0 = A._push_saved_tensors_default_hooks, A._pop_saved_tensors_default_hooks

        def push(pack, unpack):
            self.stack.append((pack, unpack))
            return self.push0(pack, unpack)

        def pop():
            self.stack.pop()
            return self.pop0()

        A._push_saved_tensors_default_hooks, A._pop_saved_tensors_default_hooks = push, pop
        _apply._hooks = self
        return self

    def __exit__(self, *exc):
        A = torch._C._autograd
        A._push_saved_tensors_default_hooks, A._pop_saved_tensors_default_hooks = self.push0, self.pop0
        _apply._hooks = None

    def region(self, name):
        return _Record(self, name)


def digest(t):
    t = t.detach()
    b = t.reshape(-1).contiguous().view(torch.uint8) if t.dim() else t.reshape(1).view(torch.uint8)
    return hashlib.blake2b(b.cpu().numpy().tobytes(), digest_size=16).hexdigest(), tuple(t.shape), str(t.dtype)


class _Record:
    """One region instance: hashes of what its first run saved, compared by its recomputation."""

    def __init__(self, mirror, name):
        self.m, self.name, self.first = mirror, name, []

    def hooks(self, recompute):
        m, rec = self.m, self
        pack, unpack = m.stack[-1] if m.stack else (None, None)
        k = [0]

        def mine(t):
            if t.data_ptr() in m.skip:
                return pack(t) if pack else t  # parameters, buffers
            d = digest(t)
            if recompute:
                i = k[0]
                k[0] += 1
                m.compared += 1
                if i >= len(rec.first) or rec.first[i] != d:
                    m.mismatches.append("%s: saved tensor %d %s %s differs from its first computation"
                                        % (rec.name, i, d[1], d[2]))
            else:
                rec.first.append(d)
                m.recorded += 1
            return pack(t) if pack else t

        return torch.autograd.graph.saved_tensors_hooks(mine, unpack if unpack else (lambda x: x))


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


def _allocator_peak(prof):
    """The peak of bytes allocated (above the level at the start), from the profiler's raw memory
    events (every allocation and free of the CPU allocator) in time order."""
    ev = [e for e in prof.kineto_results.events() if e.name() == "[memory]" and e.device_type() ==
          torch.autograd.DeviceType.CPU]
    when = (lambda e: e.start_ns()) if ev and hasattr(ev[0], "start_ns") else (lambda e: e.start_us())
    ev.sort(key=when)  # stable: ties keep the recorded order
    live = peak = 0
    for e in ev:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


def measure(step, device=None, allocator=True, rss=True):
    """Runs step() once; returns {"rss_delta", "allocator_peak" or "cuda_peak"} in bytes. Python's
    garbage is collected first: tensors freed by a collection during the step (of garbage from
    before it) would count against the step's own allocations."""
    out = {}
    gc.collect()
    dev = torch.device(device) if device is not None else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
        step()
        torch.cuda.synchronize(dev)
        out["cuda_peak"] = torch.cuda.max_memory_allocated(dev) - base
        return out
    rss0, _ = _rss()
    if rss and _reset_hwm():
        step()
        _, hwm = _rss()
        out["rss_delta"] = max(hwm - rss0, 0)
    if allocator:
        gc.collect()
        with torch.autograd.profiler.profile(profile_memory=True) as prof:
            step()
        out["allocator_peak"] = _allocator_peak(prof)
    return out


def _step(model, args, kept):
    """One training step as a loop runs it: what the forward returns is held through the backward."""
    def step():
        kept.rewind()
        out = model(*args)
        try:
            loss_of(out).backward()
        except RuntimeError as e:
            if "modified by an inplace operation" in str(e):
                raise RematError("rematplan: a recomputed region read a tensor an in-place op changed (%s); "
                                 "this is a rematplan bug: please report it with the model" % e) from None
            raise
    return step


def measure_step(model, inputs, device=None):
    """The activation peak of one training step of model(*inputs), in bytes: PyTorch's allocator
    count on CPU, max_memory_allocated on CUDA. The model is left as it was."""
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    with ModelState(model, zero_grads=True) as k:
        r = measure(_step(model, args, k), device, rss=False)
    return r.get("cuda_peak", r.get("allocator_peak"))


def verify(model, inputs, device=None, check_memory=True, raise_on_mismatch=True):
    """One step of an applied model: recomputed tensors compared bit for bit with their first
    computation, the peak measured against the plan. Leaves the model's buffers, gradients and RNG
    as it found them. Returns a dict of the figures."""
    plan = getattr(model, "remat_plan", None)
    args = tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,)
    res = {}
    with ModelState(model, zero_grads=True) as k:  # parameters' gradients exist before the step: not activations
        step = _step(model, args, k)
        with _HookMirror(model) as m:
            step()
        res["recorded"], res["compared"], res["mismatches"] = m.recorded, m.compared, list(m.mismatches)
        if check_memory:
            res.update(measure(step, device))
    if plan is not None:
        res["predicted_peak"] = plan.peak_bytes
        res["budget"] = plan.budget_bytes
    measured = res.get("cuda_peak", res.get("allocator_peak"))
    if measured is not None and plan is not None:
        res["measured_peak"] = measured
        res["within_budget"] = measured <= plan.budget_bytes
    if raise_on_mismatch and res["mismatches"]:
        raise VerifyError("rematplan.verify: %d recomputed tensors differ from their first computation: %s"
                          % (len(res["mismatches"]), "; ".join(res["mismatches"][:5])))
    return res
