"""A captured step (capture.py) as remat's graph JSON (docs/RECOMPUTE.md,
"Graphs from another framework"), which libremat's planners read.

One node per op that creates activation storage (ops of torch's dispatcher,
below autograd). What allocates nothing joins the node whose storage it
touches: a view (its time), and an in-place op (ReLU(inplace=True), `out +=
identity`, `x.clamp_()`) joins the node that made the tensor it writes, so
a plan keeps or recomputes the two together; where the in-place op also
reads a later node's output, it takes the storage over as a node of its
own. An op's outputs that only its own backward reads (LayerNorm's mean and
rstd, dropout's mask, BatchNorm's batch statistics) are a second node
"<op>.saved" right after it (`part_of` the op): dropping them costs the
op's forward again. Outputs nobody reads are its forward workspace.

Edges: a node reads another's output in its forward; `backward_reads`
when its backward unpacks that output (the autograd Node that unpacked each
saved tensor is known); `backward_reads_output` when its backward unpacks
its own. Parameters, buffers and the model's inputs are not activations.
Per node: `backward_workspace_bytes` is the gradients of the parameters it
reads (each a new tensor before it is added into .grad), and on CUDA the
allocator's measured transient of its op joins `forward_workspace_bytes`.
`random` when it drew random numbers, `side_effect` (names) when it wrote a
module's buffer or parameter.
"""
import bisect

from .capture import ACT, BUFFER, INPUT, PARAM


class _Node:
    __slots__ = ("ops", "owned", "pinned", "buffers")

    def __init__(self, op):
        self.ops, self.owned, self.pinned, self.buffers = [op], [], False, []


class Built:
    """The graph and the maps between its nodes and the captured ops."""

    def __init__(self, graph, node_ops, op_node, node_first, loss_op):
        self.graph, self.node_ops, self.op_node, self.node_first, self.loss_op = \
            graph, node_ops, op_node, node_first, loss_op


class _Owners:
    """Which node owns each activation storage, over time (an in-place op can take one over)."""

    def __init__(self):
        self.at = {}  # sid -> ([from op], [node])

    def set(self, sid, op, node):
        a = self.at.setdefault(sid, ([], []))
        a[0].append(op)
        a[1].append(node)

    def get(self, sid, op):
        a = self.at.get(sid)
        if a is None:
            return None
        k = bisect.bisect_right(a[0], op) - 1
        return a[1][k] if k >= 0 else None


def _group(rec, last):
    """Ops 0..last into nodes: (nodes, owners)."""
    st = rec.storages
    nodes, owners = [], _Owners()
    for op in rec.ops[: last + 1]:
        act_w = [s for s in op.writes if st[s].kind == ACT and owners.get(s, op.idx) is not None]
        reads = [owners.get(s, op.idx) for s in op.reads if s is not None and st[s].kind == ACT]
        reads = [r for r in reads if r is not None]
        target = None
        if act_w:
            target = owners.get(act_w[0], op.idx)
            if any(r > target for r in reads):  # it reads a later node's output: takes the storage over
                taken = [s for s in act_w if owners.get(s, op.idx) == target]
                target = _new_node(nodes, owners, op.idx, taken)
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


def _new_node(nodes, owners, op, owned):
    nd = _Node(op)
    nd.owned = list(owned)
    nodes.append(nd)
    for s in owned:
        owners.set(s, op, len(nodes) - 1)
    return len(nodes) - 1


def build(rec):
    """The remat graph of a StepRecord, as a Built."""
    st = rec.storages
    loss_op = st[rec.loss_sid].producer if rec.loss_sid is not None else -1
    if loss_op < 0:
        raise TypeError("rematplan: the loss was not computed by the step's ops")
    nodes, owners = _group(rec, loss_op)
    loss_node = owners.get(rec.loss_sid, loss_op)
    nodes = nodes[: loss_node + 1]
    op_node = {o: i for i, nd in enumerate(nodes) for o in nd.ops}
    # readers: forward reads by other nodes; saves: who unpacks what
    fwd_readers, saved_by = {}, {}
    for op in rec.ops[: loss_op + 1]:
        me = op_node.get(op.idx)
        for s in op.reads:
            o = owners.get(s, op.idx) if s is not None else None
            if o is not None and o != me and o < len(nodes):
                fwd_readers.setdefault(s, set()).add(me)
    for sid, pack_op, reader in rec.saves:
        o = owners.get(sid, pack_op)
        r = op_node.get(reader)
        if o is not None and o < len(nodes) and r is not None:
            saved_by.setdefault((sid, o), set()).add(r)
    out_nodes, edges, node_ops, node_first = [], [], [], []
    params = {s.sid: s.nbytes for s in st if s.kind == PARAM}
    for i, nd in enumerate(nodes):
        main, priv, dead, reads_out = _split(nd, i, rec, fwd_readers, saved_by, i == loss_node)
        holds = []
        if i == loss_node:  # what the forward returned besides the loss lives to the end of the step
            main += sum(st[s].nbytes for s in getattr(rec, "held", ()) if st[s].kind == ACT)
            holds = sorted({owners.get(s, loss_op) for s in getattr(rec, "held", ()) if st[s].kind == ACT} - {None, i})
        ops = [rec.ops[o] for o in nd.ops]
        node = {"name": _name(rec, nd, len(out_nodes)), "forward_time": round(sum(o.ms for o in ops), 5),
                "backward_time": round(sum(o.bwd_ms for o in ops), 5),
                "output_bytes": main + (priv if i == loss_node else 0),
                "gradient_bytes": 0 if i == loss_node else sum(o.grad_bytes for o in ops),
                "backward": any(o.has_grad for o in ops),
                "backward_reads_output": reads_out or (i == loss_node and priv > 0),
                "forward_workspace_bytes": dead + max(o.ws for o in ops),
                "backward_workspace_bytes": _param_grads(ops, params)}
        if any(o.random for o in ops):
            node["random"] = True
        if nd.buffers:
            node["side_effect"] = sorted(set(nd.buffers))
        if nd.pinned:
            node["pinned"] = True
        if holds:  # the grouped ids of the nodes whose outputs it holds (renumbered below)
            node["holds"] = holds
        if any(st[s].kind == ACT for o in ops for s in o.writes):
            node["inplace"] = True
        k = len(out_nodes)
        out_nodes.append(node)
        node_ops.append(nd.ops)
        node_first.append(nd.ops[0])
        edges += _edges_into(i, k, nd, rec, owners, saved_by)
        if priv and i != loss_node:
            out_nodes.append({"name": node["name"] + ".saved", "forward_time": node["forward_time"],
                              "backward_time": 0.0, "output_bytes": priv, "gradient_bytes": 0,
                              "backward": True, "backward_reads_output": True, "part_of": k})
            edges.append({"producer": k, "consumer": k + 1, "backward_reads": False})
            node_ops.append(nd.ops)
            node_first.append(nd.ops[0])
    _renumber(edges, nodes, out_nodes)
    _backward_workspaces(out_nodes, edges, node_ops, rec)
    return Built({"nodes": out_nodes, "edges": edges}, node_ops, op_node, node_first, loss_op)


def _backward_workspaces(nodes, edges, node_ops, rec):
    """A node's backward workspace: the parameters' gradients it makes, or what its backward was
    measured to allocate above its start beyond the input gradients it creates (those the model
    counts: the gradient of each producer whose last forward reader it is), if more."""
    last = {}
    for e in edges:
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
    by nobody (dead); and whether its own backward reads the main ones."""
    main = priv = dead = 0
    reads_out = False
    for s in nd.owned:
        nb = rec.storages[s].nbytes
        others = fwd_readers.get(s, set()) - {i}
        savers = saved_by.get((s, i), set())
        if others or is_loss or (savers - {i}):
            main += nb
            reads_out |= i in savers
        elif savers:
            priv += nb
        else:
            dead += nb
    return main, priv, dead, reads_out


def _param_grads(ops, params):
    seen = set()
    for o in ops:
        if o.has_grad:
            seen |= {s for s in o.reads if s in params}
    return sum(params[s] for s in seen)


def _edges_into(i, k, nd, rec, owners, saved_by):
    """Edges (producer node -> this node), producers in the grouped numbering (renumbered later)."""
    prod = {}
    for o in nd.ops:
        op = rec.ops[o]
        for s in op.reads:
            p = owners.get(s, o) if s is not None else None
            if p is not None and p != i and p < i:
                prod.setdefault(p, False)
    for (sid, p), readers in saved_by.items():
        if p != i and p < i and i in readers:
            prod[p] = True
    return [{"producer": p, "consumer": k, "backward_reads": br, "_grouped": True} for p, br in sorted(prod.items())]


def _renumber(edges, nodes, out_nodes):
    """Producers were numbered by grouped node; out_nodes may have ".saved" nodes in between."""
    index, k = {}, 0
    for j, nd in enumerate(out_nodes):
        if "part_of" not in nd:
            index[k] = j
            k += 1
    for e in edges:
        if e.pop("_grouped", False):
            e["producer"] = index[e["producer"]]
    for nd in out_nodes:
        if "holds" in nd:
            nd["holds"] = [index[o] for o in nd["holds"]]
