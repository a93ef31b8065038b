"""A model's chain of blocks planned by Rotor's dynamic program
(rm_plan_chain), and its plan as fused checkpoint regions.

The chain is the run of calls (structure.py) that holds the most
activation memory: nanoGPT's dropout, blocks, final LayerNorm and head;
ResNet's stem and bottlenecks; transformers' decoder layers. What runs
before it (embeddings, masks, position embeddings) is held for the whole
step and counted in the chain's input (a of stage 0); what runs after it
(the head's loss) is the chain's loss stage, never checkpointed. Any range
of consecutive stages is a region: its first call runs the calls of the
range (the ones after it hand its output on), so Rotor's nesting maps onto
nested checkpoints exactly (docs/PYTORCH.md, "The mapping").

Per stage (the chain format of docs/RECOMPUTE.md): a = its input's bytes
and the RNG state a checkpoint stashes, ab = what a forward that keeps
everything holds (the outputs its backward reads, its own output), ft and
bt = the forward's transient and the backward's peak above them, priced by
libremat (rm_price_graph) on the stage's nodes. And a second way to keep
the stage, ab_sel/ub_sel/bt_sel (Rotor's Fsel): regions inside it (calls
within its calls), or on torch >= 2.4 the stage as one region whose
selective policy saves what libremat's graph planner keeps; of the
candidates, the one that frees the most bytes per unit of time added.
"""
from . import _lib
from . import planning as pl

SELECTIVE = True


def _sub(G, lo, hi, forward_only=False):
    """The sub-graph of nodes lo..hi (ids shifted by lo - 1), what it reads from before as node 0 of
    0 bytes (the chain counts it). forward_only: no backward (every value freed after its last
    reader)."""
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


def _price(G, lo, hi, forward_only=False):
    """rm_price_graph of nodes lo..hi storing everything."""
    sub = _sub(G, lo, hi, forward_only)
    rc, ans, msg = _lib.price_graph(sub, {"modes": ["keep"] * len(sub["nodes"])})
    if rc != _lib.RM_OK:
        raise _lib.RematError("rm_price_graph: " + msg)
    return ans


def chain_of(G, S, stages, long_lived, sac):
    """The stages as remat's chain JSON (with each stage's ck_last) and each stage's selective
    option (or None). Tensors held for the whole step (long_lived) are counted once, in the
    chain's input, and nowhere else."""
    nodes = G.g["nodes"]
    GL = _without(G, long_lived)
    held = sum(nodes[i]["output_bytes"] for i in long_lived)
    out, options = [], []
    for s, st in enumerate(stages):
        prev = stages[s - 1].x if s else None
        x_in = held if s == 0 else (0 if prev is None or prev in long_lived else nodes[prev]["output_bytes"])
        a = x_in + pl.REGION_BYTES
        last = s == len(stages) - 1
        out_b = 0 if last or st.x is None or st.x in long_lived else nodes[st.x]["output_bytes"]
        ab = sum(GL.g["nodes"][i]["output_bytes"] for i in range(st.lo, st.hi + 1) if G.saves(i) or i == st.x)
        peak = _price(GL, st.lo, st.hi)["peak_bytes"]
        fpeak = _price(GL, st.lo, st.hi, forward_only=True)["peak_bytes"]
        row = {"uf": sum(nodes[i]["forward_time"] for i in range(st.lo, st.hi + 1)),
               "ub": sum(nodes[i]["backward_time"] for i in range(st.lo, st.hi + 1) if nodes[i].get("backward", True)),
               "a": a, "ab": ab, "ft": max(fpeak - out_b, 0), "bt": max(peak - ab, 0) + a}
        if last and x_in and s and prev in nodes[G.n - 1].get("holds", ()):
            # the loss node holds its input (the forward returned the logits): those bytes are in
            # its ab already, so the input is not counted again (its gradient stays in bt)
            row["a"] = a - x_in
        if not last:
            row["ck_last"] = st.ck_last
        opt = None if last or not SELECTIVE else selective_option(GL, S, st, a, ab, row["ub"], sac)
        if opt:
            row["ab_sel"], row["ub_sel"], row["bt_sel"] = opt["ab"], round(opt["ub"], 5), opt["bt"]
        options.append(opt)
        out.append(row)
    return {"stages": out}, options


def _without(G, ids):
    """G with the outputs of nodes `ids` at 0 bytes (they are counted elsewhere)."""
    if not ids:
        return G
    nodes = [dict(nd, output_bytes=0) if i in ids else nd for i, nd in enumerate(G.g["nodes"])]
    return pl.Graph({"nodes": nodes, "edges": G.g["edges"]})


# ---- the selective option of a stage ------------------------------------------------------

_cache = {}


def selective_option(G, S, st, a, ab, ub, sac):
    """Regions inside the stage (or the stage under a selective policy), the candidate that frees
    the most bytes per unit of time added: {"ab", "ub", "bt", "kind", "regions", "saved"} or None."""
    sub = _sub(G, st.lo, st.hi)
    SG = pl.Graph(sub)
    off = st.lo - 1
    inner = S.inside(st.lo, st.hi, exclude=st.calls)
    key = (_shape(sub), tuple((S.nodes[d][0] - off, S.nodes[d][1] - off) for d in inner), sac)
    if key not in _cache:
        if len(_cache) > 4096:
            _cache.clear()
        _cache[key] = _candidates(SG, S, inner, off, len(st.calls) > 0 and sac)
    best = None
    for kind, spans, saved, held in _cache[key]:
        dropped = {i for lo, hi, _ in spans for i in range(lo, hi + 1)} - saved - held
        keep = {i for i in range(1, SG.n) if (SG.saves(i) or i == SG.n - 1) and i not in dropped}
        for lo, hi, _ in spans:  # a region's inputs are held until its backward
            keep |= {e["producer"] for i in range(lo, hi + 1) for e in SG.in_edges[i]
                     if 1 <= e["producer"] < lo}
        ab_sel = sum(sub["nodes"][i]["output_bytes"] for i in keep) + pl.REGION_BYTES * len(spans)
        if ab_sel >= ab:
            continue
        peak, t = pl.price_regions(SG, [list(range(lo, hi + 1)) for lo, hi, _ in spans], saved, held)
        if t <= 0:
            continue
        score = (ab - ab_sel) / t
        if best is None or score > best[0]:
            regions = [([inner[i] for i in k] if k is not None else st.calls, lo + off, hi + off)
                       for lo, hi, k in spans]
            best = (score, {"ab": ab_sel, "ub": ub + t, "bt": max(peak - ab_sel, 0) + a, "kind": kind,
                            "regions": regions, "saved": {i + off for i in saved}})
    return best[1] if best else None


def _shape(sub):
    """What a stage's regions depend on, not its times: bytes, flags and edges."""
    return (tuple((nd["output_bytes"], nd.get("gradient_bytes"), nd.get("backward", True),
                   nd.get("backward_reads_output", False), nd.get("part_of"), nd.get("inplace", False))
                  for nd in sub["nodes"]),
            tuple((e["producer"], e["consumer"], e["backward_reads"]) for e in sub["edges"]))


def _candidates(SG, S, inner, off, sac):
    """Candidate region sets of one stage, in sub-graph ids: (kind, [(lo, hi, index into inner or
    None: the stage itself)], saved, held)."""
    out, seen = [], set()

    def add(kind, spans, saved, held):
        k = (tuple(spans), frozenset(saved))
        if spans and k not in seen:
            seen.add(k)
            out.append((kind, spans, saved, held))
    index = {c: k for k, c in enumerate(inner)}

    def rel(calls):  # a region's calls as positions in `inner` (the same for stages of one shape)
        return tuple(index[c] for c in calls)
    cover = pl.Cover(S, within=inner, offset=off)
    rc, top, _ = _lib.plan_graph(SG.g, -1)
    budgets = []
    if rc == _lib.RM_OK:
        lo_b, hi_b = top["min_budget_bytes"], top["store_all_bytes"]
        budgets = [int(lo_b + f * (hi_b - lo_b)) for f in (0.8, 0.5, 0.2, 0.0)]
    for b in budgets:
        modes = pl.planner_modes(SG, b)[0]
        if modes is None:
            continue
        spans, held, _ = pl.realize(SG, modes, cover)
        add("regions", [(lo, hi, rel(c)) for lo, hi, c in spans], set(), held | {SG.n - 1})
        if sac:
            whole, held_s, saved = pl.realize(SG, [m if i else "keep" for i, m in enumerate(modes)],
                                              _WholeStage(SG.n), True)
            add("sac", [(1, SG.n - 1, None)] if whole else [], saved, held_s | {SG.n - 1})
    for calls in S.regions(inner):  # each region alone
        lo, hi = S.span(calls)
        spans, held, _ = pl.settle(SG, [(lo - off, hi - off, calls)], ["once"] * SG.n, cover)
        add("regions", [(a, b, rel(k)) for a, b, k in spans], set(), held | {SG.n - 1})
    return out


class _WholeStage:
    """A cover that holds every interval in the stage itself (its nodes 1..n-1)."""

    def __init__(self, n):
        self.n = n

    def __call__(self, i, j):
        return (1, self.n - 1, None)

    def partial(self, c):
        return set()


# ---- Rotor's sequence to regions ----------------------------------------------------------

def parse_sequence(seq, n):
    """Rotor's sequence over n stages into a tree: a list of items, each a stage id (kept),
    ("sel", s) (kept selectively) or ("region", [items]) (a checkpointed range of stages, its
    recomputation the items inside)."""
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


def to_regions(tree, stages, options):
    """The tree as items (call ids run plainly, Regions), and the regions inside stages kept
    selectively (descendants' regions, which apply wherever the stage runs)."""
    inside = []

    def convert(items):
        out = []
        for it in items:
            if isinstance(it, int):
                out.extend(stages[it].calls)
            elif it[0] == "sel":
                st, opt = stages[it[1]], options[it[1]]
                if opt is None:  # (the chain format copies Fall into stages without an option)
                    out.extend(st.calls)
                elif opt["kind"] == "sac":
                    out.append(pl.Region(st.calls, st.calls, range(st.lo, st.hi + 1), sorted(opt["saved"])))
                else:
                    out.extend(st.calls)
                    inside.extend(pl.Region(calls, calls, range(lo, hi + 1)) for calls, lo, hi in opt["regions"])
            else:
                body = convert(it[1])
                covered = sorted(_stages_in(it[1]))
                calls = [c for k in covered for c in stages[k].calls]
                out.append(pl.Region(calls, body, range(stages[covered[0]].lo, stages[covered[-1]].hi + 1)))
        return out
    top = convert(tree)
    return [r for r in top if isinstance(r, pl.Region)] + inside


def _stages_in(items):
    for it in items:
        if isinstance(it, int):
            yield it
        elif it[0] == "sel":
            yield it[1]
        else:
            yield from _stages_in(it[1])


def _chain_least(chain, least):
    """The least budget at which rm_plan_chain plans, from its own minimum (found in slots of the
    table: a plan exactly there can round out), raised in small steps until it plans."""
    b = least
    for _ in range(40):
        rc, ans, _ = _lib.plan_chain(chain, b)
        if rc == _lib.RM_OK and ans.get("feasible"):
            break
        b = int(b * 1.005) + 1
    return b


def prepare(G, S, sac):
    """The model's chain, ready to plan at any budget: (stages and long-lived nodes, chain JSON,
    each stage's selective option, whether the graph planner should be tried too), or None."""
    from . import stages as stages_mod
    built = stages_mod.build(G, S)
    if built is None:
        return None
    chain, options = chain_of(G, S, built[0], built[1], sac)
    return built, chain, options, coarse(G, built[0])


def plan(prepared, budget):
    """Rotor's plan of the chain at budget (profile bytes): (regions or None, peak, recompute time,
    planner budget, least budget, answer, chain JSON)."""
    (stages, _), chain, options, _ = prepared
    rc, ans, msg = _lib.plan_chain(chain, budget)
    if rc not in (_lib.RM_OK, _lib.RM_ERR_BUDGET) or not ans:
        raise _lib.RematError("rm_plan_chain: " + msg)
    least = _chain_least(chain, ans["min_budget_bytes"])
    if rc == _lib.RM_ERR_BUDGET or not ans.get("feasible"):
        return None, 0, 0.0, budget, least, ans, chain
    tree = parse_sequence(ans["sequence"], len(stages))
    regions = to_regions(tree, stages, options)
    base = sum(st["uf"] + st["ub"] for st in chain["stages"])
    return regions, ans["peak_bytes"], ans["time"] - base, budget, least, ans, chain


def coarse(G, stages):
    """Whether some stage holds more than a quarter of what the backward reads (the graph planner
    may then do better inside it)."""
    nodes = G.g["nodes"]
    total = sum(nodes[i]["output_bytes"] for i in range(G.n) if G.saves(i))
    return any(sum(nodes[i]["output_bytes"] for i in range(st.lo, st.hi + 1) if G.saves(i)) > total / 4
               for st in stages)
