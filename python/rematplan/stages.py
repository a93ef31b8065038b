"""A captured step as a chain of stages for Rotor's program (chain.py).

Units: the model's forward as a sequence of module calls and runs of its
own ops, opened up from the top of the module tree: a call is opened (its
body becomes units) when it cannot be a region, when it holds more than a
third of the activations (transformers' LlamaModel, torchvision's ResNet
inside a loss wrapper) or when its children chain through it (a
Sequential: its calls are finer stages, and a range of them is the same
region as the whole).

Stages: units joined until a cut where at most one tensor made in the
stage is read after it and dies in the next unit (the residual stream
between blocks, the feature map between layers): the flow. Other tensors
may cross a cut (a U-Net's skips, transformers' masks and position
embeddings, what was made earlier): they are counted as held for the whole
step (in the chain's input), once.

Which ranges of stages are regions (the chain's "ck_last"): a stage that is
one call that may be a region (with the calls that only hand its output
on: a ReLU(inplace=True) module after a BatchNorm) starts a range; the range
may go on while the next stage's call follows as a chain (structure.py),
its calls then fused into one region.
"""


class Stage:
    """Nodes lo..hi; calls: the stage's call and its followers when the stage is one call that may
    be a region (else empty); x: the flow, the node whose output the next stage reads (None: the
    last stage, or a cut where only tensors held for the whole step cross)."""

    def __init__(self, lo, hi, calls):
        self.lo, self.hi, self.calls, self.x = lo, hi, calls, None


def units(G, S):
    """The forward as units ([call ids], lo, hi): a call and the calls after it that make no node
    (they go with it), or [] for a run of the model's own ops."""
    saved = [G.g["nodes"][i]["output_bytes"] for i in range(G.n) if G.saves(i)]
    big = sum(saved) / 3.0

    def nbytes(c):
        lo, hi = S.nodes[c]
        return sum(G.g["nodes"][i]["output_bytes"] for i in range(lo, hi + 1) if G.saves(i))

    def opens(d):
        if not S.calls[d].children:
            return False
        return not S.wrappable[d] or nbytes(d) > big or _chained_through(S, d)

    def body(c):
        lo, hi = S.nodes[c] if c > 0 else (0, G.n - 1)
        out, pos = [], lo
        for d in S.calls[c].children:
            dlo, dhi = S.nodes[d]
            if dhi < dlo:
                if out and out[-1][0]:
                    out[-1][0].append(d)
                continue
            if dlo > pos:
                out.append(([], pos, dlo - 1))
            out.extend(body(d) if opens(d) else [([d], dlo, dhi)])
            pos = max(pos, dhi + 1)
        if pos <= hi:
            out.append(([], pos, hi))
        return out
    return body(0)


def _chained_through(S, d):
    """Whether d's children (with nodes) follow one another as a chain over all of d."""
    kids = [k for k in S.calls[d].children if S.nodes[k][1] >= S.nodes[k][0]]
    if len(kids) < 2 or S.nodes[kids[0]][0] != S.nodes[d][0] or S.nodes[kids[-1]][1] != S.nodes[d][1]:
        return False
    k = kids[0]
    for nxt in kids[1:]:
        while S.next[k] is not None and S.next[k] != nxt and S.nodes[S.next[k]][1] < S.nodes[S.next[k]][0]:
            k = S.next[k]  # a call that makes nothing (ReLU(inplace=True)) in between
        if S.next[k] != nxt:
            return False
        k = nxt
    return True


def _reach(G):
    """Per node: the last node that reads its output (forward or backward), itself excluded."""
    out = list(range(G.n))
    for i in range(G.n):
        for c in G.consumers[i] + G.readers[i]:
            if c > out[i]:
                out[i] = c
    return out


def build(G, S):
    """(stages, long-lived node ids) or None when fewer than two stages come out."""
    us = units(G, S)
    reach = _reach(G)
    stages, long_lived = [], set()
    cur_lo, cur_units = 0, []
    for k, (calls, lo, hi) in enumerate(us):
        cur_units.append((calls, lo, hi))
        b = hi + 1
        if k + 1 == len(us):
            break
        crossing = [i for i in range(b) if reach[i] >= b and "part_of" not in G.g["nodes"][i]]
        # the flow: what this stage made that dies in the next unit; a tensor read further on (a
        # skip, a mask, position embeddings) or made before is held for the whole step
        flow = [i for i in crossing if i >= cur_lo and reach[i] <= us[k + 1][2]]
        if len(flow) > 1:
            continue
        st = Stage(cur_lo, hi, _calls(S, cur_units))
        st.x = flow[0] if flow else None
        long_lived |= set(crossing) - set(flow)
        stages.append(st)
        cur_lo, cur_units = b, []
    stages.append(Stage(cur_lo, G.n - 1, []))
    if len(stages) < 2:
        return None
    _ck_last(S, stages)
    return stages, long_lived


def _calls(S, us):
    """The stage's calls when it is one call that may be a region and calls that follow it making
    nothing (else [])."""
    if len(us) != 1 or not us[0][0] or not S.wrappable[us[0][0][0]]:
        return []
    calls = us[0][0]
    for a, b in zip(calls, calls[1:]):
        if S.next[a] != b or S.wrappable[b]:
            return []
    return calls


def _ck_last(S, stages):
    n = len(stages)
    for s, st in enumerate(stages):
        st.ck_last = -1
        if not st.calls or s == n - 1:
            continue
        e = s
        while e + 1 < n - 1 and stages[e + 1].calls and S.next[stages[e].calls[-1]] == stages[e + 1].calls[0]:
            e += 1
        st.ck_last = e
