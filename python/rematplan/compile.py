"""Compile mode: libremat as the solver behind torch.compile's
torch._functorch.config.activation_memory_budget.

The min-cut partitioner (torch >= 2.4) accepts a solver object (an instance
of torch._inductor.custom_graph_pass.CustomKnapsackSolver; some versions took
a plain callable), which it calls as SOLVER(memory, joint_graph, max_memory,
node_info, all_recomputable_banned_nodes) for (saved, recomputed) index
lists. use_as_compile_solver() installs one that hands libremat's graph
planner (rm_plan_graph) the candidates as a graph: each candidate a node
whose output (its `memory` entry, scaled to bytes) its own backward reads,
its inputs among the candidates as edges, a last node for the loss that
reads none of them (no gradients either: the knapsack weighs what is saved,
alive from its forward to its backward). What the planner keeps is
saved; the rest is recomputed.

Its time is estimated from the node's shapes alone (its meta values):
FLOPs of matmuls, convolutions and attention (torch.utils.flop_counter's
formulas where this torch has them, else our own for the common ones), and
for every op the bytes it reads and writes at a balance of 100 FLOP per
byte. Nothing is run: the partitioner calls the solver inside
`no_dispatch()`, where torch's own estimate_runtime would build real
tensors of garbage from the meta values and run the node on the device (an
index op then reads out of bounds: CUDA's "vectorized gather kernel index
out of bounds" assert). With no such hook (torch 1.13) it raises, saying so.
"""
import inspect
import math
import numbers

from . import _lib

SCALE = 1 << 20  # the partitioner's memory is in its own units (often fractions); libremat wants integers
BALANCE = 100.0  # FLOP per byte moved: an op's time is max(FLOPs, BALANCE * bytes)


def _solver_class():
    try:
        from torch._inductor.custom_graph_pass import CustomKnapsackSolver
        return CustomKnapsackSolver
    except ImportError:
        return None


def hook_available():
    """'object' (a CustomKnapsackSolver instance), 'callable', or None (no hook)."""
    try:
        import torch._functorch.config as fc
        import torch._functorch.partitioners as parts
    except ImportError:
        return None
    if not hasattr(fc, "activation_memory_budget_solver"):
        return None
    if _solver_class() is not None:
        return "object"
    try:
        return "callable" if "callable(SOLVER)" in inspect.getsource(parts) else None
    except (OSError, TypeError):
        return None


def _size(d):
    """A dimension as an int (a symbolic one by its hint, else 4096, as the partitioner does)."""
    try:
        return int(d)
    except Exception:  # a SymInt without a hint
        node = getattr(d, "node", None)
        hint = getattr(node, "hint", None) if node is not None else None
        return int(hint) if isinstance(hint, int) else 4096


def _meta(x):
    """The meta value (a tensor with shape and dtype) of an fx node argument, or None."""
    v = getattr(x, "meta", {}).get("val") if hasattr(x, "meta") else None
    return v if hasattr(v, "shape") and hasattr(v, "dtype") else None


def _bytes(v):
    """Bytes of a meta value: a tensor, or the tensors in a tuple or list of them."""
    if isinstance(v, (tuple, list)):
        return sum(_bytes(x) for x in v)
    if not (hasattr(v, "shape") and hasattr(v, "dtype")):
        return 0
    n = 1
    for d in v.shape:
        n *= _size(d)
    try:
        return n * v.element_size()
    except Exception:
        return n * 4


def _flops(node):
    """FLOPs of a node from its shapes, or 0."""
    target = node.target
    packet = getattr(target, "_overloadpacket", target)
    args = [_meta(a) if hasattr(a, "meta") else a for a in node.args]
    out = node.meta.get("val") if hasattr(node, "meta") else None
    try:
        from torch.utils.flop_counter import flop_registry
        f = flop_registry.get(packet)
        if f is not None:
            kwargs = {k: _meta(v) if hasattr(v, "meta") else v for k, v in node.kwargs.items()}
            return float(f(*args, out_val=out, **kwargs))
    except Exception:  # a formula that wants what this graph does not give: our own, below
        pass
    name = str(packet).split(".")[-1]
    shapes = [[_size(d) for d in a.shape] for a in args if hasattr(a, "shape")]
    if name in ("mm", "addmm", "bmm", "baddbmm", "matmul") and len(shapes) >= 2:
        a, b = shapes[-2], shapes[-1]
        batch = math.prod(a[:-2]) if len(a) > 2 else 1
        return 2.0 * batch * a[-2] * a[-1] * b[-1]
    if name == "convolution" and len(shapes) >= 2 and out is not None:
        w = shapes[1]
        return 2.0 * math.prod(_size(d) for d in out.shape) * math.prod(w[1:])
    return 0.0


def estimate(node):
    """A node's time, from its shapes alone: max(FLOPs, BALANCE * bytes read and written)."""
    moved = _bytes(node.meta.get("val") if hasattr(node, "meta") else None)
    for a in getattr(node, "all_input_nodes", []):
        moved += _bytes(_meta(a))
    return max(_flops(node), BALANCE * moved, 1.0)


def solve(memory, joint_graph, max_memory, node_info=None, candidates=None):
    """The solver: (saved indices, recomputed indices) of the candidates."""
    n = len(memory)
    if n == 0:
        return [], []
    if not all(isinstance(m, numbers.Real) and math.isfinite(m) and m >= 0 for m in memory) or \
            not isinstance(max_memory, numbers.Real) or not max_memory >= 0:
        raise _lib.RematError("rematplan's compile solver: the candidates' memory must be finite numbers >= 0 and "
                              "the budget a number >= 0 (got %r for %d candidates)" % (max_memory, n))
    if max_memory >= sum(memory):  # (inf too) everything fits
        return list(range(n)), []
    cands = list(candidates) if candidates is not None else [None] * n
    if len(cands) != n:  # (an IndexError deep in the graph's making)
        raise _lib.RematError("rematplan's compile solver: %d candidates' memory but %d candidate nodes: the "
                              "partitioner gives one of each per candidate" % (n, len(cands)))
    index = {c: i for i, c in enumerate(cands) if c is not None}
    scale = SCALE / max(max(memory), 1e-30)
    times = [estimate(c) if c is not None else 1.0 for c in cands]
    unit = max(times) / 1e6  # libremat's times are doubles; keep them in a sane range
    nodes, edges = [], []
    for i in range(n):
        c = cands[i]
        nodes.append({"name": str(i), "forward_time": times[i] / unit, "backward_time": 0.0,
                      "output_bytes": int(memory[i] * scale) + 1, "gradient_bytes": 0,  # the knapsack's
                      "backward_reads_output": True})  # bytes are what is saved, no gradients
        for a in getattr(c, "all_input_nodes", []) if c is not None else []:
            j = index.get(a)
            if j is not None and j < i:
                edges.append({"producer": j, "consumer": i, "backward_reads": False})
    # the loss, last, reading none of them: a candidate lives from its forward to its backward
    # (what the knapsack saves), not until the loss is computed
    nodes.append({"name": "loss", "forward_time": 0.0, "backward_time": 0.0, "output_bytes": 0})
    graph = {"nodes": nodes, "edges": edges}
    rc, ans, msg = _lib.plan_graph(graph, int(max_memory * scale))
    if rc in (_lib.RM_OK, _lib.RM_ERR_BUDGET) and ans and not ans.get("feasible"):
        start = ans.get("least_plan")  # the least not searched again
        rc, ans, msg = _lib.plan_graph(graph if start is None else dict(graph, start=start),
                                       int(ans["min_budget_bytes"]))
    if rc != _lib.RM_OK or not ans:
        raise _lib.RematError("rematplan's compile solver: rm_plan_graph refused the %d candidates: %s" % (n, msg))
    keep = within(sorted({int(k) for k in ans.get("keep", []) if k != "loss"}), memory, times, max_memory)
    kept = set(keep)
    return keep, [i for i in range(n) if i not in kept]


def within(keep, memory, times, max_memory):
    """The saved candidates cut to the knapsack's budget: what they hold at most max_memory (what the
    partitioner asks, as its own greedy and dp solvers give). Below the least budget libremat's planner
    plans, its least plan came back, over the budget (at a budget of 0 it saved a candidate, a 5.0 one
    beside a 0.0): its peak counts a value rebuilt for its backward, which the knapsack does not. The
    candidates cheapest to recompute per byte are dropped first; those of no memory stay saved."""
    total = math.fsum(memory[i] for i in keep)
    if total <= max_memory:
        return keep
    drop = set()
    for i in sorted(keep, key=lambda i: (times[i] / memory[i] if memory[i] > 0 else math.inf, i)):
        if memory[i] <= 0:
            break
        drop.add(i)
        total -= memory[i]
        if total <= max_memory and math.fsum(memory[j] for j in keep if j not in drop) <= max_memory:
            break
    return [i for i in keep if i not in drop]


_before = ["dp"]  # the solver use_as_compile_solver(True) replaced: what (False) puts back


def _ours(s):
    return s is solve or getattr(type(s), "remat_solver", False)


def use_as_compile_solver(enable=True):
    """Installs (or, enable=False, removes) libremat as activation_memory_budget's solver. Removing it
    puts back the solver it replaced, and leaves a solver set since (not libremat's) as it is."""
    from . import _flags
    _flags("rematplan.use_as_compile_solver", enable=enable)  # ("no" was true: it installed)
    if not hook_available():
        import torch
        raise RuntimeError("rematplan: torch %s has no callable activation_memory_budget_solver hook "
                           "(torch._functorch.config); use rematplan.plan/apply in eager mode" % torch.__version__)
    import torch._functorch.config as fc
    now = fc.activation_memory_budget_solver
    if enable:
        if not _ours(now):  # twice: the first one's predecessor stays the one to put back
            _before[0] = now
        fc.activation_memory_budget_solver = solver()
    elif _ours(now):  # (False) wrote "dp" over the user's "greedy" or own solver
        fc.activation_memory_budget_solver = _before[0]
    return fc.activation_memory_budget_solver


def solver():
    """libremat's solver in the form this torch takes."""
    base = _solver_class()
    if base is None:
        return solve

    class RematSolver(base):
        remat_solver = True

        def __call__(self, memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes):
            return solve(memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes)

        def uuid(self):
            return ("rematplan", _lib.version())

    return RematSolver()
