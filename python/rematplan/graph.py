"""A captured step (capture.py) as remat's graph JSON (docs/RECOMPUTE.md,
"Graphs from another framework"), which libremat's planners read.

One node per op that creates activation storage (ops of torch's dispatcher,
below autograd). What allocates nothing joins the node whose storage it
touches: a view (its time), and an in-place op (ReLU(inplace=True), `out +=
identity`, `x.clamp_()`) joins the node that made the tensor it writes, so
a plan keeps or recomputes the two together; where the in-place op also
reads a later node's output, it takes the storage over as a node of its
own, kept; where its backward reads what autograd saved for it (relu_'s
output), it takes it over as a node of its own too (_split_inplace). An
op's outputs that only its own backward reads (LayerNorm's mean and
rstd, dropout's mask, BatchNorm's batch statistics) are a second node
"<op>.saved" right after it (`part_of` the op): dropping them costs the
op's forward again. Outputs nobody reads are its forward workspace. A
dropout's noise has a node "<op>.mask" before it (the random draws, one
bit an element), from which it is rebuilt by a few cheap ops.

Edges: a node reads another's output in its forward; `backward_reads`
when its backward unpacks that output (the autograd Node that unpacked each
saved tensor is known); `backward_reads_output` when its backward unpacks
its own; `gradient: false` where the consumer's backward makes none of the
producer's gradient (the edge says what is held while it runs, or what its
rebuild reads). Parameters, buffers and the model's inputs are not
activations.
Per node: `backward_workspace_bytes` is the gradients of the parameters it
reads (each a new tensor before it is added into .grad), and on CUDA the
allocator's measured transient of its op joins `forward_workspace_bytes`.
`random` when it drew random numbers, `side_effect` (names) when it wrote a
module's buffer or parameter. A parameter that several autograd Nodes send
gradients to has a node "param:<name>.grad" first (_prepend_held): the
gradient autograd's engine holds until the last one arrives.
"""
import bisect

from .capture import ACT, BUFFER, INPUT, PARAM


class _Node:
    __slots__ = ("ops", "owned", "pinned", "buffers", "tied", "split_of", "moved")

    def __init__(self, op):
        self.ops, self.owned, self.pinned, self.buffers = [op], [], False, []
        self.tied = set()  # storages counted with its main output whoever reads them (_copies_for_inplace)
        self.split_of = None  # the node whose storage its in-place op took over (_split_inplace)
        self.moved = []       # storages its ops made that a later node took over (_split_inplace)
        # pinned: kept whatever the plan; a node that writes the model's inputs, or that takes a
        # storage over by writing it in place (the value before the write is gone: nothing rebuilds it)


class Built:
    """The graph and the maps between its nodes and the captured ops: node_sids[k], the storages whose
    bytes node k counts (what a plan that recomputes k recomputes)."""

    def __init__(self, graph, node_ops, op_node, node_first, loss_op, node_sids, mask_of=None):
        self.graph, self.node_ops, self.op_node, self.node_first, self.loss_op = \
            graph, node_ops, op_node, node_first, loss_op
        self.node_sids = node_sids
        self.mask_of = mask_of or {}  # a dropout's noise node -> its mask node (_dropout_noise)


class _Owners:
    """Which node owns each activation storage, over time (an in-place op can take one over)."""

    def __init__(self):
        self.at = {}  # sid -> ([from op], [node])

    def set(self, sid, op, node):
        a = self.at.setdefault(sid, ([], []))
        a[0].append(op)
        a[1].append(node)

    def reassign(self, sid, node):
        """node owns sid since it was made."""
        a = self.at.get(sid)
        if a is not None:
            a[1][:] = [node] * len(a[1])

    def get(self, sid, op):
        a = self.at.get(sid)
        if a is None:
            return None
        k = bisect.bisect_right(a[0], op) - 1
        return a[1][k] if k >= 0 else None


def _copies_for_inplace(rec, last):
    """{op: the storage it copies}: ops whose outputs are copies an in-place op's autograd makes of
    what it then overwrites, for its backward (hardswish_, hardsigmoid_, silu_: the input before the
    write): read by no op, saved for that in-place op's backward alone. Such a copy lives until the
    backward of the node that made what was overwritten, an earlier node, which no edge can say: it
    joins that node, counted with its main output (made and rebuilt with it, held to its backward)."""
    read = {s for op in rec.ops[: last + 1] for s in op.reads if s is not None}
    packed = {}  # storage -> the ops whose backward reads it
    for sid, _, reader in rec.saves:
        packed.setdefault(sid, set()).add(reader)
    out = {}
    for op in rec.ops[: last + 1]:
        if len(op.new) != 1 or op.writes or op.new[0] in read or len(packed.get(op.new[0], ())) != 1:
            continue
        o2 = next(iter(packed[op.new[0]]))
        src = [s for s in op.reads if s is not None and s in rec.ops[o2].writes] if o2 > op.idx else []
        if src and rec.storages[src[0]].kind == ACT:
            out[op.idx] = src[0]
    return out


def _group(rec, last):
    """Ops 0..last into nodes: (nodes, owners)."""
    st = rec.storages
    nodes, owners = [], _Owners()
    copies = _copies_for_inplace(rec, last)
    unpackers = {reader for _, _, reader in rec.saves}
    saved_at = {}  # storage -> the first op after which autograd saved it
    for sid, at, _ in rec.saves:
        saved_at[sid] = min(saved_at.get(sid, at), at)
    for op in rec.ops[: last + 1]:
        act_w = [s for s in op.writes if st[s].kind == ACT and owners.get(s, op.idx) is not None]
        reads = [owners.get(s, op.idx) for s in op.reads if s is not None and st[s].kind == ACT]
        reads = [r for r in reads if r is not None]
        target = owners.get(copies[op.idx], op.idx) if op.idx in copies else None
        if target is not None:  # the copy joins what it copies
            nodes[target].tied.update(op.new)
        # autograd saved it before this write, and its version did not move (else the capture refused
        # the step): torch 1.13's RReLU noise (calls.UNMARKED_WRITES), `h.data.clamp_()`. The backward reads
        # the value after the write, where a handle packed then names the one before it: kept
        for s in act_w:
            if saved_at.get(s, op.idx) < op.idx:
                nodes[owners.get(s, op.idx)].pinned = True
        if act_w:
            target = owners.get(act_w[0], op.idx)
            if any(r > target for r in reads):  # it reads a later node's output: takes the storage over
                taken = [s for s in act_w if owners.get(s, op.idx) == target]
                target = _new_node(nodes, owners, op.idx, taken)
                nodes[target].pinned = True
            elif op.idx in unpackers and op.has_grad and _splits(nodes[target], rec):
                target = _split_inplace(nodes, owners, target, op.idx, act_w)
        if op.new:
            if target is None:
                target = _new_node(nodes, owners, op.idx, op.new)
            else:  # writes and creates: the created storages join the node written
                nodes[target].owned += op.new
                for s in op.new:
                    owners.set(s, op.idx, target)
        if target is None:  # a view, or an op that touches no activation
            target = max(reads) if reads else len(nodes) - 1
            if target < 0:
                target = _new_node(nodes, owners, op.idx, [])
        nd = nodes[target]
        if nd.ops[-1] != op.idx and nd.ops[0] != op.idx:
            nd.ops.append(op.idx)
        nd.pinned |= any(st[s].kind == INPUT for s in op.writes)
        nd.buffers += [st[s].name for s in op.writes if st[s].kind in (BUFFER, PARAM)]
    return nodes, owners


def _splits(nd, rec):
    """Whether an in-place op whose backward reads what autograd saved for it (relu_ its output,
    hardswish_ its input's copy, masked_fill_ its mask) splits node nd: autograd runs that backward
    first and frees what it read, and the incoming gradient, before the backward of the op that made
    the storage (BatchNorm's) makes its own; as one node both would be held through all of it."""
    return not nd.pinned and nd.split_of is None and not any(rec.ops[o].random for o in nd.ops)


def _split_inplace(nodes, owners, target, op, written):
    """A node of its own for the in-place op (index op) writing node target's storages: it takes
    them over, with the copies autograd made of them for it (target's tied ones). target keeps its
    other outputs (BatchNorm's statistics) and makes the in-place op's input, so its backward
    makes the input's gradient after the new node's: the in-place op's. Returns the new node."""
    nd = nodes[target]
    taken = [s for s in written if owners.get(s, op) == target] + sorted(nd.tied)
    k = _new_node(nodes, owners, op, taken)
    for s in nd.tied:  # a copy is the new node's from the start: autograd may save it before the write
        owners.reassign(s, k)
    nodes[k].tied, nd.tied = nd.tied, set()
    nodes[k].split_of = target
    nd.owned = [s for s in nd.owned if s not in taken]
    nd.moved = taken
    return k


def _new_node(nodes, owners, op, owned):
    nd = _Node(op)
    nd.owned = list(owned)
    nodes.append(nd)
    for s in owned:
        owners.set(s, op, len(nodes) - 1)
    return len(nodes) - 1


def build(rec, rates=None):
    """The remat graph of a StepRecord, as a Built. rates (pricing.Rates): forward times from each op's
    FLOPs and bytes (else the measured ones)."""
    st = rec.storages
    loss_op = st[rec.loss_sid].producer if rec.loss_sid is not None else -1
    if loss_op < 0:
        raise TypeError("rematplan: the loss was not computed by the step's ops")
    nodes, owners = _group(rec, loss_op)
    loss_node = owners.get(rec.loss_sid, loss_op)
    nodes = nodes[: loss_node + 1]
    op_node = {o: i for i, nd in enumerate(nodes) for o in nd.ops}
    fwd_readers, saved_by = _readers(rec, owners, op_node, loss_op, len(nodes))
    after, extra = _python_holds(rec, owners, op_node, fwd_readers, len(nodes))
    held = set(getattr(rec, "held", ())) | after
    out_nodes, edges, node_ops, node_first, node_sids = [], [], [], [], []
    mask_of = {}  # a dropout's noise node -> its mask node
    params = {s.sid: s.nbytes for s in st if s.kind == PARAM}
    tied = set().union(*(nd.tied for nd in nodes))  # autograd's copies: no gradient of their own
    for i, nd in enumerate(nodes):
        main, priv, dead, reads_out, sids = _split(nd, i, rec, fwd_readers, saved_by, i == loss_node)
        holds = []
        if i == loss_node:  # what the forward returned besides the loss lives to the end of the step
            main += sum(st[s].nbytes for s in held if st[s].kind == ACT)
            holds = sorted({owners.get(s, loss_op) for s in held if st[s].kind == ACT} - {None, i})
        ops = [rec.ops[o] for o in nd.ops]
        split = nodes[nd.split_of] if nd.split_of is not None else None
        fwd = _forward_time(ops, rates) + (_forward_time([rec.ops[o] for o in split.ops], rates) if split else 0)
        node = {"name": _name(rec, nd, len(out_nodes)), "forward_time": round(fwd, 5),
                "backward_time": round(sum(o.bwd_ms for o in ops), 5),
                "output_bytes": main + (priv if i == loss_node else 0),
                "gradient_bytes": 0 if i == loss_node else _gradient_bytes(nd, ops, rec, tied),
                "backward": any(o.has_grad for o in ops),
                "backward_reads_output": reads_out or (i == loss_node and priv > 0),
                "forward_workspace_bytes": dead + max(o.ws for o in ops) + sum(st[s].nbytes for s in nd.moved),
                "backward_workspace_bytes": _param_grads(ops, params)}
        if any(o.random for o in ops):
            node["random"] = True
        if nd.buffers:
            node["side_effect"] = sorted(set(nd.buffers))
        if nd.pinned or i == loss_node or nd.moved and not main:  # (split, it holds nothing: _split_inplace)
            node["keep"] = True
        if holds:  # the grouped ids of the nodes whose outputs it holds (renumbered below)
            node["holds"] = holds
        if any(st[s].kind == ACT for o in ops for s in o.writes):
            node["inplace"] = True
        numel = _dropout_noise(nd, rec, priv, i == loss_node)
        if numel:  # its mask first: what draws the random numbers, read by the noise it makes
            node = _split_mask(node, numel, main, rates, out_nodes, node_ops, node_first, node_sids, nd)
            edges += _edges_into(i, len(out_nodes) - 1, nd, rec, owners, saved_by, extra.get(i, ()), split)
            edges.append({"producer": len(out_nodes) - 1, "consumer": len(out_nodes), "backward_reads": False})
            mask_of[len(out_nodes)] = len(out_nodes) - 1
        k = len(out_nodes)
        out_nodes.append(node)
        node_ops.append(nd.ops if not numel else nd.ops[:1])
        node_first.append(nd.ops[0])
        node_sids.append(sids[0] + (sids[1] if i == loss_node else []))
        if not numel:
            edges += _edges_into(i, k, nd, rec, owners, saved_by, extra.get(i, ()), split)
        if priv and i != loss_node:
            out_nodes.append({"name": node["name"] + ".saved", "forward_time": node["forward_time"],
                              "backward_time": 0.0, "output_bytes": priv, "gradient_bytes": 0,
                              "backward": True, "backward_reads_output": True, "part_of": k})
            if node.get("keep"):  # rebuilding it would run the pinned node's ops again
                out_nodes[-1]["keep"] = True
            edges.append({"producer": k, "consumer": k + 1, "backward_reads": False})
            node_ops.append(nd.ops)
            node_first.append(nd.ops[0])
            node_sids.append(sids[1])
    index = _renumber(edges, nodes, out_nodes)
    _backward_workspaces(out_nodes, edges, node_ops, rec)
    shared = [(sid, [index[k] for k in ks]) for sid, ks in _shared_params(rec, op_node)]
    if shared:
        mask_of = _prepend_held(shared, rec, out_nodes, edges, node_ops, node_first, node_sids, mask_of)
    for nd, b in zip(out_nodes, _layer_blocks(rec, node_first)):
        nd["block"] = b
    return Built({"nodes": out_nodes, "edges": edges, "eager": True}, node_ops, op_node, node_first, loss_op,
                 node_sids, mask_of)


# A dropout's noise, as F.dropout makes it on the CPU (torch 1.13 and 2.x): a tensor like the input
# (empty_like), Bernoulli draws in place (0.0 or 1.0), divided in place by the keep probability: two
# values, 0 and 1 / (1 - p). Kept, it costs 4 bytes an element (fp32); rebuilt, the draws again, which a
# CPU makes 20-60x slower per byte than a multiply. Its mask (1 bit an element) and the value rebuild it
# bit for bit with a few cheap ops (masks.py, _Mask), so the graph offers that as a node of its own.
_NOISE = ("aten.empty_like.default", "aten.bernoulli_.float", "aten.div_.Scalar")


def _dropout_noise(nd, rec, priv, is_loss):
    """The elements of the dropout noise node nd makes (_NOISE: its ops that write, in that order, the
    last optional; views besides), or 0."""
    if nd.pinned or is_loss or priv or nd.buffers or len(nd.owned) != 1:
        return 0
    ops = [rec.ops[o] for o in nd.ops]
    writing = [o for o in ops if o.new or o.writes]
    names = [o.name for o in writing]
    if names not in (list(_NOISE), list(_NOISE[:2])) or ops[0] is not writing[0]:
        return 0
    return int(ops[0].flops)  # one FLOP per output element (pricing.op_flops)


def _split_mask(node, numel, nbytes, rates, out_nodes, node_ops, node_first, node_sids, nd):
    """Appends the noise node's mask node (its ops, their time, the random draws; a bit an element) and
    returns the noise node as the mask rebuilds it: a few elementwise ops. The mask is kept or rebuilt
    once ("each": false): the runtime holds no mask it rebuilds for each reader, it draws the noise
    again for each of the noise's rebuilds (BART's least plan drew 273 times where the planner priced
    116 draws: 4.5 s a step against 2.8 s predicted)."""
    out_nodes.append({"name": node["name"] + ".mask", "forward_time": node["forward_time"], "backward_time": 0.0,
                      "output_bytes": (numel + 7) // 8, "gradient_bytes": 0, "backward": False, "random": True,
                      "each": False, "_mask": True})
    node_ops.append(nd.ops)
    node_first.append(nd.ops[0])
    node_sids.append([])
    # the bits unpacked (a shift and a mask over numel bytes), cast to the noise's dtype, times the value
    fwd = rates.mask_time(numel, nbytes) if rates is not None else node["forward_time"] / 20
    node = dict(node, forward_time=round(fwd, 5))
    node.pop("random", None)
    return node


def _layers(rec):
    """The model's layers: the calls of the module class, at the depth of the module tree, that run
    the largest share of the forward's ops (among those within 10% of it, the one with the most calls;
    at least two calls). {call index: True} (empty when there are none)."""
    depth = []
    for c in rec.calls:
        depth.append(depth[c.parent] + 1 if c.parent >= 0 else 0)
    groups = {}
    for c, d in zip(rec.calls, depth):
        if d > 0:
            g = groups.setdefault((d, type(c.module).__name__), [])
            if not any(c.first < o.end and o.first < c.end for o in g):  # not nested in one of its own class
                g.append(c)
    total = max(len(rec.ops), 1)
    scored = [(sum(c.end - c.first for c in g) / total, len(g), -d, g) for (d, _), g in groups.items() if len(g) >= 2]
    if not scored:
        return {}
    top = max(s[0] for s in scored)
    best = max((s for s in scored if s[0] >= 0.9 * top), key=lambda s: (s[1], s[2]))
    return {c.idx: True for c in best[3]}


def _layer_blocks(rec, node_first):
    """Each node's block (graph JSON "block"): its layer (_layers), or the run of nodes between two."""
    layers = _layers(rec)
    parent = [c.parent for c in rec.calls]

    def layer_of(op):
        c = rec.ops[op].call
        while c >= 0 and c not in layers:
            c = parent[c]
        return c
    out, b, prev = [], -1, None
    for first in node_first:
        cur = layer_of(first)
        if not out or cur != prev or cur < 0 and prev >= 0:
            b += 1
        out.append(b)
        prev = cur
    return out


def _python_holds(rec, owners, op_node, fwd_readers, n):
    """Where the model's Python code holds a storage past its last reader (capture.lifetimes): its
    node is read, in the forward, by the node of the op during which Python let go of it (added to
    fwd_readers). Returns (the storages held past the forward: to the end of the step, {reading
    node: the nodes it holds that long})."""
    deaths = getattr(rec, "deaths", None)
    after, extra = set(), {}
    if not deaths:
        return after, extra
    by_key = {op.key: op.idx for op in rec.ops}
    for op in rec.ops:
        for sid, pos in zip(op.new, op.new_pos):
            d = deaths.get((op.key, pos))
            if d is None:
                continue
            if d == "after":
                after.add(sid)
                continue
            at = by_key.get(d)
            o = owners.get(sid, at if at is not None else op.idx)  # (the owner then: _split_inplace)
            r = op_node.get(at)
            if o is not None and r is not None and r > o and r < n:
                fwd_readers.setdefault(sid, set()).add(r)
                extra.setdefault(r, set()).add(o)
    return after, extra


def _readers(rec, owners, op_node, loss_op, n):
    """({storage: the other nodes that read it in the forward}, {(storage, owner): the nodes whose
    backward unpacks it})."""
    fwd_readers, saved_by = {}, {}
    for op in rec.ops[: loss_op + 1]:
        me = op_node.get(op.idx)
        for s in op.reads:
            o = owners.get(s, op.idx) if s is not None else None
            if o is not None and o != me and o < n:
                fwd_readers.setdefault(s, set()).add(me)
    for sid, pack_op, reader in rec.saves:
        o = owners.get(sid, pack_op)
        r = op_node.get(reader)
        if o is not None and o < n and r is not None:
            saved_by.setdefault((sid, o), set()).add(r)
    return fwd_readers, saved_by


def _shared_params(rec, op_node):
    """[(param sid, [the nodes whose backward sends it a gradient])] for each parameter that more
    than one autograd Node sends a gradient to (a head tied to the embedding, a module called
    twice; capture.py's gradient_feeds), in the grouped numbering."""
    out = []
    for sid, ops in sorted(getattr(rec, "gradient_feeds", {}).items()):
        ks = sorted({op_node[o] for o in ops if o in op_node})
        if len(ks) > 1:
            out.append((sid, ks))
    return out


def _prepend_held(shared, rec, nodes, edges, node_ops, node_first, node_sids, mask_of):
    """A parameter read by several nodes gets one gradient from each; autograd's engine sums them in
    the buffer of the parameter's AccumulateGrad node, which runs only once all have arrived: the
    first one made (by the last reader, the first backward) is held until the backward of the first
    reader. The model: a node before all others, kept, of no bytes, whose gradient (the parameter's
    size) its readers make: born at the first of their backwards, it lives until the node's own
    backward (the step's last: a little longer than autograd holds it). That first backward's
    workspace no longer counts it. Indices shift by the nodes prepended; returns mask_of shifted."""
    m = len(shared)
    for e in edges:
        e["producer"] += m
        e["consumer"] += m
    for nd in nodes:
        if "part_of" in nd:
            nd["part_of"] += m
        if "holds" in nd:
            nd["holds"] = [h + m for h in nd["holds"]]
    head = []
    for j, (sid, readers) in enumerate(shared):
        st = rec.storages[sid]
        head.append({"name": "param:%s.grad" % st.name, "forward_time": 0.0, "backward_time": 0.0,
                     "output_bytes": 0, "gradient_bytes": st.nbytes, "backward": True,
                     "backward_reads_output": False, "forward_workspace_bytes": 0,
                     "backward_workspace_bytes": 0, "keep": True})
        edges += [{"producer": j, "consumer": r + m, "backward_reads": False} for r in readers]
        last = nodes[readers[-1]]
        last["backward_workspace_bytes"] = max(last["backward_workspace_bytes"] - st.nbytes, 0)
    edges.sort(key=lambda e: (e["consumer"], e["producer"]))
    nodes[:0] = head
    node_ops[:0] = [[] for _ in head]
    node_first[:0] = [node_first[0]] * m
    node_sids[:0] = [[] for _ in head]
    return {n + m: k + m for n, k in mask_of.items()}


def _backward_workspaces(nodes, edges, node_ops, rec):
    """A node's backward workspace: the parameters' gradients it makes, or what its backward was
    measured to allocate above its start beyond the input gradients it creates (those the model
    counts: the gradient of each producer whose last forward reader it is), if more."""
    last = {}  # the first backward to make each producer's gradient: its last reader of the data
    for e in edges:  # (an edge for bytes held, or for what a rebuild reads, makes none: "gradient" false)
        if e.get("gradient", True):
            last[e["producer"]] = max(last.get(e["producer"], -1), e["consumer"])
    first_grads = [0] * len(nodes)
    for p, c in last.items():
        first_grads[c] += nodes[p].get("gradient_bytes", nodes[p]["output_bytes"])
    for k, nd in enumerate(nodes):
        if "part_of" in nd or not nd.get("backward", True):
            continue
        measured = max(rec.ops[o].bwd_ws for o in node_ops[k])
        nd["backward_workspace_bytes"] = max(nd["backward_workspace_bytes"], measured - first_grads[k])


def _name(rec, nd, k):
    """'<module path>:<op>#<node>' (the node's id keeps names unique)."""
    op = rec.ops[nd.ops[0]]
    path = rec.calls[op.call].path if op.call >= 0 else ""
    return "%s:%s#%d" % (path or "model", op.name.replace("aten.", "").replace(".default", ""), k)


def _split(nd, i, rec, fwd_readers, saved_by, is_loss):
    """Bytes of the node's storages: read by others (main), only by its own backward (private),
    by nobody (dead); whether its own backward reads the main ones; ([main sids], [private sids])."""
    main = priv = dead = 0
    reads_out = False
    sids = ([], [])
    for s in nd.owned:
        nb = rec.storages[s].nbytes
        others = fwd_readers.get(s, set()) - {i}
        savers = saved_by.get((s, i), set())
        if others or is_loss or (savers - {i}) or s in nd.tied:
            main += nb
            reads_out |= i in savers
            sids[0].append(s)
        elif savers:
            priv += nb
            sids[1].append(s)
        else:
            dead += nb
    return main, priv, dead, reads_out, sids


def _forward_time(ops, rates):
    """A node's time to rebuild: its ops priced, and the Python that replays each in a rebuild
    (rates.rebuild_op: what the planner pays per op each time it recomputes the node)."""
    return sum(rates.op_time(o) + rates.rebuild_op for o in ops) if rates is not None else sum(o.ms for o in ops)


def _gradient_bytes(nd, ops, rec, tied):
    """The bytes of the gradient of what node nd makes; a node split off for an in-place op
    (_split_inplace) has the gradient of the storages it took over."""
    if nd.split_of is not None:
        return sum(rec.storages[s].nbytes for s in nd.owned if s not in tied)
    return sum(o.grad_bytes for o in ops if not tied.intersection(o.new))


def _param_grads(ops, params):
    seen = set()
    for o in ops:
        if o.has_grad:
            seen |= {s for s in o.reads if s in params}
    return sum(params[s] for s in seen)


def _read_producers(nd, i, rec, owners):
    """The earlier nodes whose outputs node i's ops read in the forward."""
    out = set()
    for o in nd.ops:
        for s in rec.ops[o].reads:
            p = owners.get(s, o) if s is not None else None
            if p is not None and p != i and p < i:
                out.add(p)
    return out


def _edges_into(i, k, nd, rec, owners, saved_by, held_until=(), split_from=None):
    """Edges (producer node -> this node), producers in the grouped numbering (renumbered later);
    held_until: producers the model's Python code holds until this node runs. split_from: the node
    an in-place op's node was split from (_split_inplace): a data edge from it (this backward makes
    its gradient), and edges making no gradient from what it reads (a rebuild of this node replays
    its ops too)."""
    data = _read_producers(nd, i, rec, owners)
    prod = {p: False for p in set(held_until) | data}
    rebuild = set()
    if split_from is not None:
        j = nd.split_of
        data.add(j)
        prod.setdefault(j, False)
        rebuild = _read_producers(split_from, j, rec, owners) - set(prod)
        prod.update((p, False) for p in rebuild)
    for (sid, p), readers in saved_by.items():
        if p != i and p < i and i in readers:
            prod[p] = True
            data.add(p)
    edges = [{"producer": p, "consumer": k, "backward_reads": br, "_grouped": True} for p, br in sorted(prod.items())]
    for e in edges:
        if e["producer"] not in data:  # held by Python, or read by a rebuild: no gradient comes back along it
            e["gradient"] = False
    return edges


def _renumber(edges, nodes, out_nodes):
    """Producers were numbered by grouped node; out_nodes may have ".saved" nodes in between. Returns
    {grouped node: its index in out_nodes}."""
    index, k = {}, 0
    for j, nd in enumerate(out_nodes):
        if "part_of" not in nd and not nd.pop("_mask", False):
            index[k] = j
            k += 1
    for e in edges:
        if e.pop("_grouped", False):
            e["producer"] = index[e["producer"]]
    for nd in out_nodes:
        if "holds" in nd:
            nd["holds"] = [index[o] for o in nd["holds"]]
    return index
