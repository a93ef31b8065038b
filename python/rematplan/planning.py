"""Planning: the step's graph to libremat's planners, their plans to
regions PyTorch can run, and those regions priced by libremat.

A region is what torch.utils.checkpoint can wrap without touching the
user's code: a module call, or a chain of calls fused (structure.py).
Non-reentrant checkpoint drops what the ops *inside* a region save and
holds the region's inputs until its backward (docs/PYTORCH.md, "The
mapping").

Two planners (no planning is done in Python):
  - the model has a chain of blocks (a run of calls, structure.py): Rotor's
    dynamic program (rm_plan_chain) over its stages, whose nested
    checkpointed ranges are fused regions; each stage may also be kept
    selectively (Rotor's Fsel): regions inside it, or on torch >= 2.4 the
    stage as one region whose selective policy saves what libremat keeps
    (chain.py);
  - any graph: the general-graph planner (rm_plan_graph); each node it
    recomputes becomes the smallest region that holds it and every op whose
    backward reads it (regions nested in others dropped); a region's node
    that an op outside it saves stays held; on torch >= 2.4 a region's
    nodes the planner keeps are saved by the selective policy. The regions
    are priced by libremat (rm_price_graph); where that exceeds the budget,
    the planner is asked again at the budget less the excess.
Bytes are the profile's, times `scale` (plan() sets it to the measured
store-all step over the profile's store-all, so that what is predicted is
what the allocator will count).
"""
import math
import time

from . import _lib

PRICE_ITERATIONS = 8
# What PyTorch allocates beside the modelled tensors: plans are made for the budget less this
# share, and the least budget named is the least plan's peak plus it.
MARGIN = 0.01
# What each checkpoint region holds besides its inputs: the RNG states checkpoint stashes
# (torch.get_rng_state(): 5056 bytes; plan() adds a CUDA device's).
REGION_BYTES = 5056
# torch >= 2.4: regions may keep ops through selective checkpointing policies (plan() sets it)
SAC = False


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
    if isinstance(budget, bool):
        raise TypeError("budget: bytes, a fraction or a string such as '3GiB' or '50%'")
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


class Graph:
    """The profile's remat graph with the adjacency the mapping needs."""

    def __init__(self, graph):
        self.g = graph
        self.n = len(graph["nodes"])
        self.readers = [[] for _ in range(self.n)]    # backward readers of each node's output
        self.consumers = [[] for _ in range(self.n)]  # every consumer
        self.in_edges = [[] for _ in range(self.n)]   # edges by consumer
        for e in graph["edges"]:
            self.in_edges[e["consumer"]].append(e)
            p, c = e["producer"], e["consumer"]
            self.consumers[p].append(c)
            if e.get("backward_reads", True):
                self.readers[p].append(c)
        for i, nd in enumerate(graph["nodes"]):
            if nd.get("backward_reads_output"):
                self.readers[i].append(i)
        self.part_of = [nd.get("part_of", i) for i, nd in enumerate(graph["nodes"])]

    def saves(self, i):
        """Whether node i's output is held by anyone's backward (else dropping it frees nothing)."""
        return bool(self.readers[i])

    def last_reader(self, i):
        return max(self.readers[i] + [i])


class Region:
    """A checkpointed region: `calls` (module calls; a fused chain's in order, empty for a graph
    with no model), `items` its body (call ids run plainly, or nested Regions), `nodes` the node
    ids it runs, `sac` the node ids its selective policy saves (None: plain checkpoint)."""

    def __init__(self, calls, items, nodes, sac=None):
        self.calls, self.items, self.nodes, self.sac = list(calls), list(items), list(nodes), sac

    def __repr__(self):
        return "Region(calls=%s, nodes=%d..%d%s)" % (self.calls, self.nodes[0], self.nodes[-1],
                                                     ", sac %d" % len(self.sac) if self.sac else "")


class Cover:
    """Which region may hold a node interval [i, j]: with a model, the smallest that PyTorch can
    run (a module call, or a chain's calls fused: structure.py), made of calls in `within` (None:
    any); without one (a graph file), the interval itself. Node ids are shifted by `offset`."""

    def __init__(self, structure=None, within=None, offset=0):
        self.s, self.offset = structure, offset
        self.key = (id(structure), tuple(within) if within is not None else None, offset)
        self.by_node = {}
        if structure is None:
            return
        for calls in structure.regions(within):
            lo, hi = structure.span(calls)
            for k in range(lo, hi + 1):
                self.by_node.setdefault(k - offset, []).append((hi - lo, lo - offset, hi - offset, calls))
        for v in self.by_node.values():
            v.sort(key=lambda r: r[0])

    def __call__(self, i, j):
        """(lo, hi, calls or None) of the smallest region holding nodes i..j, or None."""
        if self.s is None:
            return (i, j, None)
        for _, lo, hi, calls in self.by_node.get(i, ()):
            if hi >= j:
                return (lo, hi, calls)
        return None

    def partial(self, calls):
        """Nodes of a region whose ops also ran outside it (an in-place op of its parent)."""
        if self.s is None or not calls:
            return set()
        return self.s.partial(calls, self.offset)


def realize(G, modes, cover, sac=False):
    """Regions PyTorch can run from a planner's modes: [(lo, hi, calls)], the nodes held inside
    them (saved from outside, or partly run outside: kept, not dropped) and, with sac, the nodes
    the selective policy saves (the planner keeps them)."""
    spans = []
    for i in range(G.n):
        if modes[i] != "keep" and G.saves(i) and not G.g["nodes"][G.part_of[i]].get("pinned"):
            r = cover(G.part_of[i], G.last_reader(i))
            if r is not None:
                spans.append(r)
    spans.sort(key=lambda r: (r[0], -r[1]))
    regions = []
    for lo, hi, c in spans:  # nested ones go, overlapping ones become the smallest holding both
        if regions and lo <= regions[-1][1]:
            plo, phi, pc = regions[-1]
            if hi > phi:
                both = cover(plo, hi)
                regions[-1] = both if both is not None else max((plo, phi, pc), (lo, hi, c),
                                                                key=lambda r: r[1] - r[0])
        else:
            regions.append((lo, hi, c))
    return settle(G, regions, modes, cover, sac)


def settle(G, regions, modes, cover, sac=False):
    """What regions [(lo, hi, calls)] hold: the regions that drop something, the nodes held inside
    them, the nodes their selective policies save."""
    held, saved, out = set(), set(), []
    for lo, hi, c in regions:
        mine = set(range(lo, hi + 1))
        h = {i for i in mine if any(r not in mine for r in G.readers[i])} | cover.partial(c)
        s = {i for i in mine - h if modes[G.part_of[i]] == "keep" and _sac_ok(G, i)} if sac else set()
        if any(G.saves(i) for i in mine - h - s):  # it drops something
            out.append((lo, hi, c))
            held |= h
            saved |= s
    return out, held, saved


def _sac_ok(G, i):
    """The selective policy may save node i's op (not one that writes in place: SAC would replay
    the write on its cached output)."""
    return not G.g["nodes"][G.part_of[i]].get("inplace")


def price_regions(G, regions, saved=(), held=()):
    """rm_price_graph's answer for regions (lists of node ids) as PyTorch runs them: (peak bytes,
    recomputation time), the time of the ops PyTorch re-runs beyond libremat's schedule included."""
    n = G.n
    region = [-1] * n
    for k, r in enumerate(regions):
        for i in r:
            region[i] = k
    keep = set(saved) | set(held)
    # an op's ".saved" node costs nothing to rebuild once the op re-runs
    nodes = [dict(nd, forward_time=0.0) if "part_of" in nd else nd for nd in G.g["nodes"]]
    graph = {"nodes": nodes, "edges": list(G.g["edges"])}
    for r in regions:
        # the selective policy caches a saved op's output until the region recomputes (at the
        # backward of its last op)
        last_bwd = next((i for i in reversed(r) if G.g["nodes"][i].get("backward", True)), None)
        for i in r:
            if i in saved and last_bwd is not None:
                if i < last_bwd:
                    graph["edges"].append({"producer": i, "consumer": last_bwd, "backward_reads": True})
                elif i == last_bwd:
                    nodes[i] = dict(nodes[i], backward_reads_output=True)
        first_bwd = next((i for i in r if G.g["nodes"][i].get("backward", True)), None)
        if first_bwd is None:
            continue
        inputs = {e["producer"] for i in r for e in G.in_edges[i] if e["producer"] < r[0]}
        for p in sorted(inputs):  # PyTorch holds a region's inputs until its backward ends
            graph["edges"].append({"producer": p, "consumer": first_bwd, "backward_reads": True})
    modes = ["once" if region[i] >= 0 and i not in keep else "keep" for i in range(n)]
    blocks, b = [], -1
    for i in range(n):
        if i == 0 or region[i] < 0 or region[i] != region[i - 1]:
            b += 1
        blocks.append(b)
    rc, ans, msg = _lib.price_graph(graph, {"modes": modes, "blocks": blocks})
    if rc != _lib.RM_OK:
        raise _lib.RematError("rm_price_graph: " + msg)
    recomputed = {int(s.split()[1]) for s in ans["schedule"] if s.startswith("R ")}
    extra = sum(nodes[i]["forward_time"] for r in regions for i in r if i not in recomputed and i not in saved)
    return ans["peak_bytes"] + REGION_BYTES * len(regions), ans["recompute_time"] + extra


def _flat(items):
    for it in items:
        if isinstance(it, Region):
            yield from _flat(it.items)
        else:
            yield it


class Plan:
    """What plan() found: the regions to checkpoint and the predictions (bytes as the allocator
    counts them: the profile's times `scale`)."""

    def n_regions(self):
        def count(regions):
            return sum(1 + count([i for i in r.items if isinstance(i, Region)]) for r in regions)
        return count(self.regions)

    def __repr__(self):
        return ("rematplan.Plan(%s, budget %s, predicted peak %s of store-all %s, overhead %.1f%%, %d regions)"
                % (self.planner, human(self.budget_bytes), human(self.peak_bytes), human(self.store_all_bytes),
                   100 * self.overhead, self.n_regions()))

    def summary(self):
        lines = [repr(self)]
        if self.measured_peak is not None:
            lines.append("  measured peak %s (%.1f%% of the prediction)" % (
                human(self.measured_peak), 100.0 * self.measured_peak / max(self.peak_bytes, 1)))
        lines += ["  least budget that works: %s; %s" % (human(self.least_bytes), self.reproduce()),
                  "  planned in %.3f s (libremat %s)" % (self.plan_seconds, _lib.version())]
        names = self.call_names or {}

        def show(regions, depth):
            for r in regions:
                what = " + ".join(names.get(c, "?") for c in r.calls) if r.calls else \
                    "%s .. %s" % (self.graph["nodes"][r.nodes[0]]["name"], self.graph["nodes"][r.nodes[-1]]["name"])
                lines.append("  " * depth + "  region: %s (%d nodes%s)" % (
                    what, len(r.nodes), ", selective: %d saved" % len(r.sac) if r.sac else ""))
                show([i for i in r.items if isinstance(i, Region)], depth + 1)
        show(self.regions, 0)
        return "\n".join(lines[:60] + (["  ..."] if len(lines) > 60 else []))

    def reproduce(self):
        """The remat command that gives libremat's answer this plan was made from."""
        if self.planner.startswith("chain"):
            return "reproduce: remat plan --chain FILE --memory-budget %d --json (FILE from plan.save_chain)" \
                % self.planner_budget
        return "reproduce: remat plan --graph FILE --memory-budget %d --json (FILE from plan.save_graph)" \
            % self.planner_budget

    def save_chain(self, path):
        _save(self.chain, path)

    def save_graph(self, path):
        _save(self.graph, path)


def _save(obj, path):
    import json
    if obj is None:
        raise ValueError("rematplan: this plan has no such file (it was not planned that way)")
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


def total_time(graph):
    return sum(nd["forward_time"] + (nd["backward_time"] if nd.get("backward", True) else 0)
               for nd in graph["nodes"])


class _Memo:
    """Answers kept per graph object (a profile's graph is planned at many budgets), for the last
    few graphs."""

    def __init__(self, graphs=8):
        self.graphs, self.tables = graphs, {}

    def get(self, graph, key, make):
        entry = self.tables.get(id(graph))
        if entry is None or entry[0] is not graph:
            if len(self.tables) >= self.graphs:
                self.tables.pop(next(iter(self.tables)))
            entry = self.tables[id(graph)] = (graph, {})
        table = entry[1]
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


def plan_graph(graph, budget, structure=None, scale=1.0, inner=None, store_all_bytes=None, verbose=False):
    """The plan of a graph (dict in remat's format) under budget (bytes, fraction or string).
    structure: the module calls (a captured model), else regions are node intervals (a graph file:
    planned and priced, not applied). scale: allocator bytes per profile byte; store_all_bytes: the
    measured store-all step (fractions are of it). inner: the budget (allocator bytes) the planners
    are given (default: the budget less MARGIN; plan() lowers it when a measured step exceeds it)."""
    from . import chain as chain_mod
    t0 = time.perf_counter()
    graph = _memo.get(graph, ("checked",), lambda: checked_graph(graph)) if isinstance(graph, dict) else \
        checked_graph(graph)
    G = Graph(graph)
    top = store_all(graph)
    profile_all = top["store_all_bytes"]
    full = store_all_bytes if store_all_bytes is not None else int(round(profile_all * scale))
    want = budget_bytes(budget, full)
    P = Plan()
    P.graph, P.store_all_bytes, P.budget_bytes, P.scale = graph, full, want, scale
    P.chain = P.answer = None
    P.measured_peak = None
    P.call_names = {c.idx: c.path for c in structure.calls} if structure is not None else None
    if inner is None:
        inner = int(want * (1 - MARGIN))
    raw = int(inner / scale)  # the planners' budget, in profile bytes
    if want >= full and inner >= int(full * (1 - MARGIN)):  # store everything
        P.planner, P.regions, P.peak_bytes, P.recompute_time, P.planner_budget = "store-all", [], full, 0.0, profile_all
        P.least_bytes, P.answer = min(int(top["min_budget_bytes"] * scale), full), top
        P.overhead, P.plan_seconds = 0.0, time.perf_counter() - t0
        return P
    tried = []
    prepared = _memo.get(graph, ("chain", id(structure), SAC),
                         lambda: chain_mod.prepare(G, structure, SAC)) if structure is not None else None
    if prepared is not None:
        tried.append(("chain of %d stages (rm_plan_chain)" % len(prepared[0][0]), chain_mod.plan(prepared, raw)))
    if prepared is None or prepared[3]:
        tried.append(("graph (rm_plan_graph)", _plan_regions(G, raw, profile_all, top["min_budget_bytes"],
                                                             Cover(structure))))
    name, res = _best(tried)
    P.planner = name
    P.regions, peak, t, P.planner_budget, least, P.answer = res[:6]
    P.chain = res[6] if len(res) > 6 else None
    P.peak_bytes = int(math.ceil(peak * scale))
    P.least_bytes = min(int(math.ceil(least * scale / (1 - MARGIN))) + 1, full)
    P.recompute_time = t
    P.overhead = t / max(total_time(graph), 1e-12)
    P.plan_seconds = time.perf_counter() - t0
    if P.regions is None:
        raise BudgetError("rematplan: budget %s (%d bytes) cannot be met: the least budget that works is %s "
                          "(%d bytes; store-all %s); raise the budget to at least %d bytes"
                          % (human(want), want, human(P.least_bytes), P.least_bytes, human(full),
                             P.least_bytes), P.least_bytes, full, want)
    if verbose:
        print(P.summary())
    return P


def _best(tried):
    """The fastest plan that fits; when none does, the one with the smaller least budget."""
    fits = [(n, r) for n, r in tried if r[0] is not None]
    if fits:
        return min(fits, key=lambda nr: nr[1][2])
    return min(tried, key=lambda nr: nr[1][4])


def _attempt(G, b, cover, sac=None):
    """The graph planner at budget b, realized and priced: (regions, peak, time, answer) or None."""
    sac = SAC if sac is None else sac
    return _memo.get(G.g, ("attempt", b, cover.key, sac), lambda: _attempt_now(G, b, cover, sac))


def planner_modes(G, b):
    """rm_plan_graph at budget b: (each node's mode, the answer), or (None, None) when infeasible."""
    rc, ans, _ = _lib.plan_graph(G.g, b)
    if rc != _lib.RM_OK or not ans.get("feasible"):
        return None, None
    names = {nd["name"]: i for i, nd in enumerate(G.g["nodes"])}
    modes = ["keep"] * G.n
    for r in ans["recompute"]:
        modes[names[r["node"]] if r["node"] in names else int(r["node"])] = r["mode"]
    return modes, ans


def _attempt_now(G, b, cover, sac):
    modes, ans = planner_modes(G, b)
    if modes is None:
        return None
    spans, held, saved = realize(G, modes, cover, sac)
    lists = [list(range(lo, hi + 1)) for lo, hi, _ in spans]
    peak, t = price_regions(G, lists, saved, held)
    regions = [Region(c or [], c or [], r, sorted(saved & set(r)) if saved & set(r) else None)
               for (lo, hi, c), r in zip(spans, lists)]
    return regions, peak, t, ans


def _plan_regions(G, want, store_all_b, planner_least, cover):
    """Tighten the planner's budget until the realized plan fits `want`; the least budget that
    works is the smallest realized peak found from the planner's least budget up."""
    best = None
    b = want
    for _ in range(PRICE_ITERATIONS):
        if b < planner_least:
            break
        a = _attempt(G, b, cover)
        if a is None:
            break
        if a[1] <= want:
            best = (a[0], a[1], a[2], b, a[3])
            break
        b -= max(a[1] - want, 1)
    if best is None:  # bisect the planner's budget between its least and `want`
        lo, hi = planner_least, want
        for _ in range(12):
            if hi - lo <= max(want // 1000, 1):
                break
            mid = (lo + hi) // 2
            a = _attempt(G, mid, cover)
            if a is not None and a[1] <= want:
                best, lo = (a[0], a[1], a[2], mid, a[3]), mid
            else:
                hi = mid
    least, least_b = _least(G, planner_least, store_all_b, cover)
    if best is None and least <= want:  # the plan the least budget was found with
        a = _attempt(G, least_b, cover)
        best = (a[0], a[1], a[2], least_b, a[3])
    if best is None:
        return None, 0, 0.0, 0, least, None
    regions, peak, t, b, ans = best
    return regions, peak, t, b, least, ans


def _least(G, planner_least, store_all_b, cover):
    """The least budget that works: the realized peak of the planner's least plan, and of a few
    budgets above it (the realized peak is not monotonic in the planner's budget)."""
    return _memo.get(G.g, ("least", cover.key, SAC), lambda: _least_now(G, planner_least, store_all_b, cover))


def _least_now(G, planner_least, store_all_b, cover):
    best = (store_all_b, store_all_b)
    for f in (0.0, 0.05, 0.15, 0.3, 0.5):
        b = int(planner_least + f * (store_all_b - planner_least))
        a = _attempt(G, b, cover)
        if a is not None and a[1] < best[0]:
            best = (a[1], b)
    return best
