"""Where an op runs: the model's module calls around it.

torch's global module hooks (register_module_forward_pre_hook and
register_module_forward_hook) keep a stack of the calls of the model's
modules on the thread that runs the step. The capture (capture.py) and the
applied plan (recompute.py) both see the step through this one class, so an
op has the same key in both: (module path, how many calls of that module
came before this one in the step, the op's place among the call's own ops,
its children's not counted). A later step that skips a call (LayerDrop,
stochastic depth, an early exit) or takes another branch inside one changes
the keys of that call only, and a key the plan does not know is kept.

A user's own forward pre-hooks run inside the call (global pre-hooks run
before a module's own), its forward hooks after it; both the same way in
the capture and in the applied step. Modules that are not the model's (a
loss module made in the forward) are not calls: their ops are the caller's.
"""
import threading

import torch
import torch.nn.modules.module as _module

from ._tree import flat_tensors


UNCOUNTED = frozenset(("aten.detach.default", "aten.lift_fresh.default", "aten.alias.default"))

# aten ops that draw random numbers without a Generator argument in their schema (rand.default,
# native_dropout): by name; every op whose schema takes a Generator draws from it or the default one
_RANDOM_NAMES = ("bernoulli", "dropout", "rand", "normal", "uniform", "multinomial", "exponential", "geometric",
                 "cauchy", "log_normal", "random_")


# aten ops that write arguments their schema does not mark (a!): op -> ((index, name), ...), and the index
# of the `training` flag they write them under (None: always). BatchNorm's running statistics (every
# torch); RReLU's noise (torch 1.13: its backward reads the noise the op draws into it, and a rebuild
# that made the noise from its empty_like alone read garbage)
_UNMARKED = (((3, "running_mean"), (4, "running_var")), 5)
UNMARKED_WRITES = {
    "aten.native_batch_norm": _UNMARKED, "aten.cudnn_batch_norm": _UNMARKED, "aten.miopen_batch_norm": _UNMARKED,
    "aten.batch_norm_update_stats": (((1, "running_mean"), (2, "running_var")), None),
    "aten.batch_norm_gather_stats": (((3, "running_mean"), (4, "running_var")), None),
    "aten.batch_norm_gather_stats_with_counts": (((3, "running_mean"), (4, "running_var")), None),
    "aten.rrelu_with_noise": (((1, "noise"),), 4), "aten.rrelu_with_noise_": (((1, "noise"),), 4),
}


def writes_of(func):
    """The arguments an aten op may write: [(index, name, index of the flag they are written under, or
    None)], the schema's (a!) ones and UNMARKED_WRITES's."""
    out = []
    try:
        for i, a in enumerate(func._schema.arguments):
            if a.alias_info is not None and a.alias_info.is_write:
                out.append((i, a.name, None))
    except AttributeError:
        pass
    args, flag = UNMARKED_WRITES.get(str(func).rsplit(".", 1)[0], ((), None))
    out += [(i, name, flag) for i, name in args if all(i != j for j, _, _ in out)]
    return out


def written(writes, args, kwargs):
    """The tensors writes (writes_of's) name among an op's arguments."""
    out = []
    for i, name, flag in writes:
        if flag is not None and not (args[flag] if flag < len(args) else kwargs.get("training")):
            continue
        out.extend(flat_tensors(args[i] if i < len(args) else kwargs.get(name)))
    return out


def _cached_cast(args):
    """Whether a _to_copy is one autocast may cache: of a leaf that requires grad (a parameter). Below
    autocast (where the modes run) autocast reads as off, so every such cast counts for nothing: one a
    model makes itself at every step keeps its place -1 at every step too."""
    t = args[0] if args else None
    return isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad


def draws_random(func):
    """Whether an aten op draws random numbers, from the default generator or one it is given
    (torch.poisson(x, generator=g) moves g alone: the capture's RNG watch sees only the default
    generators, so the schema says it: a Generator argument)."""
    name = str(func)
    if any(w in name for w in _RANDOM_NAMES):
        return True
    try:
        return any("Generator" in str(a.type) for a in func._schema.arguments)
    except AttributeError:
        return False


class Calls:
    """A context: while active, the stack of the model's module calls on the thread that entered it.
    on_enter(module, path, occurrence) -> a value kept with the frame; on_leave(frame)."""

    def __init__(self, model, on_enter=None, on_leave=None):
        self.paths = {m: p for p, m in model.named_modules()}
        self.on_enter, self.on_leave = on_enter, on_leave
        self.occ, self.stack, self.outside = {}, [], 0
        self.thread, self.handles = None, ()

    def __enter__(self):
        self.thread = threading.get_ident()
        self.occ, self.stack, self.outside = {}, [], 0
        self.handles = (_module.register_module_forward_pre_hook(self._pre),
                        _module.register_module_forward_hook(self._post))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = ()
        while self.stack:  # a forward that raised left its calls open
            self._pop()
        return False

    def _pre(self, module, args):
        if threading.get_ident() != self.thread:
            return None
        path = self.paths.get(module)
        if path is None:
            return None
        k = self.occ.get(path, 0)
        self.occ[path] = k + 1
        frame = [path, k, 0, None]
        if self.on_enter is not None:
            frame[3] = self.on_enter(module, path, k)
        self.stack.append(frame)
        return None

    def _post(self, module, args, out):
        if threading.get_ident() != self.thread:
            return None
        path = self.paths.get(module)
        if path is None:
            return None
        while self.stack:  # down to this module's frame (one whose forward raised may be above it)
            if self._pop()[0] == path:
                break
        return None

    def _pop(self):
        frame = self.stack.pop()
        if self.on_leave is not None:
            self.on_leave(frame)
        return frame

    def next_key(self, name=None, args=()):
        """The key of the op about to run, (path, occurrence, place); counts it, unless it is an op
        whether torch runs it depends on who holds what (a detach after a factory function whose
        output a Python mode holds; autocast's cast of a parameter, which a loop inside one autocast
        context makes at its first step only, the later ones reading its cache): those get place -1
        and count for nothing."""
        if name in UNCOUNTED or (name == "aten._to_copy.default" and _cached_cast(args)):
            f = self.stack[-1] if self.stack else ("", -1)
            return (f[0], f[1], -1)
        if not self.stack:
            self.outside += 1
            return ("", -1, self.outside - 1)
        f = self.stack[-1]
        f[2] += 1
        return (f[0], f[1], f[2] - 1)

    def current(self):
        """The innermost call's value from on_enter (None outside every call)."""
        return self.stack[-1][3] if self.stack else None
