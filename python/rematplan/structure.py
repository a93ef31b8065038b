"""Which module calls of a captured step a plan may checkpoint, and which
follow each other as a chain.

A region is a module call (its forward run under torch.utils.checkpoint) or
a run of calls that follow each other as a chain, fused: the first call
runs them all, the later ones hand its output on. A call may be a region
when
  - its module is called once in the step (a plan is per module);
  - no op in it writes a tensor made before it (its recomputation would
    read the written value: `x.clamp_()` on its input, ReLU(inplace=True)
    as a module of its own); buffers are restored around a recomputation;
  - what it makes and others read later is in its output (a tensor kept
    aside, e.g. on the module, would not be recomputed with it);
  - it runs an op that makes an activation.
Two calls c, d chain (d follows c) when d starts where c ends (no op in
between), d's arguments are c's but for one tensor, that is c's output,
and nothing but d reads c's output: a ModuleList's blocks called in a loop
(nanoGPT's `for block in self.h: x = block(x)`, transformers' decoder
layers with the same mask and position embeddings), a Sequential's
children, also across nested Sequentials (ResNet's stem and layer1..4).
The deepest call that follows is taken, so runs are as fine as they go.
"""
import bisect

from .capture import ACT, INPUT


class Structure:
    def __init__(self, rec, built):
        self.rec, self.calls, self.node_ops = rec, rec.calls, built.node_ops
        n_nodes = len(built.node_first)
        firsts = built.node_first
        self.nodes = []  # per call: (lo, hi) node ids whose first op ran inside it (hi < lo: none)
        for c in self.calls:
            lo = bisect.bisect_left(firsts, c.first)
            hi = min(bisect.bisect_left(firsts, c.end), n_nodes) - 1
            self.nodes.append((lo, hi))
        self.depth = []
        for c in self.calls:
            self.depth.append(0 if c.parent < 0 else self.depth[c.parent] + 1)
        counts = {}
        for c in self.calls:
            counts[id(c.module)] = counts.get(id(c.module), 0) + 1
        self.once = [counts[id(c.module)] == 1 for c in self.calls]
        self._uses(rec)
        self.why = [self._why_not(c) for c in self.calls]
        self.wrappable = [w is None for w in self.why]
        self.next = [self._follower(c) for c in self.calls]

    def _uses(self, rec):
        """last_use[sid]: the last forward op that reads, writes or saves an activation storage."""
        last = {}
        for op in rec.ops:
            for s in op.reads + op.writes:
                if s is not None:
                    last[s] = op.idx
        for sid, pack_op, _ in rec.saves:
            last[sid] = max(last.get(sid, -1), pack_op)
        self.last_use = last

    def _why_not(self, c):
        """None when call c may be a region, else why not. self.before[c]: the tensors made before
        c that c writes (a call that writes only its chain input may still join a chain)."""
        st, ops = self.rec.storages, self.rec.ops
        lo, hi = self.nodes[c.idx]
        before = set()
        if not hasattr(self, "before"):
            self.before = []
        self.before.append(before)
        if c.parent < 0:
            return "the model itself"
        if not self.once[c.idx]:
            return "its module is called more than once in a step"
        for op in ops[c.first:c.end]:
            for s in op.writes:
                if st[s].kind == INPUT:
                    return "%s writes the model's input in place" % op.name
                if st[s].kind == ACT and st[s].producer < c.first:
                    before.add(s)
            for s in op.new:
                if self.last_use.get(s, -1) >= c.end and s not in c.out_sids:
                    return "a tensor it makes is read later but not returned"
        if before:
            return "it writes a tensor made before it (in place)"
        if hi < lo:
            return "it makes no activation"
        return None

    def may_follow(self, d, c):
        """Whether call d may join a chain after c: a region of its own, or a call that makes
        nothing or writes only c's output in place (ReLU(inplace=True) after a BatchNorm)."""
        if self.wrappable[d.idx]:
            return True
        why = self.why[d.idx]
        return why == "it makes no activation" or \
            (why.startswith("it writes") and self.before[d.idx] <= c.out_sids)

    def _follower(self, c):
        """The deepest call that follows c as a chain, or None."""
        if self.why[c.idx] not in (None, "it makes no activation") and not self.why[c.idx].startswith("it writes"):
            return None
        if not c.out_ids:
            return None
        best = None
        for d in self._starting_at(c.end):
            if d.idx > c.idx and self.may_follow(d, c) and self.chain_place(c, d) is not None and \
                    (best is None or self.depth[d.idx] > self.depth[best.idx]):
                best = d
        return best.idx if best is not None else None

    def _starting_at(self, op):
        if not hasattr(self, "_by_first"):
            self._by_first = {}
            for d in self.calls:
                self._by_first.setdefault(d.first, []).append(d)
        return self._by_first.get(op, [])

    def chain_place(self, c, d):
        """Where d takes c's output (a signature place), if d follows c as a chain."""
        out = c.out_ids[0]
        places = [e[0] for e in d.sig if e[1] == "T" and e[2] == out]
        if len(places) != 1:
            return None
        place = places[0]
        cp = [e[0] for e in c.sig if e[0] == place and e[1] == "T"]
        if not cp or _rest(c.sig, place) != _rest(d.sig, place):
            return None
        if any(self.last_use.get(s, -1) >= d.end and s not in d.out_sids for s in c.out_sids):
            return None
        return place

    def runs(self):
        """Maximal chains of calls, as lists of stages, each a list of call ids: a call that may
        be a region, with the calls after it that may not (they go with it). At least two stages."""
        followed = {n for n in self.next if n is not None}
        out = []
        for c in self.calls:
            if c.idx in followed or self.next[c.idx] is None or not self.wrappable[c.idx]:
                continue
            stages, k = [[c.idx]], self.next[c.idx]
            while k is not None:
                if self.wrappable[k]:
                    stages.append([k])
                else:
                    stages[-1].append(k)
                k = self.next[k]
            if len(stages) >= 2:
                out.append(stages)
        return out

    def span(self, calls):
        """The nodes (lo, hi) of a region of calls (one call, or a chain's calls fused)."""
        spans = [self.nodes[c] for c in calls if self.nodes[c][1] >= self.nodes[c][0]]
        return spans[0][0], max(h for _, h in spans)

    def partial(self, calls, offset=0):
        """Nodes of a region some of whose ops ran outside it (an in-place op of its parent)."""
        first, end = self.calls[calls[0]].first, self.calls[calls[-1]].end
        lo, hi = self.span(calls)
        return {k - offset for k in range(lo, hi + 1)
                if any(o < first or o >= end for o in self.node_ops[k])}

    def regions(self, within=None):
        """Every region (a tuple of calls): each call that may be one, and each range of two or more
        consecutive stages of a chain, fused; with `within`, those whose calls are all in it."""
        if not hasattr(self, "_regions"):
            out = [(c,) for c in range(len(self.calls)) if self.wrappable[c]]
            for run in self.runs():
                for i in range(len(run)):
                    for j in range(i + 1, len(run)):
                        out.append(tuple(c for st in run[i:j + 1] for c in st))
            self._regions = out
        if within is None:
            return self._regions
        within = set(within)
        return [r for r in self._regions if all(c in within for c in r)]

    def inside(self, lo, hi, exclude=()):
        """The calls whose ops all ran within nodes lo..hi's ops (but those in `exclude`)."""
        op_lo = min(self.node_ops[lo])
        op_hi = max(max(self.node_ops[k]) for k in range(lo, hi + 1)) + 1
        ex = set(exclude)
        return [c.idx for c in self.calls if c.idx not in ex and c.first >= op_lo and c.end <= op_hi and c.parent >= 0
                and (self.nodes[c.idx][1] < self.nodes[c.idx][0] or lo <= self.nodes[c.idx][0] <= self.nodes[c.idx][1] <= hi)]

    def descendants(self, c):
        """The calls inside call c, outermost first."""
        out, stack = [], list(reversed(self.calls[c].children))
        while stack:
            d = stack.pop()
            out.append(d)
            stack.extend(reversed(self.calls[d].children))
        return out


def _rest(sig, place):
    return tuple(e for e in sig if e[0] != place)
