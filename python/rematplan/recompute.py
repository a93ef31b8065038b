"""Recomputation at op granularity in eager mode, without touching the
user's code (issue 34).

While the applied model runs its forward, a TorchDispatchMode sees every
aten op below autograd and a saved-tensor pack hook sees every tensor
autograd saves for the backward. For an output the plan recomputes, the
mode records a *recipe*: the aten op, its non-tensor arguments, its tensor
arguments (a tensor some recipe makes is named by that recipe, any other
is held), the RNG state if the op draws random numbers, and the in-place
ops that later write the same storage. When autograd saves such a tensor,
the pack hook hands it a handle to the recipe instead of the tensor, so
the tensor is freed as soon as the forward drops it. In the backward, the
first unpack of a handle runs the recipe (its inputs' recipes first) under
no_grad, with the recorded RNG state: the same kernels on the same inputs
give the same bits.

Which outputs are recomputed, and how, is the plan's (planning.py), per op
key (calls.py: module path, call occurrence, place in the call) and output:
  once  rebuilt at the first backward that needs it and held until its
        last reader is done (the planner's ONCE);
  each  rebuilt each time a backward reads it, held only while that
        rebuild needs it (the planner's EACH: not held between readers).
A recipe's inputs that are recipes too are held while some reader still
needs them: a "once" recipe lets go of its inputs as soon as it is built,
an "each" one when its last reader is done.

What makes this safe whatever the plan or the step does: a recipe replays
the ops that actually ran in this step, with the arguments they had, so a
step that skips a block, takes another branch or calls a module twice is
recomputed as it ran; an op the plan does not know is kept. Tensors are
matched by identity (the tensor object autograd saves is the object the op
returned, or a view of it made by a later op), never by address, so a
freed storage's address reused by another tensor is never mistaken for it.
Buffers a recomputed op writes (BatchNorm's running statistics) are
written on a copy taken before the op, so a recomputation changes no
module state; a tensor a recomputed op writes that belongs to another
recipe is copied first, so no cached value is changed either.
"""
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._tree import flat_args, flat_tensors, map_args, map_tree
from ._backward import _KEEP_GRAPH_ASKED, _keep_graph, _keep_graph_by_frames, _no_autocast
from .calls import Calls, draws_random, writes_of, written
from .masks import _Mask
from .pricing import SHAPE_ONLY



class _OpInfo:
    """What an aten op's schema says: the arguments it writes (calls.writes_of: (index, name, flag)); whether
    it draws random numbers (calls.draws_random; the capture's record adds the ops it saw move the RNG)."""
    __slots__ = ("writes", "random", "name")

    def __init__(self, func):
        self.writes, self.name = writes_of(func), str(func)
        self.random = draws_random(func)

    def written(self, args, kwargs):
        return written(self.writes, args, kwargs)


_infos = {}


def _info(func):
    i = _infos.get(func)
    if i is None:
        i = _infos[func] = _OpInfo(func)
    return i


class _Ref:
    """A tensor made by a recipe: the recipe at a version, viewed as the tensor was (its dtype too: a
    complex tensor's .real, view_as_real, view(dtype) are views of its storage in another dtype)."""
    __slots__ = ("recipe", "version", "size", "stride", "offset", "dtype")

    def __init__(self, recipe, version, t):
        self.recipe, self.version = recipe, version
        self.size, self.stride, self.offset = tuple(t.shape), tuple(t.stride()), t.storage_offset()
        self.dtype = t.dtype


class _Like:
    """empty_like, zeros_like, ones_like, full_like as a recipe replays them: a tensor of the layout the
    op made (its size and strides, dtype, device), filled as the op fills it. They read only their
    input's shape, so the recipe needs nothing rebuilt for it (the planner's graph has no edge there
    either: capture.py) and holds nothing of it."""
    __slots__ = ("name", "fill")

    def __init__(self, name, args, kwargs):
        how = SHAPE_ONLY[name]
        self.name = name
        self.fill = (args[1] if len(args) > 1 else kwargs.get("fill_value")) if how == "fill" else how

    def __call__(self, size, stride, dtype, device):
        t = torch.empty_strided(size, stride, dtype=dtype, device=device)
        return t if self.fill is None else t.fill_(self.fill)

    def __str__(self):
        return self.name


class _Held:
    """A tensor a recipe reads that no recipe makes (a kept activation, an input, a buffer), held; an
    op that writes it later in the forward gives the recipe a copy first."""
    __slots__ = ("t", "__weakref__")

    def __init__(self, t):
        self.t = t


class _Step:
    """One recorded op: its arguments (tensors of recipes as _Ref), its output's place among its n_out
    tensors, its RNG."""
    __slots__ = ("func", "args", "kwargs", "pos", "rng", "copies", "n_out", "grad")

    def __init__(self, func, args, kwargs, pos, rng, copies, n_out=1):
        # copies: ids of the arguments (a _Ref of another recipe, a copy of a buffer) the op writes:
        # each replay writes a fresh copy of them
        self.func, self.args, self.kwargs, self.pos, self.rng, self.copies = func, args, kwargs, pos, rng, copies
        # grad: replayed with gradients on (an op that makes some output only then: _Step.run)
        self.n_out, self.grad = n_out, False

    def run(self, args, kwargs):
        """The op's tensors on these arguments ([its output] for one tensor): under no_grad (the
        caller's), or with gradients on where the op makes fewer tensors without them than it made in
        the forward (mkldnn_rnn_layer's workspace, which an LSTM's backward reads), then detached."""
        if not self.grad:
            o = self._call(args, kwargs)
            outs = [o] if self.pos is None else flat_tensors(o)
            if len(outs) == self.n_out:
                return outs
            self.grad = True
        with torch.enable_grad():
            o = self._call(args, kwargs)
        return [t.detach() for t in ([o] if self.pos is None else flat_tensors(o))]

    def _call(self, args, kwargs):
        if self.rng is not None:
            with self.rng:
                return self.func(*args, **kwargs)
        return self.func(*args, **kwargs)


_AT_REBUILD = "at rebuild"  # _Recipe.mask: a dropout's noise whose mask is kept from its first rebuild on


class _Recipe:
    """How to rebuild one storage: its first op, then the in-place ops that wrote it."""
    __slots__ = ("steps", "each", "handles", "dependents", "alive", "users", "tensors", "deps", "cache", "done",
                 "released", "dead", "last", "open", "offset", "numel", "mask")

    def __init__(self, step, each, out):
        self.steps, self.each = [step], each
        # handles: packed and not yet unpacked; dependents: recipes that may still read its value to
        # build theirs (these two say how long a rebuilt value is held within one backward pass)
        self.handles = self.dependents = 0
        # alive: its handles autograd still holds; users: recipes not dead that read it (where the
        # graph is kept for another backward, these two say how long it can be rebuilt: Step.lazy)
        self.alive = self.users = 0
        self.last = None  # (version, value): the value given out as it died, held while autograd holds a
        # handle (the node that unpacked it may unpack it again: ctx.saved_tensors read twice)
        self.tensors = 0  # tensors on its storage still alive in the forward (it may still be read)
        self.deps, self.cache = [], {}
        self.done = self.released = self.dead = False
        self.open = True
        self.offset, self.numel = out.storage_offset(), _storage_numel(out)
        self.mask = False  # True: a dropout's noise, packed as its _Mask; then the _Mask (_AT_REBUILD: at
        # its first rebuild)


if hasattr(torch.Tensor, "untyped_storage"):
    def _storage_ptr(t):
        return t.untyped_storage().data_ptr()
else:  # torch 1.13: _storage() is the untyped storage (storage() builds a TypedStorage each call)
    def _storage_ptr(t):
        return t._storage().data_ptr()


def _storage_numel(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    n = s.nbytes() if callable(getattr(s, "nbytes", None)) else s.size() * t.element_size()
    return n // max(t.element_size(), 1)


class _Handle:
    """What autograd saves in place of a tensor the plan recomputes. Autograd lets go of it when the
    graph goes (after the backward that ran it, unless the graph is kept for another): then its
    recipe need not be rebuilt for it again."""
    __slots__ = ("ref", "step", "group")

    def __init__(self, ref, step, group):
        self.ref, self.step, self.group = ref, step, group  # group: the key of the op that saved it
        ref.recipe.alive += 1

    def __del__(self):
        r = self.ref.recipe
        r.alive -= 1
        if r.alive <= 0:
            r.last = None
        try:
            self.step._maybe_dead(r)
        except Exception:  # pragma: no cover (at the interpreter's exit)
            pass


class _Rng:
    """The RNG state an op drew from (the CPU generator, the CUDA one of its device, or its own)."""
    __slots__ = ("cpu", "cuda", "device", "gen", "gen_state", "before")

    def __init__(self, args, kwargs):
        gens = [g for g in list(args) + list(kwargs.values()) if isinstance(g, torch.Generator)]
        self.gen = gens[0] if gens else None
        self.gen_state = self.gen.get_state() if self.gen is not None else None
        self.cpu = torch.get_rng_state()
        devs = [t.device for t in flat_tensors((list(args), list(kwargs.values()))) if t.is_cuda]
        dev = kwargs.get("device")
        if not devs and dev is not None and torch.device(dev).type == "cuda":
            devs = [torch.device(dev)]
        self.device = devs[0] if devs else None
        self.cuda = torch.cuda.get_rng_state(self.device) if self.device is not None else None

    def __enter__(self):
        self.before = (torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if self.cuda is not None else None,
                       self.gen.get_state() if self.gen is not None else None)
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.cuda, self.device)
        if self.gen is not None:
            self.gen.set_state(self.gen_state)

    def __exit__(self, *exc):
        torch.set_rng_state(self.before[0])
        if self.cuda is not None:
            torch.cuda.set_rng_state(self.before[1], self.device)
        if self.gen is not None:
            self.gen.set_state(self.before[2])
        return False


class Table:
    """A plan as the runtime reads it: {op key: {output place: "once" | "each"}}, the keys of in-place ops
    after which a storage is kept (pinned takeovers), of ops that draw random numbers, of ops that
    write a buffer, and of ops that make a dropout's noise the plan keeps as its mask."""

    def __init__(self, modes, takeovers=(), random=(), writes=None, masked=(), names=None, masked_later=()):
        self.modes, self.takeovers = modes, set(takeovers)
        # keys of the ops that make a dropout's noise the plan rebuilds each time, its mask once (the
        # planner's ONCE: drawn at the first backward that reads the noise, held to the last as bits)
        self.masked_later = set(masked_later)
        self.names = names or {}  # key -> the captured op's name: a step whose op there differs
        # (another branch, a skipped block) keeps that op's outputs
        self.random = set(random)
        self.masked = set(masked)  # keys of the ops that make a dropout's noise kept as its mask (_Mask)
        self.writes = writes or {}  # key -> places among the op's tensor arguments of what it writes
        # that is not an activation (seen in the capture: torch 1.13's native_batch_norm writes its
        # running statistics without saying so in its schema)


class Step(TorchDispatchMode):
    """One forward of the applied model: records recipes while it runs (the mode), hands autograd
    handles for the tensors the plan recomputes (pack), rebuilds them in the backward (unpack)."""

    def __init__(self, model, table, check=None):
        super().__init__()
        self.table, self.check = table, check
        self.calls = Calls(model)
        self.live = {}           # id(tensor) -> (weakref, recipe, storage address): tensors some recipe makes
        self.held = {}           # storage address -> [weak _Held]: tensors recipes hold as inputs (copy on write)
        self.new = []            # recipes made in this forward (swept when it ends)
        self.last_key = None     # the key of the op that ran last
        self.quiet = 0           # > 0 while the pack hook runs ops of its own (not the model's: uncounted)
        # dead: recipes that hold nothing any more (after a backward that ran the whole graph, all of them)
        self.stats = {"recipes": 0, "packed": 0, "rebuilt": 0, "unknown_keys": 0, "other_op": 0, "masked_later": 0,
                      "dead": 0}
        # lazy: a recipe can be rebuilt until autograd lets go of its handles (a graph kept for another
        # backward unpacks them again), not only until its last unpack: on from the first unpack in a
        # backward that keeps its graph (torch 1.13: known at the step's first unpack)
        self.lazy, self.asked = False, False
        # while the tensors one autograd node saved are unpacked (groups: the refs each op packed, by
        # its key): the "each" recipes rebuilding them reads, by (recipe, version): [value or None,
        # reads left], so that they are rebuilt once for the node and let go after their last read
        # (the planner's EACH: rebuilt for each backward that reads it, held while its rebuilds need
        # it). Without it a chain of "each" recipes was rebuilt for every read, multiplying down the
        # chain (BART's least plan: 5,590 rebuilds where the planner's schedule has 1,584)
        self.groups, self.scope, self.scope_group = {}, None, None
        self.outer = None  # the saved-tensor hooks around the model's call (Forward): they keep what is saved as it is

    @classmethod
    def _should_skip_dynamo(cls):
        # torch 2.x wraps a mode's __torch_dispatch__ in dynamo's disable unless this says no: ~7 us an op
        # (T5's forward, 1,063 ops: 7 ms). Forward.__enter__ takes the wrapped class where dynamo could
        # see the mode's frames (a compiled caller); plan() refuses compiled code inside the model.
        return False

    # ---- the forward ----
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.quiet:
            return func(*args, **kwargs)
        info = _info(func)
        key = self.last_key = self.calls.next_key(info.name, args)
        modes = self.table.modes.get(key)
        if modes is not None and self.table.names.get(key, info.name) != info.name:
            self.stats["other_op"] += 1  # not the op the plan is for: kept
            modes = None
        written = info.written(args, kwargs) if info.writes else ()
        if self.held and written:
            self._copy_on_write(written, args, kwargs, key)
        elif self.held and key in self.table.writes:
            self._copy_on_write((), args, kwargs, key)
        wrec = [self._recipe_of(t) for t in written] if self.live else ()
        if modes is None and not any(r is not None for r in wrec):
            src = self._sources(flat_args(args, kwargs)) if self.live else None
            out = func(*args, **kwargs)
            if src:
                self._views(src, out)
            return out
        return self._record(func, info, key, args, kwargs, modes, written, wrec)

    def _copy_on_write(self, written, args, kwargs, key):
        """An op is about to write a tensor some recipe holds as an input (not a recipe's own: a kept
        activation, a buffer, an input): those recipes get a copy of its value now, which is what
        they read when the forward ran (a GRU writes its hidden states into its output this way)."""
        ws = list(written)
        if key in self.table.writes:
            flat = flat_args(args, kwargs)
            ws += [flat[i] for i in self.table.writes[key] if i < len(flat)]
        for t in ws:
            copies = {}  # one copy per view of the storage, however many recipes read it (a parameter)
            for ref in self.held.pop(_storage_ptr(t), None) or ():
                b = ref()
                if b is not None:
                    v = b.t
                    key = (v.storage_offset(), tuple(v.shape), v.stride(), v.dtype)
                    c = copies.get(key)
                    if c is None:
                        c = copies[key] = v.detach().clone()
                    b.t = c

    def _track(self, t, r):
        """t is on recipe r's storage: r may be read while t lives; when no tensor of r is left and
        nothing packed or reads it, r is done (it lets go of the tensors it holds, now: a recipe no
        backward needs holds its inputs no longer than the forward's Python code would)."""
        r.tensors += 1

        def died(_ref, r=r, step=self):
            r.tensors -= 1
            step._maybe_done(r)
        # (its storage now: `t.data = other` later swaps t's storage, and t is then no longer r's)
        self.live[id(t)] = (weakref.ref(t, died), r, _storage_ptr(t))

    def _recipe_of(self, t):
        e = self.live.get(id(t))
        if e is None or e[0]() is not t or not e[1].open or _storage_ptr(t) != e[2]:
            return None
        return e[1]

    def _sources(self, flat):
        """{storage address: recipe} of the arguments (flat: the op's tensors) some recipe makes."""
        src = {}
        live = self.live
        for t in flat:
            e = live.get(id(t))
            if e is not None and e[0]() is t and e[1].open and _storage_ptr(t) == e[2]:
                src[e[2]] = e[1]
        return src

    def _views(self, src, out):
        """Outputs on the storage of an argument some recipe makes are that recipe's too (views,
        and what shares a storage without saying so: _unsafe_view)."""
        for x in ([out] if isinstance(out, torch.Tensor) else flat_tensors(out)):
            r = src.get(_storage_ptr(x))
            if r is not None:
                self._track(x, r)

    def _record(self, func, info, key, args, kwargs, modes, written, wrec):
        deps = []
        flat = flat_args(args, kwargs)
        wids = {id(t) for t in written}
        if key in self.table.writes:
            wids |= {id(flat[i]) for i in self.table.writes[key] if i < len(flat)}
        src = self._sources(flat) if self.live else {}

        copies = set()

        def describe(x):
            if not isinstance(x, torch.Tensor):
                return x
            r = self._recipe_of(x)
            if r is not None:
                deps.append(r)
                d = _Ref(r, len(r.steps), x)
            elif id(x) in wids:  # a buffer (BatchNorm's statistics) it writes: its value before, on a copy
                d = x.detach().clone()
            else:  # held as it is now; copied if an op writes it later in the forward (a parameter too:
                # `g.data.mul_(0.9)` after its read, a rebuild read the new value: other gradients)
                # held by an alias of its storage, not the tensor object: `buf.data = new` later in the
                # forward (an EMA update) swaps the object's storage, not the alias's
                d = _Held(x.detach())  # the registry's reference is weak: a done recipe's inputs go with it
                self.held.setdefault(_storage_ptr(x), []).append(weakref.ref(d))
            if id(x) in wids:
                copies.add(id(d))
            return d
        like = info.name in SHAPE_ONLY and not written
        a, kw = ((), {}) if like else (map_args(args, describe), map_tree(kwargs, describe) if kwargs else {})
        rng = _Rng(args, kwargs) if info.random or key in self.table.random else None
        step = _Step(func, a, kw, None, rng, copies)
        if self.check is not None:
            self.check.before(step)
        out = func(*args, **kwargs)
        if like:  # replayed from the layout it made, not from its input
            step.func, step.args = _Like(info.name, args, kwargs), (tuple(out.shape), tuple(out.stride()),
                                                                   out.dtype, out.device)
        for t, r in zip(written, wrec):
            if r is None:
                continue
            if key in self.table.takeovers or isinstance(r.mask, _Mask):
                # kept from here on: nothing rebuilds the value it writes (a noise packed as its mask
                # keeps its steps no more; its handles are of the value packed)
                r.open = False
                continue
            r.steps.append(step)
            self._claim(r, deps)
            if self.check is not None:
                self.check.made(r, len(r.steps), t)
        outs = [out] if isinstance(out, torch.Tensor) else flat_tensors(out)
        ins = {_storage_ptr(t) for t in flat} if modes else ()
        if src:
            self._views(src, out)
        for pos, mode in (modes or {}).items():
            if pos >= len(outs) or _storage_ptr(outs[pos]) in ins:  # not a new storage
                continue
            t = outs[pos]
            s = step if isinstance(out, torch.Tensor) else _Step(func, a, kw, pos, rng, copies, len(outs))
            r = _Recipe(s, mode == "each", t)
            r.mask = True if key in self.table.masked else _AT_REBUILD if key in self.table.masked_later else False
            self._claim(r, deps)
            self._track(t, r)
            self.new.append(r)
            self.stats["recipes"] += 1
            if self.check is not None:
                self.check.made(r, 1, t)
        return out

    def _claim(self, r, deps):
        for d in deps:
            if d is not r:
                d.dependents += 1
                d.users += 1
                r.deps.append(d)

    def end(self):
        """The forward is over: recipes nothing packed or reads owe their inputs nothing."""
        self.live, self.held = {}, {}
        for r in self.new:
            r.tensors = 0  # (tensors still alive after the forward are read by no recipe made later)
            self._maybe_done(r)
        self.new = []

    # ---- saved tensors ----
    def pack(self, t):
        r = self._recipe_of(t) if self.live else None
        if r is None and self.outer is not None:  # the user's hooks around the model (save_on_cpu) keep it
            return _Outer(self.outer[0](t))
        if r is None:  # saved as it is, with its version: autograd leaves the check to the hooks
            try:
                return (t, t._version)
            except RuntimeError:  # an inference tensor: no version counter
                return (t, None)
        if r.mask is True:
            self.quiet += 1  # the mask's ops are not the model's: they must not shift the keys after them
            try:
                # nor pass through this mode (~20 us an op) or a user's: the guard is torch's RAII
                # object (a context manager in torch 2.x only), on while it lives
                guard = torch._C._DisableTorchDispatch() if type(t) is torch.Tensor else None
                try:
                    r.mask = _Mask.of(r, t)
                finally:
                    del guard
            finally:
                self.quiet -= 1
            if r.mask is not None:  # the draws and their inputs are needed no more
                self._drop_deps(r)
                r.steps = [None] * len(r.steps)
        r.handles += 1
        self.stats["packed"] += 1
        ref = _Ref(r, len(r.steps), t)
        self.groups.setdefault(self.last_key, []).append(ref)  # saved by the op that ran last
        return _Handle(ref, self, self.last_key)

    def unpack(self, h):
        if type(h) is tuple:
            if h[1] is not None and h[0]._version != h[1]:
                _modified(h[0], h[1])
            return h[0]
        if type(h) is _Outer:
            return self.outer[1](h.packed)
        if not self.lazy and (_KEEP_GRAPH_ASKED or not self.asked):
            self.asked = True
            self.lazy = _keep_graph() if _KEEP_GRAPH_ASKED else _keep_graph_by_frames()
        ref = h.ref
        r = ref.recipe
        if self.scope is None or h.group != self.scope_group:
            # the first of the tensors an autograd node saved: what rebuilding all of them reads
            self.scope_group = h.group
            self.scope = self._reads(self.groups.pop(h.group, [ref]))
        base = self.value(r, ref.version) if not r.dead else self._again(r, ref.version)
        if r.handles > 0:
            r.handles -= 1
        self._maybe_done(r)
        if r.dead and r.alive > 0:
            r.last = (ref.version, base)  # no more than the node that unpacked it holds, until it is done
        return _view(base, ref)

    def _again(self, r, v):
        """A handle unpacked again after its recipe let go of what rebuilds it (a node reading its saved
        tensors twice): the value given out last."""
        x = r.last[1] if r.last is not None and r.last[0] == v else None
        if x is None:
            from ._lib import RematError
            raise RematError("rematplan: a recomputed tensor was unpacked again after its last reader (a second "
                             "backward through a graph kept with retain_graph or create_graph?); this is a "
                             "rematplan bug: please report it with the model")
        return x

    def _maybe_done(self, r):
        """This backward pass needs r's value no more: its cached value goes, and (unless lazy) what
        rebuilds it, at once, as the plan's memory counts it. Lazy, a graph kept for another backward
        may still unpack r's handles: r is rebuilt for them (not held) until autograd lets go of them."""
        if r.handles == 0 and r.dependents == 0 and r.tensors <= 0 and not r.done:
            r.done = True
            r.cache.clear()
            self._release(r)
            if not self.lazy:
                self._kill(r)
        self._maybe_dead(r)

    def _maybe_dead(self, r):
        """Nothing can ask for r any more (no handle autograd holds, no recipe that reads it, no tensor
        of the forward on it): what it holds goes, and what it reads is needed no more by it."""
        stack = [r]
        while stack:
            r = stack.pop()
            if not r.dead and r.alive <= 0 and r.users <= 0 and r.tensors <= 0:
                self._kill(r)
            if r.dead:
                stack.extend(d for d in self._drop_deps(r) if not d.dead)

    def _kill(self, r):
        """r holds nothing any more: nothing rebuilds it again."""
        if self.scope:  # (a node whose saved tensors were not all unpacked: nothing holds r for it)
            for key in [k for k in self.scope if k[0] == id(r)]:
                del self.scope[key]
        r.dead = r.done = True
        self.stats["dead"] += 1
        r.cache.clear()
        r.steps = ()

    def _drop_deps(self, r):
        """r reads its inputs no more (its value is packed as a mask, or r is dead): the recipes it
        read that may be dead now."""
        self._release(r)
        deps, r.deps = r.deps, []
        for d in deps:
            d.users -= 1
        return deps

    def _release(self, r):
        """r needs its inputs' values no more in this pass (its value is held for good, or nothing
        will ask for it)."""
        if r.released:
            return
        r.released = True
        for d in r.deps:
            d.dependents -= 1
            self._maybe_done(d)

    # ---- the backward: rebuilding ----
    def value(self, r, v):
        """The storage's base tensor of recipe r after its first v ops ("each": rebuilt every time,
        held only by the caller that needs it)."""
        x = r.cache.get(v)
        held = self.scope.get((id(r), v)) if r.each and self.scope is not None else None
        if x is None and held is not None:
            x = held[0]
            held[1] -= 1
            if held[1] <= 0:  # its last read for this node: let go of it
                held[0] = None
        if x is not None:
            return x
        x = self._rebuild(r, v)
        if held is not None and held[1] > 0:
            held[0] = x
        elif not r.each and (r.handles > 0 or r.dependents > 0):
            r.cache[v] = x
            if len(r.steps) == 1:  # held for good: its inputs are not needed again (with in-place
                self._release(r)   # steps, an earlier version may still be asked for: at done)
        return x

    def _reads(self, refs):
        """The "each" recipes that rebuilding refs' values reads (the refs' own recipes too), by (id,
        version): [None, how often] (recipes held already, and what they read, not counted)."""
        reads, seen, stack = {}, set(), []
        for y in refs:
            key = (id(y.recipe), y.version)
            if y.recipe.each and not y.recipe.dead:
                reads.setdefault(key, [None, 0])[1] += 1
            if key not in seen and not y.recipe.dead:
                seen.add(key)
                stack.append((y.recipe, y.version))
        while stack:
            q, u = stack.pop()
            if (isinstance(q.mask, _Mask) and q.mask.version == u) or q.cache.get(u) is not None:
                continue
            for step in q.steps[:u]:
                if step is None:
                    continue
                for y in flat_refs((step.args, step.kwargs)):
                    if y.recipe is q:
                        continue
                    key = (id(y.recipe), y.version)
                    if y.recipe.each:
                        reads.setdefault(key, [None, 0])[1] += 1
                    if key not in seen:
                        seen.add(key)
                        stack.append((y.recipe, y.version))
        return reads

    def _rebuild(self, r, v):
        self.stats["rebuilt"] += 1
        if isinstance(r.mask, _Mask) and r.mask.version == v:
            base = r.mask.noise()
            if self.check is not None:
                self.check.rebuilt(r, v, base)
            return base
        with torch.no_grad(), _no_autocast():
            base = again = None
            for j, s in enumerate(r.steps[:v]):
                def resolve(y):
                    if isinstance(y, _Ref):
                        if y.recipe is r and base is not None:  # the storage being rebuilt: written in place
                            return _view(base, y)
                        t = _view(self.value(y.recipe, y.version), y)
                        return t.clone() if id(y) in s.copies else t
                    if isinstance(y, _Held):
                        y = y.t
                    if isinstance(y, torch.Tensor) and id(y) in s.copies:
                        return y.clone()  # a buffer's value from before the op: written on a copy
                    return y
                args, kwargs = map_args(s.args, resolve), (map_tree(s.kwargs, resolve) if s.kwargs else {})
                outs = s.run(args, kwargs)
                if j == 0:
                    if len(outs) != s.n_out:
                        from ._lib import RematError
                        raise RematError("rematplan: %s made %d tensors when recomputed and %d in the forward; "
                                         "this is a rematplan bug: please report it with the model"
                                         % (s.func, len(outs), s.n_out))
                    base = outs[0 if s.pos is None else s.pos]
                    _check_layout(r, base)
                    if self.check is not None and v == 1 and not s.copies:
                        again = _again(s, args, kwargs)
        if self.check is not None:  # the version asked for (an earlier one, empty_like's, may be garbage)
            self.check.rebuilt(r, v, base, again)
        if r.mask is _AT_REBUILD and v == len(r.steps):  # the noise drawn again: its mask kept from now on
            r.mask = _Mask.of(r, base)  # (None where it is not that pattern: drawn at each reader)
            if r.mask is not None:
                self.stats["masked_later"] += 1
        return base


MODIFIED = "rematplan's saved-tensor hooks check it as PyTorch does"


def _modified(t, v):
    """PyTorch's own error for a saved tensor written in place since (the model's in-place op in a step
    unlike the one captured, a batch refilled before the backward): without the check, hooks silence
    it and the backward read the new values, gradients that PyTorch refuses to compute."""
    raise RuntimeError("one of the variables needed for gradient computation has been modified by an inplace "
                       "operation: [%s %s] is at version %d; expected version %d instead (%s)"
                       % (t.type(), list(t.shape), t._version, v, MODIFIED))


def _again(s, args, kwargs):
    """verify()'s third run of a recipe's op, on the inputs of its rebuild: whether the op gives the same
    bytes twice on the same inputs (mkldnn_rnn_layer's workspace does not, in bytes no backward reads)."""
    def run():
        with torch.no_grad(), _no_autocast():
            return s.run(args, kwargs)[s.pos or 0]
    return run


def flat_refs(v):
    """The _Ref leaves of nested tuples, lists and dicts (as map_tree visits them)."""
    if isinstance(v, _Ref):
        return [v]
    if isinstance(v, (tuple, list)):
        return [y for x in v for y in flat_refs(x)]
    if isinstance(v, dict):
        return [y for x in v.values() for y in flat_refs(x)]
    return []


def _view(base, ref):
    """The tensor ref names, as a view of its recipe's rebuilt base."""
    r = ref.recipe
    if base.dtype != ref.dtype:
        return _view_as(base, ref)
    off = ref.offset - r.offset + base.storage_offset()
    if tuple(base.shape) == ref.size and tuple(base.stride()) == ref.stride and base.storage_offset() == off:
        return base
    return base.as_strided(ref.size, ref.stride, off)


def _view_as(base, ref):
    """_view where the tensor is of another dtype than the base (a complex base's .real, a view(dtype)):
    the rebuilt storage read as ref's dtype, from the byte where ref began in the first one (the
    storage is laid out as it was: _check_layout)."""
    r, size = ref.recipe, base.element_size()
    item = _itemsize(ref.dtype)
    start = ref.offset * item - r.offset * size + base.storage_offset() * size  # bytes into the storage
    n = _storage_numel(base) * size // item * item // size  # whole elements of ref's dtype
    flat = base.as_strided((n,), (1,), 0).view(ref.dtype)
    return flat.as_strided(ref.size, ref.stride, start // item)


_itemsizes = {}


def _itemsize(dtype):
    n = _itemsizes.get(dtype)
    if n is None:
        n = _itemsizes[dtype] = torch.empty((), dtype=dtype).element_size()
    return n


def _check_layout(r, base):
    if _storage_numel(base) != r.numel:
        from ._lib import RematError
        raise RematError("rematplan: a recomputed op made a storage of %d elements where the first run made %d "
                         "(an op whose output layout is not reproducible); this is a rematplan bug: please report "
                         "it with the model" % (_storage_numel(base), r.numel))


class _Outer:
    """A tensor saved as it is, packed by the user's saved-tensor hooks around the applied model."""
    __slots__ = ("packed",)

    def __init__(self, packed):
        self.packed = packed
