"""Planning: the profile's graph to libremat's planners, their plan to
checkpoint regions PyTorch can run, and that plan priced by libremat.

A graph plan (rm_plan_graph) gives every node a mode (keep, or recompute)
and a block. PyTorch's non-reentrant checkpoint can drop only what ops
*inside* a region save, and holds a region's inputs until its backward; so
a recomputed node becomes a region that reaches from it to the last op
whose backward reads it (docs/PYTORCH.md, "The mapping"):
  1. a recomputed node whose backward readers are not all in its block is
     kept (a region cannot cross blocks);
  2. regions are the intervals [node, last backward reader], merged;
  3. a node of a region is dropped only if nothing outside the region saves
     its output and no other region reads it; otherwise it is kept, the
     region split around it, and step 3 repeated (regions only shrink);
  4. ops with side effects other than BatchNorm's statistics (handled in
     the wrapper) are never inside a region.
The realized plan (dropped nodes "once", each region one block; edges from
a region's inputs to its first backward, which is when PyTorch lets them
go) is priced by libremat (rm_price_graph); where that exceeds the budget,
the planner is asked again at the budget less the excess, as remat's own
planner tightens when its arena exceeds its plan.

Chains (every op reads only the op before it) go to Rotor's dynamic program
(rm_plan_chain) instead, whose sequence nests: "Fck s, Fn .., Fn k-1" is a
region [s, k-1] whose recomputation follows the sub-sequence that reverses
[s, k-1], itself made of kept ops and nested regions.
"""
import math
import time

from . import _lib

PRICE_ITERATIONS = 8
# What PyTorch allocates beside the modelled tensors (autograd's bookkeeping, the regions' tokens,
# small scalars): plans are made for the budget less this share, and the least budget named is
# the least plan's peak plus it. Measured: 0.15% over a plan made at the full budget (tests).
MARGIN = 0.01
# What each checkpoint region holds besides its inputs: the CPU RNG state checkpoint stashes
# (torch.get_rng_state(), 5056 bytes), and a CUDA one on CUDA; set by plan() from the device.
REGION_BYTES = 5056
CROSS_BLOCKS = True
# torch >= 2.4: regions of graph plans keep ops through selective checkpointing policies (plan()
# sets it from the torch it runs with)
SAC = False
# chains: each stage also offered kept selectively (regions inside it), Rotor's Fsel
SELECTIVE = True


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
        return budget
    if isinstance(budget, float):
        if not (0 < budget <= 1):
            raise ValueError("budget: a fraction of store-all must be in (0, 1], got %r" % budget)
        return int(math.floor(budget * store_all))
    if isinstance(budget, str):
        b, f = _lib.parse_size(budget)
        return b if f == 0 else int(math.floor(f * store_all))
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
        self.pinned = [bool(nd.get("side_effect")) and not nd.get("batchnorm") for nd in graph["nodes"]]
        self.part_of = [nd.get("part_of", i) for i, nd in enumerate(graph["nodes"])]

    def is_chain(self):
        prod = [[] for _ in range(self.n)]
        for e in self.g["edges"]:
            prod[e["consumer"]].append(e["producer"])
        return self.n >= 2 and all(prod[i] == [i - 1] for i in range(1, self.n)) and not prod[0]

    def saves(self, i):
        """Whether node i's output is held by anyone's backward (else dropping it frees nothing)."""
        return bool(self.readers[i])


def realize(G, modes, blocks):
    """Regions (lists of consecutive node ids) PyTorch can run, from a planner's modes and blocks."""
    n = G.n
    drop = [modes[i] != "keep" and not G.pinned[i] and G.saves(i) for i in range(n)]
    if not CROSS_BLOCKS:
        for i in range(n):  # 1: a region cannot cross blocks
            if drop[i] and any(blocks[r] != blocks[i] for r in G.readers[i]):
                drop[i] = False
    # 2: intervals from a dropped node to its last backward reader, merged
    cover = [False] * n
    for i in range(n):
        if drop[i]:
            last = max(G.readers[i])
            for j in range(i, last + 1):
                cover[j] = True
    for i in range(n):
        if G.pinned[G.part_of[i]]:
            cover[i] = False
    # 3: shrink until every node of a region may be dropped
    while True:
        for i in range(n):  # an op's ".saved" node goes with it (re-running the op restores them)
            cover[i] = cover[G.part_of[i]]
        region = [-1] * n
        regions = []
        i = 0
        while i < n:
            if cover[i]:
                j = i
                while j + 1 < n and cover[j + 1] and (CROSS_BLOCKS or blocks[j + 1] == blocks[i]):
                    j += 1
                for k in range(i, j + 1):
                    region[k] = len(regions)
                regions.append(list(range(i, j + 1)))
                i = j + 1
            else:
                i += 1
        changed = False
        for i in range(n):
            if region[i] < 0:
                continue
            held = any(region[r] != region[i] for r in G.readers[i]) or \
                any(region[c] >= 0 and region[c] != region[i] for c in G.consumers[i])
            if held and cover[G.part_of[i]]:
                cover[G.part_of[i]] = False
                changed = True
        if not changed:
            break
    # a region whose nodes nobody saves frees nothing: dropped
    return [r for r in regions if any(G.saves(i) for i in r)]


def realize_sac(G, modes, blocks):
    """With selective checkpointing (torch >= 2.4): regions are the same intervals, never split; in
    a region an op the planner keeps, or whose output is held from outside the region, is saved
    by the policy (MUST_SAVE: its output cached, not recomputed), the rest recomputed.
    Returns (regions, saved ids)."""
    n = G.n
    drop = [modes[i] != "keep" and not G.pinned[G.part_of[i]] and G.saves(i) for i in range(n)]
    cover = [False] * n
    for i in range(n):
        if drop[i]:
            for j in range(i, max(G.readers[i]) + 1):
                cover[j] = True
    for i in range(n):
        if G.pinned[G.part_of[i]]:
            cover[i] = False
    for i in range(n):
        cover[i] = cover[G.part_of[i]]
    region, regions = [-1] * n, []
    i = 0
    while i < n:
        if cover[i]:
            j = i
            while j + 1 < n and cover[j + 1]:
                j += 1
            for k in range(i, j + 1):
                region[k] = len(regions)
            regions.append(list(range(i, j + 1)))
            i = j + 1
        else:
            i += 1
    saved = set()
    for i in range(n):
        o = G.part_of[i]
        if region[i] < 0:
            continue
        held = any(region[r] != region[o] for r in G.readers[o]) or \
            any(region[c] >= 0 and region[c] != region[o] for c in G.consumers[o])
        if modes[o] == "keep" or held:
            saved.add(i)
    regions = [r for r in regions if any(i not in saved and G.saves(i) for i in r)]
    kept = {i for r in regions for i in r}
    return regions, saved & kept


def price_regions(G, regions, saved=()):
    """rm_price_graph's answer for the regions as PyTorch runs them, plus the time of the ops
    PyTorch re-runs that libremat's schedule does not (re-run to restore what they save)."""
    n = G.n
    region = [-1] * n
    for k, r in enumerate(regions):
        for i in r:
            region[i] = k
    # an op's ".saved" node costs nothing to rebuild once the op re-runs (which the schedule does:
    # the ".saved" node reads it)
    nodes = [dict(nd, forward_time=0.0) if "part_of" in nd else nd for nd in G.g["nodes"]]
    graph = {"nodes": nodes, "edges": list(G.g["edges"])}
    for r in regions:
        # selective checkpointing caches a saved op's output until the region recomputes (at the
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
        inputs = set()
        for e in G.g["edges"]:
            if region[e["consumer"]] == region[r[0]] and (e["producer"] < r[0]):
                inputs.add(e["producer"])
        for p in sorted(inputs):  # PyTorch holds a region's inputs until its backward ends
            graph["edges"].append({"producer": p, "consumer": first_bwd, "backward_reads": True})
    modes = ["once" if region[i] >= 0 and i not in saved else "keep" for i in range(n)]
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
        if isinstance(it, tuple):
            yield from _flat(it[1])
        else:
            yield it


class Plan:
    """What plan() found: the regions to checkpoint and the predictions."""

    def n_regions(self):
        def count(items):
            return sum(1 + count(it[1]) for it in items if isinstance(it, tuple))
        return count(self.tree())

    def __repr__(self):
        return ("rematplan.Plan(%s, budget %s, predicted peak %s of store-all %s, overhead %.1f%%, %d regions)"
                % (self.planner, human(self.budget_bytes), human(self.peak_bytes), human(self.store_all_bytes),
                   100 * self.overhead, self.n_regions()))

    def summary(self):
        lines = [repr(self),
                 "  least budget that works: %s; %s" % (human(self.least_bytes), self.reproduce()),
                 "  planned in %.3f s (libremat %s)" % (self.plan_seconds, _lib.version())]
        names = [nd["name"] for nd in self.graph["nodes"] if "part_of" not in nd]
        nodes = self.graph["nodes"]

        def show(items, depth):
            for it in items:
                if isinstance(it, tuple):
                    ids = [i for i in _flat(it[1]) if "part_of" not in nodes[i]]
                    lines.append("  " * depth + "  region: %s .. %s (%d ops)" % (nodes[ids[0]]["name"],
                                 nodes[ids[-1]]["name"], len(ids)))
                    show(it[1], depth + 1)
        show(self.tree(), 0)
        del names
        return "\n".join(lines[:60] + (["  ..."] if len(lines) > 60 else []))

    def tree(self):
        """The regions as a tree over node ids: ("region", [ids or nested regions])."""
        if self.planner.startswith("chain") or self.planner == "store-all":
            return self.regions
        return [("region", list(r)) for r in self.regions]

    def reproduce(self):
        """The remat command that gives libremat's answer this plan was made from."""
        if self.planner.startswith("chain"):
            return "reproduce: remat plan --chain FILE --memory-budget %d --json (FILE from plan.save_chain)" \
                % self.planner_budget
        return "reproduce: remat plan --graph FILE --memory-budget %d --json (FILE from plan.save_graph)" \
            % self.planner_budget

    def save_chain(self, path):
        import json
        with open(path, "w") as f:
            json.dump(self.chain, f, indent=1)
            f.write("\n")

    def save_graph(self, path):
        import json
        with open(path, "w") as f:
            json.dump(self.graph, f, indent=1)
            f.write("\n")


def _total(graph):
    return sum(nd["forward_time"] + (nd["backward_time"] if nd.get("backward", True) else 0)
               for nd in graph["nodes"])


def plan_graph(graph, budget, verbose=False, inner=None):
    """The plan of a profiled graph (dict in remat's format) under budget (bytes, fraction or string).
    inner: the budget the planners are given (default: the budget less MARGIN; plan() lowers it
    when a measured step exceeds the budget)."""
    t0 = time.perf_counter()
    G = Graph(graph)
    rc, top, msg = _lib.plan_graph(graph, -1)
    if rc != _lib.RM_OK:
        raise _lib.RematError("rm_plan_graph: " + msg)
    store_all = top["store_all_bytes"]
    want = budget_bytes(budget, store_all)
    # Rotor's regions cannot leave out an op with side effects (other than BatchNorm's, which the
    # wrapper handles): such graphs go to the graph planner, which never recomputes them
    segs = segments(G) if not any(G.pinned) else None
    chain = segs is not None
    P = Plan()
    P.graph_module = P.members = P.model = P.profile = P.stages = P.chain = None
    P.sac_saved = set()
    P.graph, P.store_all_bytes, P.budget_bytes = graph, store_all, want
    P.planner = ("chain of %d stages (rm_plan_chain)" % len(segs)) if chain else "graph (rm_plan_graph)"
    if inner is None:
        inner = int(want * (1 - MARGIN))
    if want >= store_all and inner >= int(store_all * (1 - MARGIN)):  # store everything
        P.planner = "store-all"
        P.regions, P.peak_bytes, P.recompute_time, P.planner_budget, P.answer = [], store_all, 0.0, store_all, top
        P.least_bytes = top["min_budget_bytes"]
        P.overhead, P.plan_seconds = 0.0, time.perf_counter() - t0
        return P
    # A chain of small stages goes to Rotor's program alone; one with a large stage (a U-Net's
    # skips cross every cut but a few) to both planners, the faster plan that fits (or, when
    # none fits, the smaller least budget) winning; no chain at all to the graph planner.
    if chain:
        P.stages, P.chain = segs, chain_of(G, segs)
        res = _plan_chain(G, segs, inner, store_all, P.chain)
        fine = max(st["ab"] + st["bt"] for st in P.chain["stages"]) <= 0.25 * store_all
        if not fine:
            alt = _plan_regions(G, inner, store_all, top["min_budget_bytes"])
            if (alt[0] is not None and (res[0] is None or alt[2] < res[2])) or \
                    (alt[0] is None and res[0] is None and alt[4] < res[4]):
                res, P.stages, P.chain = alt, None, None
                P.planner = "graph (rm_plan_graph)"
    else:
        res = _plan_regions(G, inner, store_all, top["min_budget_bytes"])
    P.regions, P.peak_bytes, P.recompute_time, P.planner_budget, P.least_bytes, P.answer = res
    P.least_bytes = min(P.least_bytes, store_all)
    P.sac_saved = set(P.answer.get("sac_saved", ())) if (P.answer and P.planner.startswith("graph")) else set()
    P.overhead = P.recompute_time / max(_total(graph), 1e-12)
    P.plan_seconds = time.perf_counter() - t0
    if P.regions is None:
        raise BudgetError("rematplan: budget %s (%d bytes) cannot be met: the least budget that works is %s "
                          "(%d bytes; store-all %s); raise the budget to at least %d bytes"
                          % (human(want), want, human(P.least_bytes), P.least_bytes, human(store_all),
                             P.least_bytes), P.least_bytes, store_all, want)
    if verbose:
        print(P.summary())
    return P


def _attempt(G, b, sac=None):
    """The planner at budget b, realized and priced: (regions, peak, time, answer) or None."""
    rc, ans, _ = _lib.plan_graph(G.g, b)
    if rc != _lib.RM_OK or not ans.get("feasible"):
        return None
    names = {nd["name"]: i for i, nd in enumerate(G.g["nodes"])}
    modes = ["keep"] * G.n
    for r in ans["recompute"]:
        modes[names[r["node"]] if r["node"] in names else int(r["node"])] = r["mode"]
    blocks = [0] * G.n
    for k, (lo, hi) in enumerate(ans["blocks"]):
        for i in range(lo, hi + 1):
            blocks[i] = k
    if SAC if sac is None else sac:
        regions, saved = realize_sac(G, modes, blocks)
    else:
        regions, saved = realize(G, modes, blocks), set()
    peak, t = price_regions(G, regions, saved)
    ans["sac_saved"] = sorted(saved)
    return regions, peak, t, ans


def _plan_regions(G, want, store_all, planner_least):
    """Tighten the planner's budget until the realized plan fits `want`; the least budget that
    works is the smallest realized peak found from the planner's least budget up."""
    best = None
    b = want
    for _ in range(PRICE_ITERATIONS):
        if b < planner_least:
            break
        a = _attempt(G, b)
        if a is None:
            break
        regions, peak, t, ans = a
        if peak <= want:
            best = (regions, peak, t, b, ans)
            break
        b -= max(peak - want, 1)
    if best is None:  # bisect the planner's budget between its least and `want`
        lo, hi = planner_least, want
        for _ in range(12):
            if hi - lo <= max(want // 1000, 1):
                break
            mid = (lo + hi) // 2
            a = _attempt(G, mid)
            if a is not None and a[1] <= want:
                best = (a[0], a[1], a[2], mid, a[3])
                lo = mid
            else:
                hi = mid
    least, least_b = _least(G, planner_least, store_all)
    if best is None and least <= want:  # the plan the least budget was found with
        a = _attempt(G, least_b)
        best = (a[0], a[1], a[2], least_b, a[3])
    named = int(math.ceil(least / (1 - MARGIN))) + 1
    if best is None:
        return None, 0, 0.0, 0, named, None
    regions, peak, t, b, ans = best
    return regions, peak, t, b, named, ans


_least_cache = {}


def _least(G, planner_least, store_all):
    """The least budget that works: the realized peak of the planner's least plan, and of a few
    budgets above it (the realized peak is not monotonic in the planner's budget)."""
    key = id(G.g)
    if key in _least_cache and _least_cache[key][0] is G.g:
        return _least_cache[key][1]
    best = (store_all, store_all)
    for f in (0.0, 0.05, 0.15, 0.3):
        b = int(planner_least + f * (store_all - planner_least))
        a = _attempt(G, b)
        if a is not None and a[1] < best[0]:
            best = (a[1], b)
    _least_cache[key] = (G.g, best)
    return best


# ---- chains: Rotor's sequence to nested regions ---------------------------------------

def segments(G):
    """Cuts the op order where one tensor alone crosses that a backward after the cut reads (a
    residual stream between blocks, the activation between layers), made in the stage before; other
    tensors may cross if no backward after the cut reads them (a U-Net's skips, added in): the
    stages of a chain, as (first, last, crossing node, [side crossings]) ranges; None when fewer
    than 3 stages come out."""
    n = G.n
    last_use = list(range(n))
    for p in range(n):
        for c in G.consumers[p]:
            last_use[p] = max(last_use[p], c)
    cuts = []
    live = {}  # producer -> last consumer, for outputs still read later
    lo = 0
    for k in range(n - 1):
        live[k] = last_use[k]
        for p in [p for p, lu in live.items() if lu <= k]:
            del live[p]
        main = [p for p in live if any(r > k for r in G.readers[p])]
        side = [p for p in live if p not in main]
        # one tensor crosses that a later backward reads, made in this stage (else the next stage
        # would read it from two back)
        if len(main) == 1 and main[0] >= lo and G.part_of[k + 1] == k + 1 and \
                all(G.part_of[p] == p for p in side):
            cuts.append((k, main[0], side))
            lo = k + 1
    if len(cuts) < 2:
        return None
    out, lo, side = [], 0, []
    for k, x, nxt in cuts:
        out.append((lo, k, x, side))
        lo, side = k + 1, nxt
    out.append((lo, n - 1, None, side))
    return out


def _sub(G, lo, hi, forward_only=False):
    """The sub-graph of nodes lo..hi (ids shifted by lo - 1), the stage's input as node 0 of 0 bytes
    (the chain counts it). forward_only: no backward (every value freed after its last reader)."""
    nodes = [{"name": "input", "forward_time": 0, "backward_time": 0, "output_bytes": 0, "backward": False}]
    nodes += [dict(G.g["nodes"][i]) for i in range(lo, hi + 1)]
    for nd in nodes:
        if "part_of" in nd:
            nd["part_of"] = nd["part_of"] - lo + 1
        if forward_only:
            nd["backward"], nd["backward_reads_output"] = False, False
    edges = []
    for c in range(lo, hi + 1):
        for e in G.in_edges[c]:
            p = e["producer"]
            edges.append({"producer": p - lo + 1 if p >= lo else 0, "consumer": c - lo + 1,
                          "backward_reads": e.get("backward_reads", True)})
    nodes[-1]["gradient_bytes"] = nodes[-1].get("gradient_bytes", nodes[-1]["output_bytes"])
    return {"nodes": nodes, "edges": edges}


def _shape(sub, x):
    """What a stage's regions depend on, not its times: bytes, flags and edges (a GPT's 200 stages
    are of two shapes; their regions are searched once per shape)."""
    return (x, tuple((nd["output_bytes"], nd.get("gradient_bytes"), nd.get("backward", True),
                      nd.get("backward_reads_output", False), nd.get("part_of"), bool(nd.get("side_effect")))
                     for nd in sub["nodes"]),
            tuple((e["producer"], e["consumer"], e["backward_reads"]) for e in sub["edges"]))


def _price(G, nodes_range, forward_only=False):
    """rm_price_graph of the stage lo..hi storing everything."""
    sub = _sub(G, nodes_range[0], nodes_range[1], forward_only)
    rc, ans, msg = _lib.price_graph(sub, {"modes": ["keep"] * len(sub["nodes"])})
    if rc != _lib.RM_OK:
        raise _lib.RematError("rm_price_graph: " + msg)
    return ans


def _stage_regions(sub, S, x_sub):
    """Candidate regions inside one stage (sub-graph ids): the planner's plans of the stage alone at
    four budgets, realized, and each value dropped alone (a region to its last reader)."""
    rc, top, _ = _lib.plan_graph(sub, -1)
    out = []
    if rc != _lib.RM_OK:
        return out
    lo_b, hi_b = top["min_budget_bytes"], top["store_all_bytes"]
    for f in (0.8, 0.5, 0.2, 0.0):
        a_ = _attempt(S, int(lo_b + f * (hi_b - lo_b)), sac=False)
        if a_ is not None and a_[0]:
            out.append(a_[0])
    for v in range(1, S.n):
        if S.saves(v) and not S.pinned[S.part_of[v]] and "part_of" not in sub["nodes"][v]:
            regions = realize(S, ["once" if i == v else "keep" for i in range(S.n)], [0] * S.n)
            if regions:
                out.append(regions)
    uniq, seen = [], set()
    for r in out:
        if str(r) not in seen:
            seen.add(str(r))
            uniq.append(r)
    return uniq


_stage_cache = {}


def selective_option(G, lo, hi, x, a, ab, ub):
    """A second way to keep stage lo..hi (remat's Fsel): regions inside it (its output x never
    recomputed), priced by libremat with this stage's own times. Returns (ab_sel, ub_sel, bt_sel,
    regions in global ids) with the most bytes saved per time added, or None when none holds less."""
    sub = _sub(G, lo, hi)
    S = Graph(sub)
    S.pinned[x - lo + 1] = True
    key = _shape(sub, x - lo + 1)
    if key not in _stage_cache:
        if len(_stage_cache) > 4096:
            _stage_cache.clear()
        _stage_cache[key] = _stage_regions(sub, S, x - lo + 1)
    best = None
    for regions in _stage_cache[key]:
        dropped = {i for r in regions for i in r}
        keep = {i for i in range(1, S.n) if (S.saves(i) or i == x - lo + 1) and i not in dropped}
        for r in regions:  # a region's inputs are held until its backward
            for i in r:
                keep |= {e["producer"] for e in S.in_edges[i] if e["producer"] >= 1 and e["producer"] not in r}
        ab_sel = sum(sub["nodes"][i]["output_bytes"] for i in keep) + REGION_BYTES * len(regions)
        if ab_sel >= ab:
            continue
        peak, t = price_regions(S, regions)
        if t <= 0:
            continue
        score = (ab - ab_sel) / t
        if best is None or score > best[0]:
            best = (score, ab_sel, ub + t, max(peak - ab_sel, 0) + a,
                    [[i + lo - 1 for i in r] for r in regions])
    return best[1:] if best else None


def chain_of(G, segs):
    """The stages as remat's chain JSON: a = the stage input's bytes, ab = what a forward that keeps
    everything holds for the backward (its output included), bt = the backward's peak above them
    (the input's gradient included)."""
    nodes = G.g["nodes"]
    stages, sel_regions = [], {}
    for s, (lo, hi, x, side) in enumerate(segs):
        # a checkpointed stage holds its input, the tensors crossing into it for later stages (a
        # U-Net's skips: counted as held by every stage they cross) and the RNG state checkpoint stashes
        a = (nodes[segs[s - 1][2]]["output_bytes"] if s else 0) + REGION_BYTES + \
            sum(nodes[p]["output_bytes"] for p in side)
        ab = 0
        for i in range(lo, hi + 1):
            if G.saves(i) or i == x:
                ab += nodes[i]["output_bytes"]
        peak = _price(G, (lo, hi))["peak_bytes"]
        out = nodes[x]["output_bytes"] if x is not None else 0
        fpeak = _price(G, (lo, hi), forward_only=True)["peak_bytes"]
        st = {"uf": sum(nodes[i]["forward_time"] for i in range(lo, hi + 1)),
              "ub": sum(nodes[i]["backward_time"] for i in range(lo, hi + 1) if nodes[i].get("backward", True)),
              "a": a, "ab": ab, "ft": max(fpeak - out, 0), "bt": max(peak - ab, 0) + a}
        sel = selective_option(G, lo, hi, x, a, ab, st["ub"]) if SELECTIVE and x is not None else None
        if sel:
            st["ab_sel"], st["ub_sel"], st["bt_sel"] = sel[0], round(sel[1], 5), sel[2]
            sel_regions[s] = sel[3]
        stages.append(st)
    return {"stages": stages, "selective_regions": {str(k): v for k, v in sel_regions.items()}}


def parse_sequence(seq, n):
    """Rotor's sequence over n stages into a tree: a list of items, each a stage id (kept) or
    ("region", [items]) (a checkpointed range of stages, its recomputation the items inside)."""
    ops = [(x.split()[0], int(x.split()[1])) for x in seq]
    pos = [0]

    def take():
        op = ops[pos[0]]
        pos[0] += 1
        return op

    def reverse(s, e):
        if s > e:
            return []
        op, i = take()
        if i != s:
            raise ValueError("Rotor sequence: expected stage %d, got %s %d" % (s, op, i))
        if op == "L":
            return [s]
        if op in ("Fall", "Fsel"):
            items = [("sel", s) if op == "Fsel" else s] + reverse(s + 1, e)
            op2, j = take()
            if op2 != "B" or j != s:
                raise ValueError("Rotor sequence: expected B %d, got %s %d" % (s, op2, j))
            return items
        if op == "Fck":
            k = s + 1
            while pos[0] < len(ops) and ops[pos[0]] == ("Fn", k) and k <= e:
                pos[0] += 1
                k += 1
            rest = reverse(k, e)
            inner = reverse(s, k - 1)
            return [("region", inner)] + rest
        raise ValueError("Rotor sequence: unexpected %s %d" % (op, i))

    return reverse(0, n - 1)


def stage_tree_to_nodes(tree, segs, sel=None):
    out = []
    for it in tree:
        if isinstance(it, tuple) and it[0] == "sel":  # kept selectively: its own regions inside
            lo, hi = segs[it[1]][:2]
            regions = (sel or {}).get(str(it[1]), [])
            inside = {i for r in regions for i in r}
            i = lo
            while i <= hi:
                r = next((r for r in regions if r[0] == i), None)
                if r:
                    out.append(("region", list(r)))
                    i = r[-1] + 1
                else:
                    if i not in inside:
                        out.append(i)
                    i += 1
        elif isinstance(it, tuple):
            out.append(("region", stage_tree_to_nodes(it[1], segs, sel)))
        else:
            lo, hi = segs[it][:2]
            out.extend(range(lo, hi + 1))
    return out


def _chain_least(chain, least):
    """The least budget at which rm_plan_chain plans, from its own minimum (found in slots of the
    table: a plan exactly there can round out), raised in small steps until it plans, then with
    the margin added: the least a user's budget may be."""
    b = least
    for _ in range(40):
        rc, ans, _ = _lib.plan_chain(chain, b)
        if rc == _lib.RM_OK and ans.get("feasible"):
            break
        b = int(b * 1.005) + 1
    return int(math.ceil(b / (1 - MARGIN))) + 1


def _plan_chain(G, segs, want, store_all, chain):
    rc, ans, msg = _lib.plan_chain(chain, want)
    least = _chain_least(chain, ans["min_budget_bytes"]) if ans else store_all
    if rc == _lib.RM_ERR_BUDGET or not ans or not ans.get("feasible"):
        return None, 0, 0.0, want, least, ans
    if rc != _lib.RM_OK:
        raise _lib.RematError("rm_plan_chain: " + msg)
    tree = stage_tree_to_nodes(parse_sequence(ans["sequence"], len(segs)), segs, chain.get("selective_regions"))
    base = sum(st["uf"] + st["ub"] for st in chain["stages"])
    return tree, ans["peak_bytes"], ans["time"] - base, want, least, ans
