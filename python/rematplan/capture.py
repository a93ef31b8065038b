"""Capture: one real training step of an eager model, recorded while it runs.

torch.fx traces symbolically and fails on what eager PyTorch runs every day
(data-dependent control flow, shape arithmetic, `torch.arange(t,
device=idx.device)` on torch 1.13, transformers' models). This records a
step instead, whatever Python the model runs:
  - every aten op below autograd (a TorchDispatchMode, in torch 1.13 too):
    the storages it reads, the ones it creates (identity, bytes, device),
    the ones it writes in place (the schema's `(a!)` arguments, version
    counters, and BatchNorm's running statistics, which torch 1.13's schema
    does not mark), its time (perf_counter around the kernel on CPU, CUDA
    events on a GPU) and, on CUDA, the allocator's peak while it runs, and
    whether it drew random numbers (the RNG state moved);
  - every module call (torch's global module hooks, as the applied plan
    sees them): where each op ran, as (module path, the call's occurrence in
    the step, the op's place among the call's own ops), the key by which the
    applied plan finds the op again in a later step, even where that step
    skips a call (recompute.py);
  - each op's FLOPs and the bytes it reads and writes (pricing.py);
  - what backward saves (a saved-tensor pack hook sees every saved tensor's
    storage) and whose backward reads it: post-hooks on every autograd Node
    mark where one Node's backward ends, so the Node that unpacks a saved
    tensor is known, and each Node is mapped to the op that created it;
  - each op's backward time (the time between two Nodes' hooks).
Every forward output's storage is held until the pass ends, so a storage's
address is never reused within a pass (a capture therefore holds more than
a plain step: plan() measures the plain step apart); the tensors are not
(the pack hook holds an alias of each saved one), so the same pass also
sees when the model's Python code lets go of each storage (_Deaths). The
model, its buffers, its parameters' gradients and the RNG are left as they
were.
"""
import functools
import os
import sys
import time
import weakref

import torch
from torch.utils._mode_utils import no_dispatch
from torch.utils._python_dispatch import TorchDispatchMode

from ._tree import Example, flat_tensors  # noqa: F401 (rematplan.capture.flat_tensors)
from . import _lib
from .calls import Calls, writes_of, written
from .pricing import SHAPE_ONLY, draw_probability, kind, moved_bytes, op_flops, spec

PARAM, BUFFER, INPUT, ACT, CONST = "param", "buffer", "input", "act", "const"

try:  # torch >= 2: the frame callback torch.compile sets while its code runs (None outside)
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as _dynamo_callback
except ImportError:  # torch 1.13 has no torch.compile
    _dynamo_callback = None


class ModelError(TypeError):
    """The model cannot be planned as it is; the message says why and what to do."""


def compiled(m):
    """How module m is compiled by torch.compile (torch.compile(m), m.compile(), a compiled
    forward), or None."""
    if type(m).__name__ == "OptimizedModule" and hasattr(m, "_orig_mod"):
        return "torch.compile(module)"
    if getattr(m, "_compiled_call_impl", None) is not None:
        return "module.compile()"
    if getattr(getattr(m, "forward", None), "_torchdynamo_orig_callable", None) is not None:
        return "a torch.compile'd forward"
    return None


def _compiling():
    """Whether this Python frame runs inside torch.compile'd code (which the capture's dispatch mode
    makes dynamo run eagerly, frame by frame: the compiled step is another one)."""
    cb = _dynamo_callback() if _dynamo_callback is not None else None
    return cb is not None and cb is not False


def compiled_error(where):
    return ModelError("rematplan: %s: rematplan records the eager step and recomputes it op by op, "
                      "which cannot replay what compiled code saves; plan the eager "
                      "model (the module before torch.compile, e.g. an OptimizedModule's ._orig_mod), or keep "
                      "torch.compile and let it recompute (torch._functorch.config.activation_memory_budget, "
                      "with rematplan.use_as_compile_solver())" % where)


def refuse_compiled(model):
    """ModelError where a module of the model is compiled (before anything runs)."""
    for path, m in model.named_modules():
        how = compiled(m)
        if how:
            raise compiled_error("module '%s' is compiled (%s)" % (path or "(the model)", how))


def storage_key(t):
    """(device, address, bytes) of t's whole storage."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    nbytes = s.nbytes() if callable(getattr(s, "nbytes", None)) else s.size() * t.element_size()
    return (str(t.device), s.data_ptr()), int(nbytes)


class Storage:
    __slots__ = ("sid", "nbytes", "producer", "kind", "name", "device")

    def __init__(self, sid, nbytes, producer, kind, name, device):
        self.sid, self.nbytes, self.producer, self.kind, self.name, self.device = \
            sid, nbytes, producer, kind, name, device


class Op:
    """One aten op of the forward pass. new: the storages it created, new_pos: the place of each among
    its flattened outputs; key: (module path, call occurrence, place among the call's own ops)."""
    __slots__ = ("idx", "name", "reads", "writes", "new", "new_pos", "dead", "call", "key", "ms", "bwd_ms",
                 "random", "grad_bytes", "has_grad", "ws", "bwd_ws", "flops", "moved", "spec", "p")

    def __init__(self, idx, name, call, key):
        self.idx, self.name, self.call, self.key = idx, name, call, key
        self.reads, self.writes, self.new, self.new_pos, self.dead = [], [], [], [], []
        self.flops = self.moved = 0.0
        self.spec = None  # its arguments as shapes (pricing.calibrate replays products and memory ops)
        self.p = None     # a Bernoulli draw's probability (its price depends on it: pricing.op_class)
        self.ms = self.bwd_ms = 0.0
        self.random = self.has_grad = False
        self.grad_bytes = self.ws = self.bwd_ws = 0  # ws: its forward's workspace, bwd_ws: its backward's


class Call:
    """One module call: ops first..end-1 ran inside it (children's included); occ: how many calls of
    the same module came before it in the step; nops: the ops that ran in it outside its children."""
    __slots__ = ("idx", "module", "path", "parent", "first", "end", "occ", "nops", "children", "checkpointed")

    def __init__(self, idx, module, path, parent, first, occ):
        self.idx, self.module, self.path, self.parent, self.first, self.occ = idx, module, path, parent, first, occ
        self.end, self.nops, self.children = first, 0, []
        self.checkpointed = False  # run inside torch.utils.checkpoint (the model recomputes it itself)


class _Saved:
    __slots__ = ("t", "i", "version")

    def __init__(self, t, i, version):
        self.t, self.i, self.version = t, i, version  # version: t's when saved (None: it has none)


def _cuda(dev):
    return dev is not None and torch.device(dev).type == "cuda"


class _Pass(TorchDispatchMode):
    """One training step under the mode and the hooks."""

    def __init__(self, model, inputs, device, peaks=None):
        super().__init__()
        self.cuda = _cuda(device) and torch.cuda.is_available()
        self.peaks = peaks  # memory.CpuPeaks on a measured CPU pass
        self.storages, self.by_key = [], {}
        self.ops, self.calls = [], []
        self.where = Calls(model, self.enter, self.leave)
        self.saves = []        # [sid, op index at pack time, reader op or None]
        self.keep = []         # every forward output's storage: addresses are not reused within the pass
        self.outs = []         # weak references to every op's outputs (their Nodes, read after the forward)
        self.deaths = _Deaths()
        self.pending = None    # (op, outputs) whose autograd Nodes are read at the next event
        self.node_op = {}      # autograd Node -> op that created it
        self.events = []       # CUDA: (op, start, end) events
        self.compiled = None   # where the step ran torch.compile'd code (a ModelError after the pass)
        self.checkpointed = []  # the outermost module calls torch.utils.checkpoint ran (their paths)
        for name, p in model.named_parameters():
            self._register(p, -1, PARAM, name)
        for name, b in model.named_buffers():
            self._register(b, -1, BUFFER, name)
        for i, t in enumerate(inputs.tensors()):
            self._register(t, -1, INPUT, "input %d" % i)

    # ---- storages ----
    def _register(self, t, producer, kind, name=None):
        key, nbytes = storage_key(t)
        if key in self.by_key or nbytes == 0:
            return self.by_key.get(key)
        s = Storage(len(self.storages), nbytes, producer, kind, name, key[0])
        self.storages.append(s)
        self.by_key[key] = s.sid
        return s.sid

    def sid(self, t):
        key, nbytes = storage_key(t)
        if nbytes == 0:
            return None
        s = self.by_key.get(key)
        return s if s is not None else self._register(t, -1, CONST)

    # ---- the ops ----
    def settle(self):
        """The autograd Nodes of the last op's outputs (set once its autograd wrapper returned)."""
        if self.pending is None:
            return
        op, outs = self.pending
        self.pending = None
        for t in outs:
            g = t.grad_fn
            if g is not None and g not in self.node_op:
                self.node_op[g] = op.idx
            if t.requires_grad:
                op.has_grad = True
        seen = set()
        for t in outs:
            key = storage_key(t)[0]
            sid = self.by_key.get(key)
            if t.requires_grad and sid in op.new and sid not in seen:
                seen.add(sid)
                op.grad_bytes += t.numel() * t.element_size()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.settle()
        ins = list(flat_tensors((args, kwargs)))
        call = self.where.current()
        name = str(func)
        op = Op(len(self.ops), name, call.idx if call is not None else -1, self.where.next_key(name, args))
        self.deaths.now = op.key
        in_keys = {storage_key(t)[0] for t in ins}
        op.reads = [self.sid(t) for t in ins]
        if name in SHAPE_ONLY and op.reads:
            op.reads[0] = None  # its shape is read, not its values: no edge, nothing rebuilt for it
        versions = [_version(t) for t in ins]
        rng = self._rng()
        out, op.ms, op.ws = self._run(op, func, args, kwargs, ins)
        # (a generator the op is given moves alone: torch.poisson(x, generator=g))
        op.random = (rng is not None and not self._same_rng(rng)) or _given_generator(args, kwargs)
        outs = list(flat_tensors(out))
        written = _schema_writes(func, args, kwargs)
        for t, sid, v in zip(ins, op.reads, versions):
            if sid is not None and (_version(t) != v or any(t is w for w in written)):
                op.writes.append(sid)
        for pos, t in enumerate(outs):
            key, nbytes = storage_key(t)
            if key not in self.by_key and nbytes:
                op.new.append(self._register(t, op.idx, ACT))
                op.new_pos.append(pos)
        op.flops, op.moved = op_flops(func, args, kwargs, out), moved_bytes(ins, outs, func)
        op.p = draw_probability(name, args, kwargs)
        if op.moved or kind(name) == "mm":
            op.spec = spec(args, kwargs) + (func,)
        self.deaths.made(op.key, in_keys, outs)
        self.keep.append([_storage(t) for t in outs])
        self.outs.append([weakref.ref(t) for t in outs])
        self.ops.append(op)
        self.pending = (op, outs)
        return out

    def _run(self, op, func, args, kwargs, ins):
        """(output, ms on CPU, CUDA workspace): the op, timed (CUDA: events, read after the pass)."""
        on_cuda = self.cuda and (any(t.is_cuda for t in ins) or not ins)
        if not on_cuda:
            t0 = time.perf_counter()
            if self.peaks is not None:
                with self.peaks.marker(op.idx):
                    out = func(*args, **kwargs)
            else:
                out = func(*args, **kwargs)
            return out, (time.perf_counter() - t0) * 1e3, 0
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = func(*args, **kwargs)
        b.record()
        self.events.append((op, a, b))
        return out, 0.0, max(torch.cuda.max_memory_allocated() - base - _new_bytes(self, out), 0)

    def _rng(self):
        return (torch.get_rng_state(), torch.cuda.get_rng_state() if self.cuda else None)

    def _same_rng(self, rng):
        now = self._rng()
        return torch.equal(rng[0], now[0]) and (rng[1] is None or torch.equal(rng[1], now[1]))

    def note_compiled(self, path=None, module=None):
        """Where compiled code runs, if it does: the outermost compiled module on the call stack (and
        the one entered), else the innermost call."""
        if self.compiled is not None or not _compiling():
            return
        stack = [(f[3].path, f[3].module) for f in self.where.stack] + ([(path, module)] if path is not None else [])
        mods = [(p, compiled(m)) for p, m in stack if compiled(m)]
        inner = stack[-1][0] if stack else ""
        self.compiled = "module '%s' is compiled (%s)" % mods[0] if mods else \
            "a torch.compile'd function runs in module '%s'" % (inner or "(the model)")

    # ---- module calls (calls.Calls) ----
    def enter(self, module, path, occ):
        self.settle()
        self.note_compiled(path, module)
        parent = self.where.current()
        c = Call(len(self.calls), module, path, parent.idx if parent is not None else -1, len(self.ops), occ)
        if parent is not None:
            parent.children.append(c.idx)
        c.checkpointed = parent.checkpointed if parent is not None and parent.checkpointed else _in_checkpoint()
        if c.checkpointed and (parent is None or not parent.checkpointed):
            self.checkpointed.append(path)
        self.calls.append(c)
        return c

    def leave(self, frame):
        self.settle()
        frame[3].end = len(self.ops)

    # ---- saved tensors ----
    def pack(self, t):
        """Holds an op's output by an alias (its storage, not t): holding t would hide when Python
        lets go of it (_Deaths). The alias is made outside the mode: it is not the model's op."""
        self.settle()
        self.note_compiled()
        self.saves.append([self.sid(t), len(self.ops) - 1, None])
        version = getattr(t, "_version", None)  # (an alias shares t's version counter)
        if storage_key(t)[0] in self.deaths.live:
            with no_dispatch():
                t = t.detach()
        return _Saved(t, len(self.saves) - 1, version)

    def changed_after_save(self, h):
        """The ModelError for saved tensor h written in place after it was saved: the version check
        autograd makes without hooks (which it leaves to the hooks), as PyTorch's own step fails."""
        op = self.ops[self.saves[h.i][1]] if 0 <= self.saves[h.i][1] < len(self.ops) else None
        where = "%s (module '%s')" % (op.name, op.key[0] or "(the model)") if op is not None else "an op"
        return ModelError("rematplan: the model's step cannot train as it is: %s saved a tensor %s for its "
                          "backward that an in-place op changed afterwards (version %d, saved at %d); "
                          "PyTorch's own backward fails on it too ('one of the variables needed for gradient "
                          "computation has been modified by an inplace operation'); make that in-place op out "
                          "of place (or write a clone) and plan again"
                          % (where, tuple(h.t.shape), h.t._version, h.version))


def _version(t):
    """t's version counter, or None for an inference tensor (torch.inference_mode() in the forward:
    it has none; its writes are seen by the op's schema)."""
    return None if t.is_inference() else t._version


def _given_generator(args, kwargs):
    return any(isinstance(a, torch.Generator) for a in list(args) + list(kwargs.values()))


def _schema_writes(func, args, kwargs):
    """The arguments the op writes: the schema's (a!) ones, and those it writes without saying so
    (BatchNorm's running statistics, torch 1.13's RReLU noise: calls.UNMARKED_WRITES)."""
    w = _writes.get(func)
    if w is None:
        w = _writes[func] = writes_of(func)
    return written(w, args, kwargs) if w else []


_writes = {}


class StepRecord:
    """What one pass recorded (see the module's docstring)."""

    def __init__(self, p, loss_sid, bwd_ms, readers):
        self.storages, self.ops, self.calls = p.storages, p.ops, p.calls
        self.loss_sid, self.bwd_ms = loss_sid, bwd_ms
        self.checkpointed = p.checkpointed
        self.saves = [(s[0], s[1], readers.get(i, s[1])) for i, s in enumerate(p.saves) if s[0] is not None]


_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")


def _in_checkpoint():
    """Whether torch.utils.checkpoint runs the module call being entered (its frames are on this
    thread's stack below the recorded pass)."""
    f = sys._getframe(2)
    while f is not None:
        code = f.f_code
        if code.co_filename.endswith(_CHECKPOINT_FILE):
            return True
        if code is one_pass.__code__:
            return False
        f = f.f_back
    return False


def _nodes_of(loss):
    seen, order, stack = set(), [], [loss.grad_fn]
    while stack:
        g = stack.pop()
        if g is None or g in seen:
            continue
        seen.add(g)
        order.append(g)
        stack.extend(f for f, _ in g.next_functions)
    return order


def _gradient_feeds(p, loss):
    """{param sid: [the ops whose autograd Nodes send it a gradient]} for the parameters more than one
    Node sends one to (autograd's engine holds the first until the last arrives: graph.py)."""
    feeds = {}
    for g in _nodes_of(loss):
        for f, _ in g.next_functions:
            var = getattr(f, "variable", None) if f is not None and type(f).__name__ == "AccumulateGrad" else None
            sid = p.by_key.get(storage_key(var)[0]) if var is not None else None
            if sid is not None and p.node_op.get(g) is not None:
                feeds.setdefault(sid, set()).add(g)
    return {sid: sorted({p.node_op[g] for g in gs}) for sid, gs in feeds.items() if len(gs) > 1}


def _new_bytes(p, out):
    return sum(storage_key(t)[1] for t in flat_tensors(out) if storage_key(t)[0] not in p.by_key)


class _Backward:
    """loss.backward() with a post-hook on every autograd Node: each Node's time (since the Node
    before it ended), summed per op, and which op's backward unpacked each saved tensor (the
    engine runs one Node at a time: a Node unpacks what it saved, runs, then its hooks fire)."""

    def __init__(self, p):
        self.p, self.stamps, self.unpacks = p, [], []
        self.cuda_peaks = self.error = None

    def unpack(self, h):
        if h.version is not None and h.t._version != h.version:
            self.error = self.p.changed_after_save(h)  # (torch 1.13's engine raises it as a RuntimeError)
            raise self.error
        self.unpacks.append((len(self.stamps), h.i))
        return h.t

    def _hook(self, g):
        stamps, cuda = self.stamps, self.p.cuda

        def f(grad_in, grad_out):
            if cuda:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                stamps.append((e, g))
                self.cuda_peaks.stamp()
            else:
                stamps.append((time.perf_counter(), g))
        return f

    def workspaces(self, peaks):
        """Each Node's measured peak above its start, as its op's backward workspace (the largest of
        its Nodes'). peaks: one per Node in order (CUDA: the hooked ones), or (Node name, peak) for
        every Node the engine ran (CPU: the profiler's), matched to the hooked ones by name in order."""
        if peaks and isinstance(peaks[0], tuple):
            matched, j = [], 0
            for name in self.node_names:
                while j < len(peaks) and peaks[j][0] != name:
                    j += 1
                matched.append(peaks[j][1] if j < len(peaks) else 0)
                j += 1
            peaks = matched
        if len(peaks) != len(self.node_ops):
            return
        for o, pk in zip(self.node_ops, peaks):
            if o is not None:
                self.p.ops[o].bwd_ws = max(self.p.ops[o].bwd_ws, pk)

    def run(self, loss):
        p = self.p
        handles = [g.register_hook(self._hook(g)) for g in _nodes_of(loss)]
        if p.cuda:
            from .memory import CudaNodePeaks
            self.cuda_peaks = CudaNodePeaks()
        start = torch.cuda.Event(enable_timing=True) if p.cuda else time.perf_counter()
        if p.cuda:
            start.record()
        try:
            loss.backward()
        except RuntimeError:
            if self.error is not None:
                raise self.error from None
            raise
        finally:
            for h in handles:
                h.remove()
        if p.cuda:
            torch.cuda.synchronize()
        bwd, last_op, prev = {}, None, start
        self.node_ops = []
        self.node_names = [type(g).__name__ for _, g in self.stamps]
        for t, g in self.stamps:
            dt = prev.elapsed_time(t) if p.cuda else (t - prev) * 1e3
            prev = t
            o = p.node_op.get(g)
            o = o if o is not None else last_op  # AccumulateGrad and the like: the op before
            self.node_ops.append(o)
            if o is not None:
                bwd[o] = bwd.get(o, 0.0) + dt
                last_op = o
        if self.cuda_peaks is not None:
            self.workspaces(self.cuda_peaks.peaks)
        readers = {}
        for k, i in self.unpacks:
            if k < len(self.stamps):
                o = p.node_op.get(self.stamps[k][1])
                if o is not None:
                    readers.setdefault(i, o)
        return bwd, readers


def one_pass(model, inputs, device, measure_cpu=False):
    """Runs model(*inputs).backward() once, recorded (measure_cpu: under the profiler, whose memory
    events give each op's and each Node's peak on CPU). Returns a StepRecord."""
    from .memory import CpuPeaks
    peaks = CpuPeaks() if measure_cpu and not (_cuda(device) and torch.cuda.is_available()) else None
    inputs = Example.of(inputs)
    p = _Pass(model, inputs, device, peaks)
    b = _Backward(p)
    with peaks if peaks is not None else Nothing():
        with p.where, torch.autograd.graph.saved_tensors_hooks(p.pack, b.unpack):
            with p:
                out = inputs.call(model)
            p.settle()
        if p.compiled is not None:
            raise compiled_error(p.compiled)
        loss = loss_of(out)
        p.deaths.done = True
        for op, refs in zip(p.ops, p.outs):  # Nodes set after the op's own event (a custom Function's)
            for t in (r() for r in refs):
                g = t.grad_fn if t is not None else None
                if g is not None and g not in p.node_op:
                    p.node_op[g] = op.idx
        loss_sid = p.by_key.get(storage_key(loss)[0])
        held = {p.by_key.get(storage_key(t)[0]) for t in flat_tensors(
            out if isinstance(out, (tuple, list, dict)) else getattr(out, "__dict__", {}))}
        feeds = _gradient_feeds(p, loss)
        bwd, readers = b.run(loss)  # what the forward returned is held through it, as a training loop does
        del loss, out
        from .memory import collect
        collect()  # what only a reference cycle holds dies now: "after", as the rest of the forward's outputs
    if peaks is not None:
        fwd_peaks, node_peaks = peaks.peaks()
        for op in p.ops:
            made = sum(p.storages[s].nbytes for s in op.new)
            op.ws = max(fwd_peaks.get(op.idx, 0) - made, 0)
        b.workspaces(node_peaks)
    if p.cuda:
        for op, e0, e1 in p.events:
            op.ms = e0.elapsed_time(e1)
    for o, ms in bwd.items():
        p.ops[o].bwd_ms = ms
    rec = StepRecord(p, loss_sid, bwd, readers)
    rec.gradient_feeds = feeds
    rec.held = held - {None, loss_sid}
    rec.deaths = p.deaths.death
    p.keep, p.outs, p.pending, p.node_op, p.events = [], [], None, {}, []  # the pass's tensors go now
    b.stamps, b.unpacks = [], []
    return rec


class Nothing:
    """A context that does nothing (where one is optional)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def loss_of(out):
    """The loss in what the model's forward returned: a one-element tensor that requires grad (a scalar,
    or shape (1,): what .backward() takes without a gradient), alone, in a tuple or list (nanoGPT's
    (logits, loss)), or as .loss / ["loss"] (transformers' outputs)."""
    cand = out
    if not isinstance(out, torch.Tensor):
        loss = getattr(out, "loss", None)
        if loss is None and isinstance(out, dict):
            loss = out.get("loss")
        if loss is None and isinstance(out, (tuple, list)):
            scalars = [t for t in out if _is_loss(t)]
            loss = scalars[0] if len(scalars) == 1 else None
        cand = loss
    if not _is_loss(cand):
        raise ModelError("rematplan: the model's forward must return the loss (a one-element tensor that "
                        "requires grad), alone, in a tuple, or as .loss, and it returned %s; wrap the model and its loss "
                        "function in one nn.Module" % _what(out))
    return cand


def _is_loss(t):
    return isinstance(t, torch.Tensor) and t.numel() == 1 and t.requires_grad


def _what(out):
    """What a forward returned, in a few words (loss_of's refusal)."""
    if isinstance(out, torch.Tensor):
        if out.numel() != 1:
            return "a tensor of shape %s" % (tuple(out.shape),)
        if not out.requires_grad:
            return "a one-element %s tensor that does not require grad (detached, made under no_grad, or from " \
                   "nothing that requires grad)" % str(out.dtype).replace("torch.", "")
        return "a one-element tensor"
    if isinstance(out, (tuple, list)):
        n = sum(1 for t in out if _is_loss(t))
        return "a %s of %d item%s, %d of them a one-element tensor that requires grad" % (
            type(out).__name__, len(out), "" if len(out) == 1 else "s", n)
    if out is not None and hasattr(out, "loss") and getattr(out, "loss", None) is None:
        return "a %s whose .loss is None (were the labels given?)" % type(out).__name__
    return "None" if out is None else "a %s" % type(out).__name__


class ModelState:
    """Leaves the model as it was: its buffers, its parameters' gradients (and storages), the RNG (CPU and CUDA, and
    generators the model's modules hold as attributes), and the inputs (a forward that writes its inputs in place, x.mul_(0.5), would change the user's batch
    once per pass, and each pass would see another: the inputs are put back before each pass and at
    the end). zero_grads: give the step gradients to add into (so a measured step does not count
    them)."""

    def __init__(self, model, zero_grads=False, inputs=None):
        self.model, self.zero_grads, self.example = model, zero_grads, inputs

    def __enter__(self):
        m = self.model
        # (tensor, its value, its version): put back where a pass changed it
        ts = Example.of(self.example).tensors() if self.example is not None else []
        self.inputs = [[t, t.detach().clone(), t._version] for t in ts if not t.is_inference()]
        # inputs that get a gradient (an adversarial example, an embedding fed in): their .grad as it
        # was, and none during the passes (each pass's backward would add into it)
        self.input_grads = [(t, t.grad) for t in ts if t.requires_grad and t.is_leaf]
        # the model's own generators (torch.randn(..., generator=self.g)): each pass draws as the first
        # (an applied model's are its model's: rematplan.apply's result holds the model's children)
        root = m.__dict__.get("remat_model", m)
        gens = {id(g): g for mod in root.modules() for g in vars(mod).values() if isinstance(g, torch.Generator)}
        self.generators = [(g, g.get_state()) for g in gens.values()]
        # (buffer, its value, its version, its address): put back before each pass, so that every pass
        # is the same step (a forward that updates a buffer it reads: an EMA codebook, a counter)
        self.buffers = [[b, b.detach().clone(), _version(b), b.data_ptr()] for b in m.buffers()]
        # parameters by an alias of their storage: one the forward replaces (`p.data = new`) is put back
        # (one it writes in place is not: that would take a copy of every parameter)
        self.params = [(p, p.detach()) for p in m.parameters()]
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and \
            torch.cuda.is_initialized() else None
        self.grads = [(p, p.grad) for p in m.parameters()]
        if self.zero_grads:
            for p, g in self.grads:
                if p.requires_grad:
                    p.grad = torch.zeros_like(p) if g is None else g.clone()
        return self

    def rewind(self):
        """The RNG (and the model's generators), the inputs and the buffers as they were at the start
        (the inputs' .grad none)."""
        for t, _ in self.input_grads:
            t.grad = None
        for e in self.buffers:  # (written in place, or its storage replaced: `buf.data = new`)
            b, v, version, ptr = e
            if _version(b) != version or b.data_ptr() != ptr:
                _put_back(b, v)
                e[2], e[3] = _version(b), b.data_ptr()
        for p, alias in self.params:
            if p.data_ptr() != alias.data_ptr():
                p.data = alias
        for e in self.inputs:
            t, v, version = e
            if t._version != version:
                _put_back(t, v)
                e[2] = t._version
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        for g, state in self.generators:
            g.set_state(state)

    def reset(self):
        """Before a pass that makes gradients of its own: none, and the RNG as at the start."""
        for p, _ in self.grads:
            p.grad = None
        self.rewind()

    def __exit__(self, *exc):
        for b, v, _, _ in self.buffers:
            _put_back(b, v)
        self.rewind()
        for p, g in self.grads + self.input_grads:
            p.grad = g


def _put_back(t, v):
    """t's value as it was (v, a copy): in place, or where the forward resized it (a quantization
    observer's per-channel min_val, made empty and resized at its first step) on a copy of v's layout
    (copy_ raised torch's size error from plan())."""
    with torch.no_grad():
        if t.shape == v.shape and t.dtype == v.dtype:
            t.data.copy_(v)
        else:
            t.data = v.clone()


def _storage(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


class _Deaths:
    """When the model's Python code lets go of each storage an op made, seen in the recorded pass
    (whose pack hook holds aliases, not the tensors saved): a storage dies when the last tensor on
    it dies (weak references' callbacks). An eager framework frees it then, not after its last
    reader: a local variable, an argument the caller still holds, a tensor a module keeps aside."""

    def __init__(self):
        self.now, self.done = None, False
        self.live = {}    # storage address -> [(key, place), tensors alive on it]
        self.death = {}   # (key, place) -> the key of the op that ran last when it died ("after": past the forward)
        self.refs = []

    def made(self, key, in_keys, outs):
        """The outputs of the op `key` (in_keys: its inputs' storages)."""
        for pos, t in enumerate(outs):
            k = storage_key(t)[0]
            e = self.live.get(k)
            if e is None:
                if k in in_keys:  # on an input's storage that is not tracked (a parameter's view)
                    continue
                e = self.live[k] = [(key, pos), 0]
            e[1] += 1
            self.refs.append(weakref.ref(t, functools.partial(self._died, k)))

    def _died(self, k, _ref):
        e = self.live.get(k)
        if e is None:
            return
        e[1] -= 1
        if e[1] == 0:
            self.death[e[0]] = "after" if self.done else self.now
            del self.live[k]


def capture(model, inputs, device=None, repeats=1):
    """Records model(*inputs).backward(): one pass gives the structure, the memory (on CPU under the
    profiler) and when Python lets go of each tensor (_Deaths). Ops are priced by their FLOPs and
    bytes (pricing.py), so no pass times them; `repeats` is accepted for compatibility and unused.
    No warm-up on CPU: the recorded pass as a process's first step, or after a plain step, gave the
    same ops, bytes, workspaces and saves on 8 models of bench/torch_models.py (and a separate
    lifetimes forward cost 0.7 s of T5's plan()). On CUDA (the BLAS handles' workspaces, autotuned
    kernels) a plain step warms up first."""
    args = Example.of(inputs)
    with ModelState(model, inputs=args) as k:
        if _cuda(device):
            k.reset()
            loss_of(args.call(model)).backward()
            torch.clear_autocast_cache()  # (inside the user's autocast: the recorded pass makes its casts)
        k.reset()
        try:
            rec = one_pass(model, args, device, measure_cpu=True)
        except (ModelError, _lib.RematError):
            raise
        except Exception as e:  # noqa: B902: the model's own error, or one of the recording's
            if _plain_step_fails(model, args, k):
                raise
            raise recording_error(e) from e
    return rec


def _plain_step_fails(model, args, k):
    """Whether the model's step fails without rematplan's hooks and mode too (then its error is the
    model's own)."""
    k.reset()
    try:
        loss_of(args.call(model)).backward()
    except Exception:  # noqa: B902
        return True
    finally:
        k.reset()
    return False


def recording_error(e):
    """The ModelError for a step that trains plainly and fails while rematplan records it."""
    what = (str(e).strip().splitlines() or [""])[0][:300]
    return ModelError("rematplan: the model's step trains without rematplan but fails while rematplan records it "
                      "(saved-tensor hooks and a dispatch mode around the step): %s: %s; torch.func transforms "
                      "(grad, vjp, jacrev) in the forward refuse saved-tensor hooks, and torch 1.13's dispatch "
                      "mode cannot make tensor subclasses (as_subclass); train this model without rematplan, or "
                      "plan a part of it without them" % (type(e).__name__, what))
