"""Applying a plan: the traced model rewritten so each region runs under
torch.utils.checkpoint (non-reentrant), nested where the plan nests.

A region becomes a submodule (`remat_region_K`) whose forward is
checkpoint(run, ...). Its inputs are not handed to checkpoint (whose torch
1.13 form holds them in a closure for the whole step, so a region nested in
another would keep its inputs even while the outer one is dropped): they
are saved by a small autograd Function, through whatever saved-tensor
hooks are active, i.e. dropped with the outer region and recomputed with
it, as torch >= 2.1's own nested checkpoint does. The RNG state is
checkpoint's (preserve_rng_state): dropout draws the same masks again.

BatchNorm (pytorch#96136): in training mode a recomputation would update
the running statistics a second time. Inside a region, BatchNorm modules
and F.batch_norm calls go through a wrapper that, while recomputing, calls
batch_norm with no running statistics: the same batch statistics, the same
output bit for bit, and no update.
"""
import operator
import threading

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as tc

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


_hooks = None  # verify.py's saved-tensor hook wrapper, when verifying
stat_copies = None  # and the addresses of the statistics' copies it does not compare


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


def _policy(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy
    return CheckpointPolicy.MUST_SAVE if getattr(_state, "save", False) else CheckpointPolicy.PREFER_RECOMPUTE


class Saved(nn.Module):
    """An op of a region the plan keeps: its aten ops are MUST_SAVE for the selective policy."""

    def __init__(self, fn):
        super().__init__()
        if isinstance(fn, nn.Module):
            self.mod = fn
        else:
            self.fn = fn

    def forward(self, *args, **kwargs):
        before = getattr(_state, "save", False)
        _state.save = True
        try:
            return (self.mod if hasattr(self, "mod") else self.fn)(*args, **kwargs)
        finally:
            _state.save = before


def run_region(body, inputs, name, sac=False):
    """body(*inputs) under non-reentrant checkpoint, inputs saved through the active hooks."""
    is_t = [isinstance(x, torch.Tensor) for x in inputs]
    tensors = [x for x, t in zip(inputs, is_t) if t]
    device = tensors[0].device if tensors else torch.device("cpu")
    dummy = torch.zeros(0, device=device, requires_grad=True)
    box = [_SaveInputs.apply(dummy, *tensors)]  # the token; dropped once the inputs are taken back
    cell = [inputs]
    record = _hooks.region(name) if _hooks is not None else None

    def run(_anchor):
        xs = cell[0]
        if xs is None:  # recomputation: inputs from the token (maybe recomputed by an outer region)
            # checkpoint recomputes a region once: the token (and through it an outer region's
            # copy of these inputs) is let go now, the inputs living on in what the ops save
            token = box.pop()
            saved = iter(token.grad_fn.saved_tensors)
            del token
            xs = [next(saved) if t else x for x, t in zip(inputs_template, is_t)]
            with _Recompute():
                return _call(body, xs, record, recompute=True)
        if recomputing():  # a first run inside an outer region's recomputation
            return _call(body, xs, None, recompute=False)
        return _call(body, xs, record, recompute=False)

    # non-tensor inputs (sizes) are kept as they are; tensors only through the token
    inputs_template = [None if t else x for x, t in zip(inputs, is_t)]
    anchor = torch.zeros(0, device=device)  # checkpoint stashes the RNG of the devices of its arguments
    extra = {}
    if sac:
        import functools
        extra["context_fn"] = functools.partial(tc.create_selective_checkpoint_contexts, _policy)
        if _takes_respect_hooks():  # the behaviour of today, said explicitly (no warning)
            extra["respect_saved_tensors_hooks"] = False
    out = tc.checkpoint(run, anchor, use_reentrant=False, preserve_rng_state=True, **extra)
    cell[0] = None
    return out


def _call(body, xs, record, recompute):
    if record is None:
        return body(*xs)
    with record.hooks(recompute):
        return body(*xs)


class Region(nn.Module):
    """One checkpointed region of the plan."""

    def __init__(self, body, name, sac=False):
        super().__init__()
        self.body = body
        self.region_name = name
        self.sac = sac

    def forward(self, *inputs):
        return run_region(self.body, inputs, self.region_name, self.sac)


def _stat_copy(t):
    """A copy of a running statistic for a recomputation to update (verify.py skips it)."""
    if t is None:
        return None
    c = t.clone()
    if stat_copies is not None:  # verifying (the backward may run on another thread): kept alive
        stat_copies[c.data_ptr()] = c  # so that no later tensor takes the address
    return c


class OnceBatchNorm(nn.Module):
    """A BatchNorm module that does not update its statistics while recomputing."""

    def __init__(self, bn):
        super().__init__()
        self.bn = bn

    def forward(self, x):
        bn = self.bn
        if recomputing() and bn.training and bn.track_running_stats:
            # copies of the statistics take the update: the same call, the same saved tensors
            # (checkpoint matches them by order), the same batch statistics, the module untouched
            rm, rv = _stat_copy(bn.running_mean), _stat_copy(bn.running_var)
            return F.batch_norm(x, rm, rv, bn.weight, bn.bias, True, 0.0, bn.eps)
        return bn(x)


def once_batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                    eps=1e-5):
    """F.batch_norm, without the statistics update while recomputing."""
    if recomputing() and training:
        running_mean, running_var = _stat_copy(running_mean), _stat_copy(running_var)
    return F.batch_norm(input, running_mean, running_var, weight, bias, training, momentum, eps)


def _is_bn(gm, n):
    if n.op == "call_module":
        return isinstance(gm.get_submodule(n.target), nn.modules.batchnorm._BatchNorm)
    return n.op == "call_function" and n.target is F.batch_norm


class _Builder:
    def __init__(self, root, saved=()):
        self.gm = root
        self.count = 0
        self.bn = {}
        self.saved = set(saved)  # fx nodes kept by the selective policy
        self.n_saved = 0

    def region_module(self, items):
        """A Region submodule for items (fx nodes and nested ("region", items, range)), registered on gm."""
        inside = set(self.flatten(items))
        inputs, seen = [], set()
        for n in self.flatten(items):
            for a in n.all_input_nodes:
                if a not in inside and a not in seen and a.op != "get_attr":
                    seen.add(a)
                    inputs.append(a)
        outputs = [n for n in self.flatten(items) if any(u not in inside for u in n.users)]
        sub = torch.fx.Graph()
        env = {}
        for a in inputs:
            env[a] = sub.placeholder(a.name)
        self.emit(sub, items, env, inside_region=True)
        sub.output(tuple(env[o] for o in outputs))
        name = "remat_region_%d" % self.count
        self.count += 1
        body = torch.fx.GraphModule(self.gm, sub, name)
        self.gm.add_module(name, Region(body, name, sac=any(n in self.saved for n in inside)))
        return name, inputs, outputs

    def flatten(self, items):
        for it in items:
            if isinstance(it, tuple):
                yield from self.flatten(it[1])
            else:
                yield it

    def emit(self, g, items, env, inside_region):
        for it in items:
            if isinstance(it, tuple):
                name, inputs, outputs = self.region_module(it[1])
                r = g.call_module(name, tuple(env[a] for a in inputs))
                for k, o in enumerate(outputs):
                    env[o] = g.call_function(operator.getitem, (r, k))
                continue
            n = it
            for a in n.all_input_nodes:  # a parameter or buffer read inside: its own get_attr
                if a not in env and a.op == "get_attr":
                    env[a] = g.get_attr(a.target)
            if inside_region and n in self.saved:
                env[n] = self.saved_op(g, n, env)
            elif inside_region and _is_bn(self.gm, n):
                env[n] = self.once_bn(g, n, env)
            else:
                env[n] = g.node_copy(n, lambda a: env[a])

    def saved_op(self, g, n, env):
        """n as a Saved module: the selective policy saves what it computes."""
        args = torch.fx.node.map_arg(n.args, lambda a: env[a])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a])
        if n.op == "call_module":
            fn = self.gm.get_submodule(n.target)
        elif n.op == "call_function":
            fn = n.target
        else:
            name = n.target
            fn = lambda obj, *a, **k: getattr(obj, name)(*a, **k)  # noqa: E731
        mod = "remat_saved_%d" % self.n_saved
        self.n_saved += 1
        self.gm.add_module(mod, Saved(fn))
        return g.call_module(mod, args, kwargs)

    def once_bn(self, g, n, env):
        args = torch.fx.node.map_arg(n.args, lambda a: env[a])
        kwargs = torch.fx.node.map_arg(n.kwargs, lambda a: env[a])
        if n.op == "call_function":
            return g.call_function(once_batch_norm, args, kwargs)
        if n.target not in self.bn:
            name = "remat_once_bn_%d" % len(self.bn)
            self.gm.add_module(name, OnceBatchNorm(self.gm.get_submodule(n.target)))
            self.bn[n.target] = name
        return g.call_module(self.bn[n.target], args, kwargs)


def to_fx_items(gm, members, tree):
    """The plan's tree over remat node ids as fx items: a region spans the fx nodes from its first
    node's to its last node's (views and sizes between them included)."""
    order = [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]
    pos = {n: i for i, n in enumerate(order)}

    def span(items):
        ids = []

        def walk(its):
            for it in its:
                if isinstance(it, tuple):
                    walk(it[1])
                else:
                    ids.append(it)
        walk(items)
        return pos[members[min(ids)]], pos[members[max(ids)]]

    def build(items, lo, hi):
        """fx items for positions lo..hi, with the regions among items nested."""
        regions = sorted(((span(it[1]), it) for it in items if isinstance(it, tuple)), key=lambda x: x[0])
        out, p = [], lo
        for (a, b), it in regions:
            out.extend(order[p:a])
            out.append(("region", build(it[1], a, b)))
            p = b + 1
        out.extend(order[p:hi + 1])
        return out

    return build(tree, 0, len(order) - 1)


def apply(model, plan):
    """The model with the plan's regions checkpointed: an fx GraphModule that shares the model's
    parameters and buffers (train it, or pass model.parameters() to the optimizer: the same)."""
    gm = plan.graph_module
    if gm is None:
        raise ValueError("rematplan.apply: this plan has no traced model (it was planned from a graph file)")
    if model is not plan.model:
        raise ValueError("rematplan.apply: the plan was made for another model object; plan this model")
    # a fresh holder of the model's own submodules, parameters and buffers, for the regions
    root = nn.Module()
    for name, mod in gm.named_children():
        root.add_module(name, mod)
    for name, p in gm.named_parameters(recurse=False):
        root.register_parameter(name, p)
    for name, buf in gm.named_buffers(recurse=False):
        root.register_buffer(name, buf)
    items = to_fx_items(gm, plan.members, plan.tree())
    b = _Builder(root, {plan.members[i] for i in getattr(plan, "sac_saved", ())})
    g = torch.fx.Graph()
    env = {}
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "get_attr"):
            env[n] = g.node_copy(n, lambda a: env[a])
    b.emit(g, items, env, inside_region=False)
    out = next(n for n in gm.graph.nodes if n.op == "output")
    g.output(torch.fx.node.map_arg(out.args[0], lambda a: env[a]))
    graph = torch.fx.GraphModule(root, g, model.__class__.__name__ + "Remat")
    return RematModel(model, graph, plan)


class RematModel(nn.Module):
    """The applied model: the original's submodules, parameters and buffers, registered in the
    original's order under the same names (so state_dict() and parameters() are the model's), and
    the rewritten graph (held aside, not registered) that runs them with the regions."""

    def __init__(self, model, graph, plan):
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        for name, p in model.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in model.named_buffers(recurse=False):
            self.register_buffer(name, b, persistent=name not in getattr(model, "_non_persistent_buffers_set", ()))
        object.__setattr__(self, "remat_graph", graph)
        object.__setattr__(self, "remat_plan", plan)
        self.train(model.training)

    def train(self, mode=True):
        super().train(mode)
        self.remat_graph.train(mode)  # the region and BatchNorm wrappers
        return self

    @property
    def code(self):
        return self.remat_graph.code

    def forward(self, *args, **kwargs):
        return self.remat_graph(*args, **kwargs)
