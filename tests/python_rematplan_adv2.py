"""rematplan's less-tested public surface with odd arguments (a second adversarial pass), run by
tests/python_rematplan.py (torch 1.13) and tests/python_rematplan_hf.py (torch 2.x; the compile
solver's tests need it and are skipped on 1.13). Each was a raw exception, a wrong answer or a
misleading message before (docs/RELIABILITY.md, rematplan's section):

  - a budget above int64 reached libremat through ctypes, which wraps it silently (2^63 became
    -2^63: store-all; plan_graph(inner=10**30) a store-all "plan" over its budget);
  - plan_graph(inner=) above the budget planned above it (predicted peak over the budget), and one
    below the least said the budget, which was above the least, could not be met;
  - a graph dict that holds itself: RecursionError;
  - Plan.save_graph(1) / (True): open() took the int as a file descriptor, wrote the graph into
    stdout and closed it; a file object was refused;
  - rematplan.apply(model, None) said the plan "was planned from a graph file";
    apply(plan, model) said a Plan is not a module;
  - plan(check="no"), verify(check_memory="no") ran the check ("no" is true); verify(device="nope")
    raised torch's raw RuntimeError;
  - use_as_compile_solver("no") installed the solver; (False) wrote "dp" over a solver the user had
    set since, and did not put back the one it replaced.
"""
import io
import os

import torch
import torch.nn as nn

import rematplan
from rematplan import _lib
from rematplan.planning import BudgetError


def chain(n=4):
    nodes = [{"name": "n%d" % i, "forward_time": 1.0, "backward_time": 2.0, "output_bytes": 1000} for i in range(n)]
    return {"nodes": nodes, "edges": [{"producer": i, "consumer": i + 1} for i in range(n - 1)]}


def raises(fn, kind, *words):
    """The exception fn raises if it is `kind` and its message holds every word, else None."""
    try:
        fn()
    except kind as e:
        return e if all(w in str(e) for w in words) else None
    except Exception:  # another kind: the check fails
        return None
    return None


def test_budget_bounds(check):
    g = chain()
    for b in (2 ** 63, 10 ** 30):
        rc, ans, _ = _lib.plan_graph(g, b)
        check(rc == _lib.RM_OK and ans["feasible"] and ans["budget_bytes"] <= _lib.MAX_BYTES,
              "a budget of %d bytes reaches libremat as 2^60 (store-all), not wrapped by ctypes: %s" % (b, ans))
    P = rematplan.plan_graph(g, 4500)
    check(raises(lambda: rematplan.plan_graph(g, 4500, inner=10 ** 30), ValueError, "inner", "2^60") is not None and
          raises(lambda: rematplan.plan_graph(g, 4500, inner=4501), ValueError, "inner", "above the budget")
          is not None and P.peak_bytes <= 4500,
          "plan_graph: an inner above the budget or 2^60 is a ValueError (it planned a peak over the budget)")
    e = raises(lambda: rematplan.plan_graph(g, 4500, inner=3000), BudgetError, "inner", "3000 bytes")
    check(e is not None and "raise the budget" not in str(e),
          "plan_graph: an inner below the least is named, not the budget above the least: %s" % e)
    check(raises(lambda: rematplan.plan_graph(g, 0.9, scale=1e300), ValueError, "scale", "2^60") is not None and
          raises(lambda: rematplan.plan_graph(g, 0.9, store_all_bytes=1e30), ValueError, "store_all_bytes")
          is not None, "plan_graph: a scale or store_all_bytes past 2^60 bytes is a ValueError")


def test_graph_cycle(check):
    g = chain()
    g["self"] = g
    check(raises(lambda: rematplan.plan_graph(g, 0.9), rematplan.RematError, "holds itself") is not None,
          "a graph dict that holds itself is a RematError (it was a RecursionError)")


def test_save_graph_targets(check):
    P = rematplan.plan_graph(chain(), 0.9)
    f = io.StringIO()
    P.save_graph(f)
    import json
    check(json.loads(f.getvalue()) == P.graph and not f.closed, "save_graph writes into a text file object")
    r, w = os.pipe()
    try:
        e = raises(lambda: P.save_graph(w), TypeError, "file name")
        os.fstat(w)  # still open: open(w, "w") would have closed it
        check(e is not None and raises(lambda: P.save_graph(True), TypeError) is not None,
              "save_graph(an int) is a TypeError, not a write into that file descriptor that closes it")
    finally:
        os.close(r)
        os.close(w)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.Tanh()) for _ in range(4)])

    def forward(self, x):
        return self.l(x).square().mean()


def test_apply_and_flags(check):
    torch.manual_seed(0)
    m, x = Net(), torch.randn(8, 32)
    P = rematplan.plan(m, x, 1.0, verbose=False)
    for bad in (None, "0.5", 0.5):
        check(raises(lambda: rematplan.apply(m, bad), TypeError, "rematplan.plan", type(bad).__name__) is not None,
              "apply(model, %r) says what plan must be" % (bad,))
    check(raises(lambda: rematplan.apply(P, m), TypeError, "swapped") is not None, "apply(plan, model): swapped")
    check(raises(lambda: rematplan.plan(m, x, 1.0, verbose=False, check="no"), TypeError, "check") is not None and
          raises(lambda: rematplan.plan(m, x, 1.0, verbose="no"), TypeError, "verbose") is not None,
          "plan(check='no'/verbose='no') is a TypeError ('no' is true: it checked and printed)")
    A = rematplan.apply(m, P)
    check(raises(lambda: rematplan.verify(A, x, check_memory="no"), TypeError, "check_memory") is not None and
          raises(lambda: rematplan.verify(A, x, device="nope"), ValueError, "rematplan.verify", "nope")
          is not None, "verify's flags and device are checked first (torch's RuntimeError before)")
    rematplan.forget(m)


def test_compile_toggle(check):
    from rematplan import compile as C
    if not C.hook_available():
        print("test_compile_toggle: skipped (torch %s has no activation_memory_budget_solver hook)"
              % torch.__version__)
        return
    import torch._functorch.config as fc
    was = fc.activation_memory_budget_solver
    try:
        fc.activation_memory_budget_solver = "greedy"
        check(raises(lambda: rematplan.use_as_compile_solver("no"), TypeError, "True or False") is not None and
              fc.activation_memory_budget_solver == "greedy", "use_as_compile_solver('no') is a TypeError")
        rematplan.use_as_compile_solver(True)
        rematplan.use_as_compile_solver(True)
        check(C._ours(fc.activation_memory_budget_solver), "use_as_compile_solver(True) twice: installed")
        rematplan.use_as_compile_solver(False)
        check(fc.activation_memory_budget_solver == "greedy",
              "use_as_compile_solver(False) puts back the solver it replaced (greedy), not dp: %r"
              % fc.activation_memory_budget_solver)
        fc.activation_memory_budget_solver = "dp"
        rematplan.use_as_compile_solver(False)
        check(fc.activation_memory_budget_solver == "dp", "(False) leaves a solver not libremat's as it is")
        check(raises(lambda: C.solve([1.0, 2.0], None, 1.0, None, [None]), rematplan.RematError, "candidate")
              is not None, "solve: candidates and memory of different lengths is a RematError (an IndexError)")
    finally:
        fc.activation_memory_budget_solver = was


def run(check):
    import time
    for t in (test_budget_bounds, test_graph_cycle, test_save_graph_targets, test_apply_and_flags,
              test_compile_toggle):
        t0 = time.perf_counter()
        t(check)
        print("%s: %.1f s" % (t.__name__, time.perf_counter() - t0))
