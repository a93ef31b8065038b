"""Compile mode: libremat as the solver behind torch.compile's
torch._functorch.config.activation_memory_budget.

Where the partitioner accepts a solver object (newer torch: an instance of
torch._inductor.custom_graph_pass.CustomKnapsackSolver; some versions took
a plain callable), which it calls as SOLVER(memory, joint_graph, max_memory,
node_info, all_recomputable_banned_nodes) for (saved, recomputed) index lists,
use_as_compile_solver() installs one that hands libremat's graph planner
(rm_plan_graph) the candidates as a graph: each candidate a node whose
output (its `memory` entry, scaled to bytes) its own backward reads, its
inputs among the candidates as edges, its forward time the partitioner's
own runtime estimate, and a last node for the loss. What the planner keeps
is saved; the rest is recomputed. With no such hook (torch 1.13, or a torch
whose partitioner takes no callable) it raises, saying so.
"""
import inspect

from . import _lib

SCALE = 1 << 20  # the partitioner's memory is in its own units (often fractions); libremat wants integers


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


def _runtime(node):
    try:
        from torch._functorch.partitioners import estimate_runtime
        return float(estimate_runtime(node))
    except Exception:  # the estimator needs meta values some nodes lack
        return 1.0


def solve(memory, joint_graph, max_memory, node_info=None, candidates=None):
    """The solver: (saved indices, recomputed indices) of the candidates."""
    n = len(memory)
    if n == 0:
        return [], []
    cands = list(candidates) if candidates is not None else [None] * n
    index = {c: i for i, c in enumerate(cands) if c is not None}
    scale = SCALE / max(max(memory), 1e-30)
    nodes, edges = [], []
    for i in range(n):
        c = cands[i]
        nodes.append({"name": str(i), "forward_time": _runtime(c) if c is not None else 1.0,
                      "backward_time": 0.0, "output_bytes": int(memory[i] * scale) + 1,
                      "backward_reads_output": True})
        if c is not None:
            for a in getattr(c, "all_input_nodes", []):
                j = index.get(a)
                if j is not None and j < i:
                    edges.append({"producer": j, "consumer": i, "backward_reads": False})
    nodes.append({"name": "loss", "forward_time": 0.0, "backward_time": 0.0, "output_bytes": 0})
    for i in range(n):
        edges.append({"producer": i, "consumer": n, "backward_reads": False})
    budget = int(max_memory * scale)
    rc, ans, _ = _lib.plan_graph({"nodes": nodes, "edges": edges}, budget)
    if not ans or not ans.get("feasible"):
        rc, ans, _ = _lib.plan_graph({"nodes": nodes, "edges": edges}, int(ans["min_budget_bytes"]) if ans else -1)
    keep = {int(k) for k in ans.get("keep", []) if k != "loss"}
    saved = sorted(keep)
    return saved, [i for i in range(n) if i not in keep]


def use_as_compile_solver(enable=True):
    """Installs (or, enable=False, removes) libremat as activation_memory_budget's solver."""
    if not hook_available():
        import torch
        raise RuntimeError("rematplan: torch %s has no callable activation_memory_budget_solver hook "
                           "(torch._functorch.config); use rematplan.plan/apply in eager mode" % torch.__version__)
    import torch._functorch.config as fc
    fc.activation_memory_budget_solver = solver() if enable else "dp"
    return fc.activation_memory_budget_solver


def solver():
    """libremat's solver in the form this torch takes."""
    base = _solver_class()
    if base is None:
        return solve

    class RematSolver(base):
        def __call__(self, memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes):
            return solve(memory, joint_graph, max_memory, node_info, all_recomputable_banned_nodes)

        def uuid(self):
            return ("rematplan", _lib.version())

    return RematSolver()
