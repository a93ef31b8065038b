"""Planning: a captured step's graph to libremat's general-graph planner
(rm_plan_graph), whose plan the applied model runs op by op.

The graph (graph.py) says "eager": an eager framework runs the plan, so the
planner recomputes a value at the backward that reads it (one node per
block) and never in the forward pass. Every plan of that model is what
recompute.py runs: each node kept, recomputed once ("once": at its first
backward reader, held until its last) or for each backward reader
("each"). So the plan's prediction is the planner's own price of it: no
mapping onto regions loses anything. Bytes are the profile's, times
`scale` (plan() sets it to the measured store-all step over the profile's,
so that what is predicted is what the allocator counts).
"""
import copy
import json
import math
import numbers
import os
import time

from . import _lib

# What PyTorch allocates beside the modelled tensors (and the RNG states recipes of random ops
# keep): plans are made for the budget less this share.
MARGIN = 0.01


class BudgetError(ValueError):
    """The budget cannot be met; .least_bytes is the least budget that works."""

    def __init__(self, msg, least_bytes, store_all_bytes, want=None):
        super().__init__(msg)
        self.least_bytes, self.store_all_bytes, self.want = least_bytes, store_all_bytes, want


def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(b) >= k:
            return "%.2f %s" % (b / k, unit)
    return "%d B" % b


def budget_bytes(budget, store_all):
    """budget: bytes (int), a fraction of store-all (float in (0, 1]), or a string libremat parses."""
    if isinstance(budget, bool) or type(budget).__name__ == "bool_":
        raise TypeError("budget: bytes, a fraction or a string such as '3GiB' or '50%'")
    # numpy's and other libraries' numbers as Python's (np.int64 is no int, np.float32 no float)
    if not isinstance(budget, (int, float, str)) and isinstance(budget, numbers.Integral):
        budget = int(budget)
    elif not isinstance(budget, (int, float, str)) and isinstance(budget, numbers.Real):
        budget = float(budget)
    if isinstance(budget, int):
        if budget <= 0:
            raise ValueError("budget: %d bytes: must be positive" % budget)
        return _lib.parse_size(str(budget))[0]  # libremat's limit (2^60) and words, as remat's CLI
    if isinstance(budget, float):
        if not (0 < budget <= 1):
            raise ValueError("budget: a fraction of store-all must be in (0, 1], got %r" % budget)
        return int(math.floor(budget * store_all))
    if isinstance(budget, str):
        b, f = _lib.parse_size(budget)
        if f == 0:
            return b
        if not (0 < f <= 1):
            raise ValueError("budget: %r: a share of store-all must be in (0%%, 100%%]" % budget)
        return int(math.floor(f * store_all))
    raise TypeError("budget: bytes (int), a fraction (float) or a string such as '3GiB' or '50%%', not %s"
                    % type(budget).__name__)


class Plan:
    """What plan() found: each node's mode, the predictions (bytes as the allocator counts them: the
    profile's times `scale`), and (a captured model) the table the applied model runs."""

    measured_peak = None
    model = profile = table = None

    def n_recomputed(self):
        return sum(1 for m in self.modes if m != "keep")

    def __reduce_ex__(self, protocol):
        """A plan of a graph (plan_graph) pickles. A plan of a captured model holds the model and its
        recorded step (aten ops, tensors), which do not pickle: pickle.dumps and torch.save raised a raw
        `cannot pickle 'PyCapsule' object` (torch 1.13; 2.x: a pybind function record "is not
        pickleable"). Said what to do instead. (copy.copy and copy.deepcopy copy it: __copy__, __deepcopy__.)"""
        if self.profile is not None:
            raise _lib.RematError(
                "rematplan.Plan: a plan of a captured model cannot be pickled (it holds the model and its "
                "recorded step: aten ops and tensors). Pickle the applied model instead (torch.save("
                "rematplan.apply(model, plan)) runs the plan where it is loaded), keep the graph with "
                "plan.save_graph(path) (rematplan.plan_graph plans it again), or call rematplan.plan again in "
                "the new process")
        return super().__reduce_ex__(protocol)

    def __copy__(self):
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    def __deepcopy__(self, memo):
        """A copy of every field (a captured model's plan: of its model and profile too, which the copy's
        model runs: rematplan.apply(copy.model, copy))."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return new

    def __repr__(self):
        return ("rematplan.Plan(%s, budget %s, predicted peak %s of store-all %s, overhead %.1f%%, "
                "%d of %d nodes recomputed)" % (self.planner, human(self.budget_bytes), human(self.peak_bytes),
                                                human(self.store_all_bytes), 100 * self.overhead,
                                                self.n_recomputed(), len(self.modes)))

    def summary(self):
        lines = [repr(self)]
        if self.measured_peak is not None:
            lines.append("  measured peak %s (%.1f%% of the prediction)" % (
                human(self.measured_peak), 100.0 * self.measured_peak / max(self.peak_bytes, 1)))
        if getattr(self, "predicted_step_ms", None):
            lines.append("  predicted step %.1f ms (store-all measured %.1f ms)" % (
                self.predicted_step_ms, self.store_all_ms))
        note = self.profile.checkpoint_note() if self.profile is not None else ""
        if note:
            lines.append("  note: " + note)
        lines += ["  least budget that works: %s; %s" % (human(self.least_bytes), self.reproduce()),
                  "  planned in %.3f s (libremat %s)" % (self.plan_seconds, _lib.version())]
        by_mode = {}
        for nd, m in zip(self.graph["nodes"], self.modes):
            if m != "keep":
                by_mode.setdefault(m, []).append(nd["name"])
        for m, names in sorted(by_mode.items()):
            lines.append("  recomputed %s (%d): %s" % (m, len(names), ", ".join(names[:12]) +
                                                       (", ..." if len(names) > 12 else "")))
        return "\n".join(lines)

    def reproduce(self):
        """The remat command that gives libremat's answer this plan was made from."""
        return "reproduce: remat plan --graph FILE --memory-budget %d --json (FILE from plan.save_graph)" \
            % self.planner_budget

    def save_graph(self, path):
        """Writes the graph planned (remat's graph format) to path (a file name, or a text file open for
        writing, which is left open)."""
        if hasattr(path, "write"):
            json.dump(self.graph, path, indent=1)
            path.write("\n")
            return
        # open() takes an int as a file descriptor, and closes it: save_graph(1) wrote into stdout and
        # closed it, save_graph(True) too
        if not isinstance(path, (str, bytes, os.PathLike)):
            raise TypeError("Plan.save_graph: give a file name (str or os.PathLike) or a text file open for "
                            "writing, not a %s" % type(path).__name__)
        with open(path, "w") as f:
            self.save_graph(f)


def total_time(graph):
    return sum(nd["forward_time"] + (nd["backward_time"] if nd.get("backward", True) else 0)
               for nd in graph["nodes"])


class _Memo:
    """Answers kept per graph (a profile's graph is planned at many budgets), for the last few graphs:
    by the object, and while it equals a copy taken with its first answer (a graph dict the caller
    edits between calls is another graph: 0.1 ms to compare BART's 421 nodes, 5 ms to copy)."""

    def __init__(self, graphs=8):
        self.graphs, self.tables = graphs, {}

    def get(self, graph, key, make):
        entry = self.tables.get(id(graph))
        try:  # a graph that holds itself copies (deepcopy keeps cycles) but compares without end
            fresh = entry is None or entry[0] is not graph or entry[1] != graph
            if fresh:
                if len(self.tables) >= self.graphs:
                    self.tables.pop(next(iter(self.tables)))
                entry = self.tables[id(graph)] = (graph, copy.deepcopy(graph), {})
        except RecursionError:
            raise _lib.RematError("rematplan.plan_graph: the graph holds itself or is nested deeper than Python's "
                                  "stack; give remat's graph format (nodes and edges: dicts of numbers)") from None
        table = entry[2]
        if key not in table:
            if len(table) > 4096:
                table.clear()
            table[key] = make()
        return table[key]


_memo = _Memo()


def store_all(graph):
    """rm_plan_graph's answer at store-all (its store-all and least budget)."""
    def make():
        rc, top, msg = _lib.plan_graph(graph, -1)
        if rc != _lib.RM_OK:
            raise _lib.RematError("rm_plan_graph: " + msg)
        return top
    return _memo.get(graph, ("store-all",), make)


def planner_modes(graph, b):
    """rm_plan_graph at budget b (profile bytes): (each node's mode, the answer), or (None, answer)."""
    def make():
        # the least plan of the store-all answer as the start: libremat need not search the least
        # again (0.3-0.4 s of each 0.4 s call on T5's graph), and answers the same
        start = store_all(graph).get("least_plan")
        rc, ans, msg = _lib.plan_graph(graph if start is None else dict(graph, start=start), b)
        if rc not in (_lib.RM_OK, _lib.RM_ERR_BUDGET):
            raise _lib.RematError("rm_plan_graph: " + msg)
        if ans is None or not ans.get("feasible"):
            return None, ans
        names = {nd.get("name", str(i)): i for i, nd in enumerate(graph["nodes"])}
        modes = ["keep"] * len(graph["nodes"])
        for r in ans["recompute"]:
            modes[names[r["node"]] if r["node"] in names else int(r["node"])] = r["mode"]
        return modes, ans
    return _memo.get(graph, ("plan", b), make)


def checked_graph(graph):
    """graph as the planners read it, or RematError saying what is wrong: libremat's checks first
    (rm_plan_graph's message), then the keys rematplan reads beside them: names unique strings
    of at most 200 bytes (libremat answers by name), part_of a node's index. Where names or edges
    are absent (libremat's defaults: the node's index, no edges), a copy has them."""
    if not isinstance(graph, dict):
        raise _lib.RematError("rematplan.plan_graph: the graph is a %s, not a dict in remat's graph format "
                              "(json.load a graph file)" % type(graph).__name__)
    store_all(graph)
    nodes, names, copy = graph["nodes"], {}, "edges" not in graph
    for i, nd in enumerate(nodes):
        name, part = nd.get("name", str(i)), nd.get("part_of", i)
        copy |= "name" not in nd
        if not isinstance(name, str) or len(name.encode()) > 200:
            raise _lib.RematError("rematplan.plan_graph: node %d: name must be a string of at most 200 bytes "
                                  "(or absent)" % i)
        if name in names:
            raise _lib.RematError("rematplan.plan_graph: nodes %d and %d are both named %r: names must be unique "
                                  "(libremat answers by name)" % (names[name], i, name))
        names[name] = i
        if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < len(nodes):
            raise _lib.RematError("rematplan.plan_graph: node %d: part_of must be a node's index (0 to %d)"
                                  % (i, len(nodes) - 1))
    if not copy:
        return graph
    return dict(graph, edges=graph.get("edges", []),
                nodes=[nd if "name" in nd else dict(nd, name=str(i)) for i, nd in enumerate(nodes)])


def _check_number(name, v, positive=False):
    """plan_graph's numbers (scale, inner, store_all_bytes): finite, at least 0 (scale above it), bytes
    at most 2^60 (libremat's limit: above it a budget or store-all is no memory a step has)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError("rematplan.plan_graph: %s must be a number, not a %s" % (name, type(v).__name__))
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise ValueError("rematplan.plan_graph: %s must be a finite number %s 0, got %r"
                         % (name, "above" if positive else "at least", v))
    if name != "scale" and v > _lib.MAX_BYTES:
        raise ValueError("rematplan.plan_graph: %s is %r bytes: at most 2^60 (1EiB)" % (name, v))


def plan_graph(graph, budget, scale=1.0, inner=None, store_all_bytes=None, verbose=False):
    """The plan of a graph (dict in remat's format) under budget (bytes, fraction or string).
    scale: allocator bytes per profile byte; store_all_bytes: the measured store-all step (fractions
    are of it). inner: the budget (allocator bytes) the planner is given (default: the budget less
    MARGIN; plan() lowers it when a measured step exceeds it)."""
    t0 = time.perf_counter()
    _check_number("scale", scale, positive=True)
    for name, v in (("inner", inner), ("store_all_bytes", store_all_bytes)):
        if v is not None:
            _check_number(name, v)
    graph = _memo.get(graph, ("checked",), lambda: checked_graph(graph)) if isinstance(graph, dict) else \
        checked_graph(graph)
    top = store_all(graph)
    profile_all = top["store_all_bytes"]
    full = store_all_bytes if store_all_bytes is not None else int(round(profile_all * scale))
    if full > _lib.MAX_BYTES:
        raise ValueError("rematplan.plan_graph: scale %r makes store-all %.3g bytes: at most 2^60 (1EiB); scale is "
                         "allocator bytes per graph byte (about 1)" % (scale, full))
    want = budget_bytes(budget, full)
    if inner is not None and inner > want:  # the planner would plan above the budget: a peak over it
        raise ValueError("rematplan.plan_graph: inner (%d bytes) is above the budget (%d): it is the share of the "
                         "budget the planner is given; leave it out or lower it" % (inner, want))
    P = Plan()
    P.graph, P.store_all_bytes, P.budget_bytes, P.scale = graph, full, want, scale
    P.least_bytes = min(int(math.ceil(top["min_budget_bytes"] * scale / (1 - MARGIN))) + 1, full)
    if inner is None:
        inner = int(want * (1 - MARGIN))
    if want >= full and inner >= int(full * (1 - MARGIN)):  # store everything
        P.planner, P.modes, P.peak_bytes, P.recompute_time = "store-all", ["keep"] * len(graph["nodes"]), full, 0.0
        P.planner_budget, P.answer, P.overhead = profile_all, top, 0.0
        P.plan_seconds = time.perf_counter() - t0
        return P
    raw = max(int(inner / scale), 0)  # the planner's budget, in profile bytes
    modes, ans = planner_modes(graph, raw)
    if modes is None:
        # a budget at or above the least can fail only for an inner the caller lowered: say that one
        asked = "inner %s (%d bytes; budget %s)" % (human(inner), inner, human(want)) if want >= P.least_bytes \
            else "budget %s (%d bytes)" % (human(want), want)
        raise BudgetError("rematplan: %s cannot be met: the least budget that works is %s (%d bytes; store-all "
                          "%s); raise the %s to at least %d bytes"
                          % (asked, human(P.least_bytes), P.least_bytes, human(full),
                             "budget" if want < P.least_bytes else "inner (or leave it out)", P.least_bytes),
                          P.least_bytes, full, want)
    P.planner = "rm_plan_graph" + (" (eager)" if graph.get("eager") else "")
    P.modes, P.answer, P.planner_budget = modes, ans, raw
    P.peak_bytes = int(math.ceil(ans["peak_bytes"] * scale))
    P.recompute_time = ans["recompute_time"]
    P.overhead = P.recompute_time / max(total_time(graph), 1e-12)
    P.plan_seconds = time.perf_counter() - t0
    if verbose:
        print(P.summary())
    return P
