"""Profiling an eager PyTorch model per op, into remat's graph JSON.

The model is traced with torch.fx (torch.export's graph is not used: its
aten-level nodes cannot be mapped back onto the user's modules for apply).
Every call node of the trace (a leaf module such as nn.Linear, a function,
a method) is run by an fx Interpreter on the user's device, with:
  - its forward time (perf_counter around the node; CUDA synchronised),
  - its backward time: every autograd Node the op created gets a post-hook;
    the engine runs Nodes one at a time, so the time between two hooks is
    the later Node's (plus the gradient sums before it),
  - its outputs: each output storage is new (owned by this node) or an
    alias of an earlier one (a view: the node is absorbed into the owner),
  - what its backward saves: a saved-tensor pack hook sees every tensor the
    autograd Nodes of this op save, by storage: an input's (an edge the
    backward reads), its own output's, a parameter's (not an activation) or
    a private one (a dropout mask, LayerNorm's statistics): the private
    bytes are added to the node's output bytes, held until its backward,
  - whether it draws random numbers (the RNG state moved) and whether it
    changed module state in place (a buffer's version counter moved:
    BatchNorm's running statistics).
Storages are identified by data pointer while every output and every saved
tensor of the pass is alive, so an address is never reused within a pass.
"""
import dis
import inspect
import statistics
import time

import torch
import torch.fx

CALLS = ("call_module", "call_function", "call_method")


def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from _tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _tensors(x)


def _storage(t):
    """(data pointer, bytes) of t's whole storage."""
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    nbytes = s.nbytes() if callable(getattr(s, "nbytes", None)) else s.size() * t.element_size()
    return s.data_ptr(), int(nbytes)


def _sync(device):
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def trace(model):
    """The model as an fx GraphModule (its forward must return the loss)."""
    class Tracer(torch.fx.Tracer):
        proxy_buffer_attributes = True  # self.mask[:T, :T] with T from the input's shape

        def iter(self, obj):
            # `B, T, C = x.shape`: fx of torch 1.13 finds the UNPACK_SEQUENCE by
            # f_lasti // 2, which Python 3.11's inline caches broke; find it by offset
            frame = inspect.currentframe().f_back.f_back
            for inst in dis.get_instructions(frame.f_code):
                if inst.offset == frame.f_lasti and inst.opname == "UNPACK_SEQUENCE":
                    return (obj[i] for i in range(inst.argval))
            return super().iter(obj)

    try:
        graph = Tracer().trace(model)
        return torch.fx.GraphModule(model, graph, model.__class__.__name__)
    except Exception as e:  # fx's errors are of many kinds
        raise TypeError("rematplan: torch.fx cannot trace this model (%s: %s); models with data-dependent "
                        "control flow need that part moved into a leaf module (docs/PYTORCH.md)"
                        % (type(e).__name__, e)) from e


class _Pass(torch.fx.Interpreter):
    """One forward pass, node by node, recording what profile() needs."""

    def __init__(self, gm, device, record):
        super().__init__(gm)
        self.device, self.record = device, record
        self.cur = None
        self.fwd_ms = {}
        self.outputs = {}
        self.saved = {}       # node -> list of (ptr, bytes) its backward saves
        self.grad_fns = {}    # node -> autograd Nodes created by it
        self.seen = set()
        self.random = set()
        self.mutates = {}     # node -> names of buffers changed in place
        self.buffers = [(n, b) for n, b in gm.named_buffers()]

    def pack(self, t):
        if self.cur is not None:
            self.saved.setdefault(self.cur, []).append(_storage(t))
        return t

    def run_node(self, n):
        if n.op not in CALLS:
            return super().run_node(n)
        self.cur = n
        if self.record:
            rng = torch.get_rng_state()
            versions = [b._version for _, b in self.buffers]
        _sync(self.device)
        t0 = time.perf_counter()
        out = super().run_node(n)
        _sync(self.device)
        self.fwd_ms[n] = (time.perf_counter() - t0) * 1e3
        self.cur = None
        self.outputs[n] = out
        if self.record:
            if not torch.equal(rng, torch.get_rng_state()):
                self.random.add(n)
            moved = [name for (name, b), v in zip(self.buffers, versions) if b._version != v]
            if moved:
                self.mutates[n] = moved
        # the autograd Nodes this op created: reachable from its outputs, not seen before
        mine, stack = [], [t.grad_fn for t in _tensors(out) if t.grad_fn is not None]
        while stack:
            g = stack.pop()
            if g is None or g in self.seen:
                continue
            self.seen.add(g)
            mine.append(g)
            stack.extend(f for f, _ in g.next_functions)
        self.grad_fns[n] = mine
        return out


def _one_pass(gm, args, device, record):
    p = _Pass(gm, device, record)
    with torch.autograd.graph.saved_tensors_hooks(p.pack, lambda t: t):
        loss = p.run(*args)
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0 and loss.requires_grad):
        raise TypeError("rematplan: the model's forward must return the loss (a scalar tensor that requires "
                        "grad); wrap the model and its loss function in one nn.Module")
    owner_of_fn, stamps = {}, []
    handles = []
    for n, fns in p.grad_fns.items():
        for g in fns:
            owner_of_fn[g] = n
            handles.append(g.register_hook(lambda gi, go, g=g: stamps.append((time.perf_counter(), g))))
    _sync(device)
    t0 = time.perf_counter()
    loss.backward()
    _sync(device)
    bwd_ms = {}
    last = t0
    for t, g in stamps:
        n = owner_of_fn[g]
        bwd_ms[n] = bwd_ms.get(n, 0.0) + (t - last) * 1e3
        last = t
    for h in handles:
        h.remove()
    return p, bwd_ms


def profile(model, example_inputs, repeats=3, device=None):
    """Profiles model(*example_inputs) (a scalar loss); returns (graph_module, Profile)."""
    gm = trace(model)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    was_training = model.training
    gm.train(was_training)
    # the profiling passes must leave the model as they found it: buffers (BatchNorm's
    # running statistics), the RNG and the parameters' gradients are restored after
    state = {k: v.detach().clone() for k, v in gm.state_dict().items()}
    rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    grads = [(p, p.grad) for p in gm.parameters()]
    fwd, bwd = {}, {}
    first = None
    try:
        for r in range(repeats + 1):  # the first pass warms up and records; its times are not used
            for p, _ in grads:
                p.grad = None
            torch.set_rng_state(rng)
            p_, b_ = _one_pass(gm, args, device, record=(r == 0))
            if r == 0:
                first = p_
                continue
            for n, v in p_.fwd_ms.items():
                fwd.setdefault(n, []).append(v)
            for n, v in b_.items():
                bwd.setdefault(n, []).append(v)
            del p_
    finally:
        with torch.no_grad():
            for k, v in gm.state_dict().items():
                v.copy_(state[k])
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        for p, g in grads:
            p.grad = g
    prof = Profile(gm, first, args, {n: statistics.median(v) for n, v in fwd.items()},
                   {n: statistics.median(v) for n, v in bwd.items()})
    del first
    return gm, prof


def getattr_path(obj, path):
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


class Profile:
    """Per fx call node: times, bytes, aliases, saves; and the remat graph built from them."""

    def __init__(self, gm, p, args, fwd_ms, bwd_ms):
        self.gm = gm
        params = {_storage(t)[0] for t in list(gm.parameters()) + list(gm.buffers())}
        inputs = {_storage(t)[0] for t in _tensors(args)}
        self.input_bytes = sum(_storage(t)[1] for t in _tensors(args))
        self.calls = [n for n in gm.graph.nodes if n.op in CALLS]
        owner = {}      # storage ptr -> fx node that allocated it
        self.own = {}   # node -> {ptr: bytes} it allocated
        self.alias = {}  # node -> set of owner nodes of its outputs, when it allocated none (a view)
        self.grad_bytes = {}
        for n in self.calls:
            mine, owners, gbytes = {}, set(), 0
            for t in _tensors(p.outputs.get(n)):
                ptr, nb = _storage(t)
                if ptr in params or ptr in inputs or nb == 0:
                    continue
                if ptr in owner:
                    owners.add(owner[ptr])
                else:
                    owner[ptr] = n
                    mine[ptr] = nb
                    if t.requires_grad:
                        gbytes += t.numel() * t.element_size()
            self.own[n] = mine
            if not mine:
                self.alias[n] = owners
            self.grad_bytes[n] = gbytes
        self.private = {}    # node -> bytes of saved tensors that are no node's output
        self.saves = {}      # node -> owner nodes whose outputs its backward reads
        for n in self.calls:
            priv, reads, seen = 0, set(), set()
            for ptr, nb in p.saved.get(n, []):
                if ptr in params or ptr in inputs or ptr in seen:
                    continue
                seen.add(ptr)
                if ptr in owner:
                    reads.add(owner[ptr])
                else:
                    priv += nb
            self.private[n] = priv
            self.saves[n] = reads
        self.fwd_ms = {n: fwd_ms.get(n, 0.0) for n in self.calls}
        self.bwd_ms = {n: bwd_ms.get(n, 0.0) for n in self.calls}
        self.has_grad = {n: bool(p.grad_fns.get(n)) for n in self.calls}
        self.random = set(p.random)
        self.mutates = dict(p.mutates)
        self.loss = next(iter(a for a in gm.graph.nodes if a.op == "output")).args[0]
        self._build()

    def _owners(self, n):
        """The nodes that own the storages n's output lives in (n itself unless n is a view)."""
        if n not in self.alias:
            return {n}
        out = set()
        for a in self.alias[n]:
            out |= self._owners(a)
        return out

    def _build(self):
        """The remat graph: one node per op that allocates (views folded into their owner); an op
        whose backward saves private tensors (a dropout mask, LayerNorm's statistics, matmul's
        contiguous copies) gets a second node right after it, "<op>.saved", holding them until its
        backward: dropping them costs the op's forward again (the op re-runs to restore them)."""
        members = [n for n in self.calls if n not in self.alias or self.saves[n] or self.private[n]
                   or n in self.mutates or self._is_loss(n)]
        self.members, nodes, edges = [], [], []
        index = {}
        for n in members:
            index[n] = len(self.members)
            self.members.append(n)
            if self.private[n] and not self._is_loss(n):
                self.members.append(n)  # the ".saved" node maps onto the same op
        self.index = index
        last = len(self.members) - 1
        for n in members:
            i = index[n]
            reads = self.saves[n]
            loss = self._is_loss(n)
            priv = self.private[n]
            out = sum(self.own[n].values()) + (priv if loss else 0)
            node = {"name": n.name, "forward_time": round(self.fwd_ms[n], 5),
                    # the parameters' gradients this op's backward computes, each a new tensor
                    # before it is added into .grad: its backward's workspace
                    "backward_workspace_bytes": self.param_grad_bytes(n),
                    "backward_time": round(self.bwd_ms[n], 5), "output_bytes": out,
                    "gradient_bytes": 0 if loss else self.grad_bytes[n], "backward": self.has_grad[n],
                    "backward_reads_output": n in reads or (loss and priv > 0)}
            if n in self.random:
                node["random"] = True
            if n in self.mutates:
                node["side_effect"] = self.mutates[n]
            if self.is_bn(n):
                node["batchnorm"] = True
            nodes.append(node)
            producers = {}
            for a in n.all_input_nodes:
                if a.op not in CALLS:
                    continue
                for o in self._owners(a):
                    if o in index and index[o] < i:
                        producers[index[o]] = producers.get(index[o], False) or o in reads
            for o in reads:  # a saved tensor reached some other way
                if o in index and index[o] < i:
                    producers[index[o]] = True
            for j in sorted(producers):
                edges.append({"producer": j, "consumer": i, "backward_reads": producers[j]})
            if priv and not loss:
                nodes.append({"name": n.name + ".saved", "forward_time": node["forward_time"],
                              "backward_time": 0.0, "output_bytes": priv, "gradient_bytes": 0,
                              "backward": True, "backward_reads_output": True, "part_of": i})
                edges.append({"producer": i, "consumer": i + 1, "backward_reads": False})
        assert len(nodes) == last + 1
        # the time of absorbed nodes (views and their backward) goes to the op they alias
        for n in self.calls:
            if n in index:
                continue
            own = [o for o in self._owners(n) if o in index]
            if own:
                k = index[max(own, key=lambda o: index[o])]
                nodes[k]["forward_time"] = round(nodes[k]["forward_time"] + self.fwd_ms[n], 5)
                nodes[k]["backward_time"] = round(nodes[k]["backward_time"] + self.bwd_ms[n], 5)
        self.graph = {"nodes": nodes, "edges": edges}

    def param_grad_bytes(self, n):
        ps = []
        if n.op == "call_module":
            ps = [p for p in self.gm.get_submodule(n.target).parameters() if p.requires_grad]
        for a in n.all_input_nodes:
            if a.op == "get_attr":
                t = getattr_path(self.gm, a.target)
                if isinstance(t, torch.nn.Parameter) and t.requires_grad:
                    ps.append(t)
        return sum(p.numel() * p.element_size() for p in ps)

    def is_bn(self, n):
        if n.op == "call_module":
            return isinstance(self.gm.get_submodule(n.target), torch.nn.modules.batchnorm._BatchNorm)
        return n.op == "call_function" and n.target is torch.nn.functional.batch_norm

    def _is_loss(self, n):
        return n is self.loss
