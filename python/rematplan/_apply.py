"""Applying a plan without touching the user's code: the modules a region
starts at have their forward replaced (on the instance, as accelerate's
hooks do) by one that, while the plan's model runs, runs the region under
non-reentrant torch.utils.checkpoint; the other calls of a fused region
hand its output on. Inactive (the model called on its own, a deepcopy),
the replaced forward is the module's own.

Region inputs are not handed to checkpoint (whose torch 1.13 form holds
them in a closure for the whole step, so a region nested in another would
keep its inputs even while the outer one is dropped): a small autograd
Function saves them through whatever saved-tensor hooks are active, i.e.
they are dropped with the outer region and recomputed with it, as torch >=
2.1's own nested checkpoint does. The RNG state is checkpoint's
(preserve_rng_state): dropout draws the same masks again.

On torch >= 2.4 a region may carry a selective policy: the ops the plan
saves (by name and occurrence in the region) are MUST_SAVE, the rest
PREFER_RECOMPUTE (torch.utils.checkpoint.create_selective_checkpoint_contexts).

Module state (pytorch#96136): a recomputation would update BatchNorm's
running statistics, or any buffer an op of the region writes, a second
time. The buffers a region writes are copied when it first runs; while it
recomputes they hold those copies (the recomputation sees what the first
run saw) and get their values back after it, written through .data so no
version counter moves.
"""
import functools
import threading
import types

import torch
import torch.utils.checkpoint as tc

from .capture import BUFFER, PARAM, Nothing, flat_tensors

_state = threading.local()


def recomputing():
    """Whether the current thread is inside a region's recomputation."""
    return getattr(_state, "depth", 0) > 0


class _Recompute:
    def __enter__(self):
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc):
        _state.depth -= 1


class _SaveInputs(torch.autograd.Function):
    """Saves a region's tensor inputs for its recomputation, through the active hooks."""

    @staticmethod
    def forward(ctx, dummy, *xs):
        ctx.save_for_backward(*xs)
        return dummy.detach().clone()

    @staticmethod
    def backward(ctx, *grads):  # never reached: the token feeds no loss
        return (None,) * (1 + len(ctx.saved_tensors))


_hooks = None  # _verify's saved-tensor hook mirror, while verifying


def sac_available():
    """Selective activation checkpointing (torch >= 2.4): per-op policies inside a region."""
    try:
        from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts  # noqa: F401
        return True
    except ImportError:
        return False


_respect = []


def _takes_respect_hooks():
    if not _respect:
        import inspect
        try:
            _respect.append("respect_saved_tensors_hooks" in inspect.signature(tc.checkpoint).parameters)
        except (TypeError, ValueError):
            _respect.append(False)
    return _respect[0]


def _sac_context(keys):
    """The selective policy of one region instance: MUST_SAVE for the (op, occurrence) in keys."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts
    counts = {False: {}, True: {}}

    def policy(ctx, op, *args, **kwargs):
        c = counts[bool(ctx.is_recompute)]
        name = str(op)
        k = c.get(name, 0)
        c[name] = k + 1
        return CheckpointPolicy.MUST_SAVE if (name, k) in keys else CheckpointPolicy.PREFER_RECOMPUTE
    return create_selective_checkpoint_contexts(policy)


class RunRegion:
    """A region made runnable: its modules, its body, where each call takes the one before's
    output, its selective keys and the buffers it writes."""

    def __init__(self, name, modules, items, places, keys, buffers):
        self.name, self.modules, self.items, self.places = name, modules, items, places
        self.keys, self.buffers = keys, buffers
        self.last_out, self.pending = None, 0


def _substitute(args, kwargs, place, x):
    """args/kwargs with the tensor at `place` (("a", i) or ("k", name)) replaced by x."""
    if place[0] == "a":
        args = args[:place[1]] + (x,) + args[place[1] + 1:]
    else:
        kwargs = dict(kwargs)
        kwargs[place[1]] = x
    return args, kwargs


def _first_tensor(out):
    return next(iter(flat_tensors(out)))


def run_body(rr, args, kwargs):
    """The region's items in order, each taking the output of the one before."""
    out = None
    for k, it in enumerate(rr.items):
        if k:
            args, kwargs = _substitute(args, kwargs, rr.places[k], _first_tensor(out))
        if isinstance(it, RunRegion):
            out = run_region(it, args, kwargs)
        else:
            _state.body = it
            try:
                out = it(*args, **kwargs)
            finally:
                _state.body = None
    return out


def _no_modes():
    """A context outside the dispatch modes in force (a selective policy's, which would count the
    guard's copies as ops of the region)."""
    try:
        from torch.utils._python_dispatch import _disable_current_modes
        return _disable_current_modes()
    except ImportError:  # torch 1.13: no selective checkpointing, nothing to step outside of
        return Nothing()


class _Guard:
    """A region's buffers: their values at its first run while it recomputes, then back."""

    def __init__(self, buffers):
        self.buffers = buffers
        self.first = [b.detach().clone() for b in buffers]

    def __enter__(self):
        with _no_modes(), torch.no_grad():
            self.now = [b.detach().clone() for b in self.buffers]
            for b, v in zip(self.buffers, self.first):
                b.data.copy_(v)

    def __exit__(self, *exc):
        with _no_modes(), torch.no_grad():
            for b, v in zip(self.buffers, self.now):
                b.data.copy_(v)


def run_region(rr, args, kwargs):
    """rr's body under non-reentrant checkpoint, its tensor inputs saved through the active hooks."""
    flat, rebuild = _flatten((args, kwargs))
    # each tensor once, and where it goes: a tensor passed twice comes back as one object (code such
    # as MultiheadAttention's `query is key` takes another path otherwise)
    tensors, where = [], []
    for x in flat:
        k = next((j for j, t in enumerate(tensors) if t is x), None) if isinstance(x, torch.Tensor) else None
        if isinstance(x, torch.Tensor) and k is None:
            tensors.append(x)
            k = len(tensors) - 1
        where.append(k)
    device = tensors[0].device if tensors else torch.device("cpu")
    dummy = torch.zeros(0, device=device, requires_grad=True)
    box = [_SaveInputs.apply(dummy, *tensors)]  # the token; let go once the inputs are taken back
    cell = [flat]
    template = [None if k is not None else x for x, k in zip(flat, where)]
    record = _hooks.region(rr.name) if _hooks is not None else None
    guard = _Guard(rr.buffers) if rr.buffers else None
    plan = getattr(_state, "active", None)

    def run(_anchor):
        xs = cell[0]
        if xs is None:  # recomputation: inputs from the token (maybe recomputed by an outer region)
            token = box.pop()
            saved = list(token.grad_fn.saved_tensors)
            del token
            xs = [saved[k] if k is not None else x for x, k in zip(template, where)]
            with _Active(plan), _Recompute(), guard if guard is not None else Nothing():
                return _call(rr, rebuild(xs), record, recompute=True)
        if recomputing():  # a first run inside an outer region's recomputation
            return _call(rr, rebuild(xs), None, recompute=False)
        return _call(rr, rebuild(xs), record, recompute=False)

    anchor = torch.zeros(0, device=device)  # checkpoint stashes the RNG of its arguments' devices
    extra = {}
    if rr.keys is not None:
        extra["context_fn"] = functools.partial(_sac_context, rr.keys)
        if _takes_respect_hooks():
            extra["respect_saved_tensors_hooks"] = False
    out = tc.checkpoint(run, anchor, use_reentrant=False, preserve_rng_state=True, **extra)
    cell[0] = None
    return out


class _Active:
    """The plan whose regions run (thread-local: the backward may run on another thread)."""

    def __init__(self, plan):
        self.plan = plan

    def __enter__(self):
        self.before = getattr(_state, "active", None)
        _state.active = self.plan

    def __exit__(self, *exc):
        _state.active = self.before


def _call(rr, a, record, recompute):
    args, kwargs = a
    if record is None:
        return run_body(rr, args, kwargs)
    with record.hooks(recompute):
        return run_body(rr, args, kwargs)


def _flatten(v):
    """The leaves of nested tuples, lists and dicts, and a function that rebuilds v from them."""
    leaves = []

    def spec(x):
        if isinstance(x, (tuple, list)) and type(x) in (tuple, list):
            return (type(x), [spec(y) for y in x])
        if isinstance(x, dict) and type(x) is dict:
            return (dict, [(k, spec(y)) for k, y in x.items()])
        leaves.append(x)
        return None
    s = spec(v)

    def rebuild(xs):
        it = iter(xs)

        def build(s):
            if s is None:
                return next(it)
            kind, parts = s
            if kind is dict:
                return {k: build(p) for k, p in parts}
            return kind(build(p) for p in parts)
        return build(s)
    return leaves, rebuild


# ---- the replaced forward --------------------------------------------------------------

def _patched_forward(self, *args, **kwargs):
    """The forward of a module some plan starts or continues a region at."""
    orig = self.__dict__.get("_remat_forward")
    call = orig if orig is not None else functools.partial(type(self).forward, self)
    plan = getattr(_state, "active", None)
    if getattr(_state, "body", None) is self:  # run by a region's body: the module itself
        _state.body = None
        return call(*args, **kwargs)
    role = plan.roles.get(self) if plan is not None else None
    if role is None or not torch.is_grad_enabled():
        return call(*args, **kwargs)
    kind, rr = role
    if kind == "pass":  # a later call of a fused region: its output was made by the first
        out = rr.last_out
        rr.pending -= 1
        if rr.pending <= 0:
            rr.last_out = None
        return out
    out = run_region(rr, args, kwargs)
    if len(rr.modules) > 1:
        rr.last_out, rr.pending = out, len(rr.modules) - 1
    return out


def _install(m):
    if isinstance(m.__dict__.get("forward"), types.MethodType) and m.__dict__["forward"].__func__ is _patched_forward:
        return
    if "forward" in m.__dict__:  # the user's own instance forward (accelerate's hooks...)
        object.__setattr__(m, "_remat_forward", m.__dict__["forward"])
    m.forward = types.MethodType(_patched_forward, m)


class Runtime:
    """A plan made runnable on its model: roles by module ("start" or "pass", RunRegion)."""

    def __init__(self, plan):
        S = plan.structure
        self.roles = {}
        self.count = 0
        for r in plan.regions:
            rr = self._make(r, S, plan)
            self.roles[S.calls[r.calls[0]].module] = ("start", rr)
            for c in r.calls[1:]:
                self.roles[S.calls[c].module] = ("pass", rr)
        for m in self.roles:
            _install(m)

    def _make(self, r, S, plan):
        from .planning import Region
        items, places = [], []
        prev = None
        for it in r.items:
            first = it.calls[0] if isinstance(it, Region) else it
            places.append(S.chain_place(S.calls[prev], S.calls[first]) if prev is not None else None)
            items.append(self._make(it, S, plan) if isinstance(it, Region) else S.calls[it].module)
            prev = it.calls[-1] if isinstance(it, Region) else it
        name = "remat_region_%d" % self.count
        self.count += 1
        return RunRegion(name, [S.calls[c].module for c in r.calls], items, places,
                         _keys(r, S, plan) if r.sac is not None else None, _buffers(r, S, plan))


def _span(r, S):
    return S.calls[r.calls[0]].first, S.calls[r.calls[-1]].end


def _keys(r, S, plan):
    """The selective policy's saved ops: (op name, its occurrence in the region)."""
    first, end = _span(r, S)
    ops = S.rec.ops[first:end]
    occ, counts = {}, {}
    for op in ops:
        k = counts.get(op.name, 0)
        counts[op.name] = k + 1
        occ[op.idx] = (op.name, k)
    return frozenset(occ[S.node_ops[i][0]] for i in r.sac if S.node_ops[i][0] in occ)


def _buffers(r, S, plan):
    first, end = _span(r, S)
    names = {S.rec.storages[s].name for op in S.rec.ops[first:end] for s in op.writes
             if S.rec.storages[s].kind in (BUFFER, PARAM)}
    m = plan.model
    out = []
    for n in sorted(names):
        try:
            out.append(m.get_buffer(n))
        except AttributeError:
            out.append(m.get_parameter(n))
    return out


def apply(model, plan):
    """A module with the model's own submodules, parameters and buffers (the same names, the same
    order) whose forward runs the model with the plan's regions."""
    if getattr(plan, "structure", None) is None:
        raise ValueError("rematplan.apply: this plan has no captured model (it was planned from a graph file)")
    if model is not plan.model:
        raise ValueError("rematplan.apply: the plan was made for another model object; plan this model")
    return RematModel(model, Runtime(plan), plan)


class RematModel(torch.nn.Module):
    """The applied model: the original's submodules, parameters and buffers registered under the
    same names in the same order (state_dict() and parameters() are the model's); calling it runs
    the original model with the plan active."""

    def __init__(self, model, runtime, plan):
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        for name, p in model.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in model.named_buffers(recurse=False):
            self.register_buffer(name, b, persistent=name not in getattr(model, "_non_persistent_buffers_set", ()))
        object.__setattr__(self, "remat_model", model)
        object.__setattr__(self, "remat_runtime", runtime)
        object.__setattr__(self, "remat_plan", plan)
        self.train(model.training)

    def train(self, mode=True):
        super().train(mode)
        self.remat_model.train(mode)
        return self

    def forward(self, *args, **kwargs):
        with _Active(self.remat_runtime):
            return self.remat_model(*args, **kwargs)
