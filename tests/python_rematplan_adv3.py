"""rematplan's adversarial pass 3, run by tests/python_rematplan.py (torch 1.13) and
tests/python_rematplan_hf.py (torch 2.x). Each was a wrong answer or a raw exception before
(docs/RELIABILITY.md, rematplan's section):

  - the compile solver (use_as_compile_solver) below the least budget libremat's planner plans
    returned that least plan, over the knapsack's budget: at max_memory 0 it saved a candidate of
    1.0 (and a 5.0 one beside a 0.0); the partitioner asks for saved memory at most max_memory,
    as torch's own greedy and dp solvers give;
  - pickle.dumps(plan) and torch.save(plan) of a captured model's plan raised a raw
    "cannot pickle 'PyCapsule' object" (torch 1.13; 2.x: a pybind function record "is not
    pickleable"): now a RematError saying what to do; copy.copy, copy.deepcopy and a graph's plan
    work as before.
"""
import copy
import io
import math
import pickle

import torch

import rematplan
from rematplan import compile as C
from python_rematplan_adv2 import Net


def test_compile_tiny_budget(check):
    """Every answer is a partition of the candidates whose saved memory is within max_memory."""
    cases = [([1.0] * 4, b) for b in (0.0, 1e-300, 1e-9, 0.5, 0.999999, 1.0, 2.5)]
    cases += [([1.0, 2.0, 3.0, 0.1], 0.05), ([1e-12] * 3, 1e-13), ([5.0, 0.0], 0.0), ([0.0] * 3, 0.0),
              ([3.0, 1e-300, 7.0, 2.0], 1e-300), ([1e300, 1.0, 1e300], 1.0), ([0.25] * 64, 1.0)]
    for memory, budget in cases:
        try:
            saved, recomputed = C.solve(memory, None, budget, None, None)
        except Exception as e:  # a refusal would have to be a RematError naming the least: none is needed
            check(False, "solve(%r, %r): %s: %s" % (memory, budget, type(e).__name__, e))
            continue
        used = math.fsum(memory[i] for i in saved)
        check(sorted(saved + recomputed) == list(range(len(memory))) and used <= budget,
              "compile solver at max_memory %r: saves %r (%r of memory), within the budget (was the planner's "
              "least plan, over it)" % (budget, saved, used))
    # a budget the planner meets keeps its plan: the cut is for the least plan alone
    saved, _ = C.solve([1.0] * 4, None, 1.0, None, None)
    check(saved == [3], "at a budget the planner meets, its plan (the last candidate saved): %r" % saved)
    saved, _ = C.solve([5.0, 0.0], None, 0.0, None, None)
    check(saved == [1], "a candidate of no memory stays saved at max_memory 0: %r" % saved)
    saved, _ = C.solve([1.0] * 4, None, math.inf, None, None)
    check(saved == [0, 1, 2, 3], "an infinite budget saves them all: %r" % saved)


def test_plan_pickle(check):
    torch.manual_seed(0)
    m, x = Net(), torch.randn(8, 32)
    P = rematplan.plan(m, x, 0.85, verbose=False)
    for name, f in (("pickle.dumps", lambda: pickle.dumps(P)), ("torch.save", lambda: torch.save(P, io.BytesIO()))):
        try:
            f()
            msg = "pickled"
        except rematplan.RematError as e:
            msg = str(e)
        except Exception as e:
            msg = "%s: %s" % (type(e).__name__, e)
        check("cannot be pickled" in msg and "rematplan.apply(model, plan)" in msg and "save_graph" in msg,
              "%s(plan of a model): a RematError saying what to do (was a raw PyCapsule error): %s"
              % (name, msg[:200]))
    P2, P3 = copy.deepcopy(P), copy.copy(P)
    A = rematplan.apply(P2.model, P2)
    check(P2.model is not m and P3.model is m and P3.modes == P.modes and A(x).item() == m(x).item(),
          "copy.deepcopy(plan) copies the model with it and applies to the copy; copy.copy shares them")
    rematplan.forget(P2.model)
    G = rematplan.plan_graph({"nodes": [{"name": "a", "forward_time": 1.0, "backward_time": 1.0,
                                         "output_bytes": 10}]}, 1.0)
    G2 = pickle.loads(pickle.dumps(G))
    check(G2.modes == G.modes and G2.peak_bytes == G.peak_bytes, "a graph's plan pickles as before")
    buf = io.BytesIO()
    torch.save(rematplan.apply(m, P), buf)  # the applied model pickles (without the Plan)
    check(buf.tell() > 0, "the applied model pickles")
    rematplan.forget(m)


def run(check):
    import time
    for t in (test_compile_tiny_budget, test_plan_pickle):
        t0 = time.perf_counter()
        t(check)
        print("%s: %.1f s" % (t.__name__, time.perf_counter() - t0))
