#!/usr/bin/python3
"""graph_from_torch.py: a PyTorch model as a remat graph file (docs/RECOMPUTE.md,
"Graphs from another framework"), for `remat plan --graph FILE.json`.

The model is traced with torch.fx; every call node (module, function or
method) becomes a node in topological order, its inputs among the traced
nodes become edges. forward_time is measured by running the traced graph
node by node (median of --repeats runs, in ms); backward_time is estimated
as twice the forward (a profiler of the backward pass would replace it);
output_bytes come from the output tensors. The last node must be the loss.
Which inputs a backward reads is not known to fx: every edge is marked as
read (conservative: remat keeps more than it may need).

  /usr/bin/python3 tools/graph_from_torch.py > unet.json   # the small U-shaped example
"""
import json
import statistics
import sys
import time

import torch
import torch.fx


class TinyUNet(torch.nn.Module):
    """Down, bottleneck, up, with a long skip from the first layer to the last."""

    def __init__(self, d=256):
        super().__init__()
        self.down = torch.nn.Linear(d, d)
        self.mid = torch.nn.Linear(d, d)
        self.up = torch.nn.Linear(d, d)
        self.head = torch.nn.Linear(d, 10)

    def forward(self, x, y):
        h1 = torch.relu(self.down(x))
        h2 = torch.relu(self.mid(h1))
        h3 = torch.relu(self.up(h2)) + h1  # the long skip
        return torch.nn.functional.cross_entropy(self.head(h3), y)


def nbytes(v):
    if isinstance(v, torch.Tensor):
        return v.numel() * v.element_size()
    if isinstance(v, (tuple, list)):
        return sum(nbytes(t) for t in v)
    return 0


def convert(model, args, repeats=5):
    gm = torch.fx.symbolic_trace(model)
    calls = [n for n in gm.graph.nodes if n.op in ("call_module", "call_function", "call_method")]
    index = {n: i for i, n in enumerate(calls)}
    times = {n: [] for n in calls}
    outputs = {}

    class Timed(torch.fx.Interpreter):
        def run_node(self, n):
            t0 = time.perf_counter()
            out = super().run_node(n)
            if n in times:
                times[n].append((time.perf_counter() - t0) * 1e3)
                outputs[n] = out
            return out

    with torch.no_grad():
        for _ in range(repeats):
            Timed(gm).run(*args)
    nodes, edges = [], []
    for n in calls:
        fwd = statistics.median(times[n])
        nodes.append({"name": n.name, "forward_time": round(fwd, 4), "backward_time": round(2 * fwd, 4),
                      "output_bytes": nbytes(outputs[n])})
        for a in n.all_input_nodes:
            if a in index:
                edges.append({"producer": index[a], "consumer": index[n], "backward_reads": True})
    return {"nodes": nodes, "edges": edges}


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TinyUNet()
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    json.dump(convert(model, (x, y)), sys.stdout, indent=1)
    sys.stdout.write("\n")
