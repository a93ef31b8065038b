"""The quick part of tests/python_rematplan.py: small models (issue 23's: a
GPT with dropout, BatchNorm layers, a graph, a buffer that counts its
calls), models torch.fx cannot trace (issue 27), in-place ops on
activations, `remat plan --chain/--graph` reproducing a plan, verify(),
the compile-mode solver, libremat's load checks and the H200 GPT-2
profile. run(check, remat) runs them all."""
import contextlib
import copy
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn as nn
import torch.utils.checkpoint  # noqa: F401
import torch.nn.functional as F

import rematplan
from rematplan.capture import loss_of

HERE = os.path.dirname(os.path.abspath(__file__))


class Block(nn.Module):
    def __init__(self, C, H, T, p):
        super().__init__()
        self.H = H
        self.ln_1, self.c_attn, self.c_proj = nn.LayerNorm(C), nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.ln_2, self.c_fc, self.mlp_proj = nn.LayerNorm(C), nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.drop = nn.Dropout(p)
        self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        att = self.drop(att.masked_fill(~self.mask[:T, :T], float("-inf")).softmax(dim=-1))
        x = x + self.drop(self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C)))
        return x + self.drop(self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class GPT(nn.Module):
    def __init__(self, L=3, C=32, H=2, T=16, V=64, p=0.1):
        super().__init__()
        self.V = V
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList([Block(C, H, T, p) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)
        self.register_buffer("pos", torch.arange(T), persistent=False)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(self.pos[: idx.shape[1]])
        for b in self.h:
            x = b(x)
        return F.cross_entropy(F.linear(self.ln_f(x), self.wte.weight).view(-1, self.V), targets.view(-1))


class BNNet(nn.Module):
    """Linear, BatchNorm, ReLU, Dropout layers: a chain with module state."""

    def __init__(self, d=64, layers=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.BatchNorm1d(d), nn.ReLU(), nn.Dropout(0.2))
                                    for _ in range(layers))
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        for layer in self.layers:
            x = layer(x)
        return F.cross_entropy(self.head(x), y)


class Skips(nn.Module):
    """Down, middle and up layers whose outputs skip to the up layers: not a chain."""

    def __init__(self, d=64):
        super().__init__()
        self.down = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh(), nn.Dropout(0.1)) for _ in range(3))
        self.mid = nn.Sequential(nn.Linear(d, d), nn.ReLU())
        self.up = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.Tanh()) for _ in range(3))
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        skips = []
        for layer in self.down:
            x = layer(x)
            skips.append(x)
        x = self.mid(x)
        for layer in self.up:
            x = layer(x) + skips.pop()
        return F.cross_entropy(self.head(x), y)


class Counted(nn.Module):
    """Blocks one of which counts its calls in a buffer: a side effect that must happen once a step."""

    def __init__(self, d=64):
        super().__init__()
        self.blocks = nn.ModuleList([Mlp(d), CountingLayer(d), Mlp(d), Mlp(d)])
        self.head = nn.Linear(d, 10)

    def forward(self, x, y):
        for b in self.blocks:
            x = b(x)
        return F.cross_entropy(self.head(x), y)


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, 4 * d), nn.Tanh(), nn.Linear(4 * d, d), nn.Tanh())

    def forward(self, x):
        return x + self.net(x)


class CountingLayer(Mlp):
    def __init__(self, d):
        super().__init__(d)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.calls.add_(1)
        return x + self.net(x * 2)


class Branchy(nn.Module):
    """What torch.fx cannot trace: control flow on a tensor's value, shape arithmetic, in-place ops
    on activations (x.clamp_, h.add_), torch.arange(t, device=...)."""

    def __init__(self, d=64, layers=4):
        super().__init__()
        self.emb = nn.Embedding(64, d)
        self.pos = nn.Embedding(32, d)
        self.layers = nn.ModuleList(BranchyLayer(d) for _ in range(layers))
        self.head = nn.Linear(d, 64)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.emb(idx) + self.pos(torch.arange(t, device=idx.device))
        for layer in self.layers:
            x = layer(x)
        n = x.shape[0] * x.shape[1]
        return F.cross_entropy(self.head(x).view(n, -1), targets.view(n))


class BranchyLayer(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)

    def forward(self, x):
        h = self.fc1(x)
        h.add_(1.0)  # in place on an activation
        if h.mean() > 0:  # data-dependent control flow
            h = torch.tanh(h)
        else:
            h = torch.sigmoid(h)
        h = self.fc2(h)
        h.clamp_(-3, 3)
        return x + h


def step(model, args, seed):
    """One training step from no gradients: (loss, gradients, buffers after)."""
    for p in model.parameters():
        p.grad = None
    torch.manual_seed(seed)
    loss = loss_of(model(*args))
    loss.backward()
    grads = [p.grad.clone() if p.grad is not None else None for p in model.parameters()]
    return loss.detach().clone(), grads, {k: v.clone() for k, v in model.named_buffers()}


def same(a, b):
    return len(a) == len(b) and all((x is None and y is None) or torch.equal(x, y) for x, y in zip(a, b))


def quiet(fn, *a, **k):
    with contextlib.redirect_stdout(io.StringIO()):
        return fn(*a, **k)


def plan_or_least(model, args, budget):
    try:
        return quiet(rematplan.plan, model, args, budget)
    except rematplan.BudgetError as e:
        return quiet(rematplan.plan, model, args, e.least_bytes)


def check_planned(check, name, model, args, budget, need_regions=True):
    """Planned at budget (or its least): bit-equal gradients, buffers updated once, verify clean."""
    state = copy.deepcopy(model.state_dict())
    ref = copy.deepcopy(model)
    g_ref = step(ref, args, 3)[1]
    P = plan_or_least(model, args, budget)
    cm = rematplan.apply(model, P)
    model.load_state_dict(state)
    g = step(cm, args, 3)[1]
    check(same(g, g_ref), "%s: gradients bit for bit: %r" % (name, P))
    bufs, bufs_ref = dict(model.named_buffers()), dict(ref.named_buffers())
    check(all(torch.equal(bufs[k], bufs_ref[k]) for k in bufs), "%s: buffers updated once a step: %s" %
          (name, [k for k in bufs if not torch.equal(bufs[k], bufs_ref[k])][:3]))
    if need_regions:
        check(P.n_recomputed() > 0, "%s: something is recomputed: %r" % (name, P))
    r = rematplan.verify(cm, args, raise_on_mismatch=False)
    check(r["ok"] and r["measured_peak"] <= P.budget_bytes and (r["compared"] > 0 or not need_regions),
          "%s: verify %s" % (name, {k: r.get(k) for k in ("ok", "loss_equal", "grads_differ", "compared", "mismatches",
                                                             "measured_peak", "budget")}))
    return P, cm


def test_small(check):
    torch.manual_seed(0)
    m = GPT()
    x, y = torch.randint(0, 64, (4, 16)), torch.randint(0, 64, (4, 16))
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            P = rematplan.plan(m, (x, y), 0.5)
        except rematplan.BudgetError as e:
            P = rematplan.plan(m, (x, y), e.least_bytes)
    check("predicted peak" in text.getvalue() and "measured peak" in text.getvalue() and P.planner in
          text.getvalue(), "plan() prints the planner, predicted and measured peaks: %r" % text.getvalue()[:300])
    check_planned(check, "GPT (dropout)", m, (x, y), 0.5)
    torch.manual_seed(0)
    bn = BNNet()
    args = (torch.randn(256, 64), torch.randint(0, 10, (256,)))
    check_planned(check, "BatchNorm layers", bn, args, 0.5)
    plain = copy.deepcopy(bn)  # plain non-reentrant checkpoint counts the batch twice (pytorch#96136)
    before = plain.layers[0][1].num_batches_tracked.clone()
    h = torch.utils.checkpoint.checkpoint(plain.layers[0], args[0], use_reentrant=False)
    for layer in plain.layers[1:]:
        h = layer(h)
    F.cross_entropy(plain.head(h), args[1]).backward()
    check(int(plain.layers[0][1].num_batches_tracked - before) == 2,
          "torch.utils.checkpoint alone counts the batch twice (pytorch#96136)")
    torch.manual_seed(0)
    check_planned(check, "skips (a graph)", Skips(), (torch.randn(128, 64), torch.randint(0, 10, (128,))), 0.6)
    torch.manual_seed(0)
    c = Counted()
    P, _ = check_planned(check, "a buffer counting calls", c, (torch.randn(128, 64), torch.randint(0, 10, (128,))),
                         0.6)
    check(any(nd.get("side_effect") for nd in P.graph["nodes"]), "the capture records the buffer written in place")


def test_untraceable(check):
    """Models torch.fx cannot trace plan (capture by running)."""
    import torch.fx
    torch.manual_seed(0)
    m = Branchy()
    x, y = torch.randint(0, 64, (8, 32)), torch.randint(0, 64, (8, 32))
    try:
        torch.fx.symbolic_trace(m)
        check(False, "torch.fx cannot trace Branchy (the test's premise)")
    except Exception:
        pass
    check_planned(check, "untraceable (control flow, shapes, in place)", m, (x, y), 0.5)
    import torchvision  # BasicBlock: ReLU(inplace=True), out += identity
    torch.manual_seed(0)
    from rematplan_models import WithLoss
    r18 = WithLoss(torchvision.models.resnet18(num_classes=10))
    img, cls = torch.randn(2, 3, 32, 32), torch.randint(0, 10, (2,))
    check_planned(check, "torchvision BasicBlock (in place)", r18, (img, cls), 0.6)


def check_reproduce(check, m, args, remat):
    """`remat plan --graph FILE --memory-budget B` gives the answer the plan was made from: the same
    nodes recomputed, in the same modes."""
    P = plan_or_least(m, args, 0.5)
    with tempfile.TemporaryDirectory() as d:
        f = os.path.join(d, "graph.json")
        P.save_graph(f)
        out = subprocess.run([remat, "plan", "--graph", f, "--memory-budget", str(P.planner_budget), "--json"],
                             capture_output=True, text=True)
        ans = json.loads(out.stdout) if out.returncode == 0 else {}
        check(ans.get("recompute") == P.answer["recompute"] and ans.get("peak_bytes") == P.answer["peak_bytes"],
              "remat plan --graph reproduces the plan: %s" % out.stderr[:200])


def test_compile_solver(check):
    """The compile-mode solver plans from shapes: it runs no node of the graph (not even on made-up
    inputs) and dispatches no op while solving."""
    import torch.fx
    from torch.utils._python_dispatch import TorchDispatchMode
    from rematplan import compile as rc

    ran = []

    def never(*a, **k):
        ran.append(1)
        raise AssertionError("a graph node was executed")
    g = torch.fx.Graph()
    x = g.placeholder("x")
    x.meta["val"] = torch.empty(64, 128, device="meta")
    w = g.placeholder("w")
    w.meta["val"] = torch.empty(128, 128, device="meta")
    nodes, prev = [], x
    for k in range(6):
        mm = g.call_function(never, (prev, w))
        mm.meta["val"] = torch.empty(64, 128, device="meta")
        act = g.call_function(never, (mm,))
        act.meta["val"] = torch.empty(64, 128, device="meta")
        nodes += [mm, act]
        prev = act

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.ops += 1
            return func(*args, **(kwargs or {}))
    memory = [1.0] * len(nodes)
    with Count():
        saved, recomputed = rc.solve(memory, g, 4.0, None, nodes)
    check(not ran and Count.ops == 0, "the solver ran %d nodes and dispatched %d ops" % (len(ran), Count.ops))
    check(sorted(saved + recomputed) == list(range(len(nodes))) and 2 <= len(saved) <= 4,
          "the solver saves what fits the budget (4 of 12 equal candidates): saved %s" % saved)
    # below the least (it saves 2.0), the least's plan cut to the budget (1.0: one saved): the second
    # call starts from the first answer's least plan ("start"), which answers what searching the least
    # again does
    from rematplan import _lib
    least = rc.solve(memory, g, 1.0, None, nodes)
    plain = _lib.plan_graph
    try:
        _lib.plan_graph = lambda graph, b: plain({k: v for k, v in graph.items() if k != "start"}, b)
        searched = rc.solve(memory, g, 1.0, None, nodes)
    finally:
        _lib.plan_graph = plain
    check(least == searched and len(least[0]) == 1, "below the least, the least's plan from its start (%s) as "
          "searched (%s), cut to the budget" % (least, searched))


def test_library(check):
    """A library that is not libremat, lacks a function or has another version: a LibraryError that
    says so (in a child process: the library is loaded once per process)."""
    cc = os.environ.get("CC", "cc")
    with tempfile.TemporaryDirectory() as d:
        cases = {"partial": 'const char *rm_version(void) { return "%s"; }' % rematplan.__version__,
                 "version": 'const char *rm_version(void) { return "9.9.9"; }\nint rm_status_name, rm_parse_size, '
                            'rm_plan_graph, rm_plan_chain, rm_price_graph;',
                 "other": "int not_remat;"}
        for name, src in cases.items():
            c, so = os.path.join(d, name + ".c"), os.path.join(d, name + ".so")
            with open(c, "w") as f:
                f.write(src + "\n")
            if subprocess.run([cc, "-shared", "-fPIC", "-o", so, c], capture_output=True).returncode != 0:
                check(False, "%s -shared failed" % cc)
                continue
            env = dict(os.environ, REMAT_LIBRARY=so)
            env.pop("LD_PRELOAD", None)
            out = subprocess.run([sys.executable, "-c", "import rematplan; rematplan.libremat_version()"],
                                 capture_output=True, text=True, env=env)
            want = {"partial": "lacks", "version": "9.9.9", "other": "not libremat"}[name]
            check(out.returncode != 0 and "LibraryError" in out.stderr and want in out.stderr and
                  "AttributeError" not in out.stderr and "TypeError" not in out.stderr,
                  "%s library: a clear LibraryError: %s" % (name, out.stderr.strip().splitlines()[-1:]))
    check(rematplan.libremat_version() == rematplan.__version__, "libremat's version is the package's")


def child(code, lib, timeout=60):
    """code in a fresh Python with REMAT_LIBRARY=lib (the library is loaded once per process): its
    CompletedProcess, or None when it ran past timeout (a hang)."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, REMAT_LIBRARY=lib))
    except subprocess.TimeoutExpired:
        return None


def last_line(out):
    lines = out.stderr.strip().splitlines() if out is not None else ["(a hang: killed after a minute)"]
    return lines[-1] if lines else ""


def refused(out, want):
    """The child ended by itself (no signal, no hang) with a LibraryError that says `want`."""
    return out is not None and out.returncode > 0 and "LibraryError" in last_line(out) and want in last_line(out)


def bad_libraries(d, data):
    """(what, path, the reason the LibraryError must give) for files that are not a complete library
    of this machine, made from libremat's bytes `data` in folder d."""
    def put(name, b):
        path = os.path.join(d, name)
        with open(path, "wb") as f:
            f.write(b)
        return path
    os.mkfifo(os.path.join(d, "fifo.so"))
    os.mkdir(os.path.join(d, "dir.so"))
    order = "<" if data[5] == 1 else ">"
    other = 183 if struct.unpack(order + "H", data[18:20])[0] != 183 else 62
    cases = [("a truncated copy (SIGBUS before)", put("cut.so", data[:20000]), "truncated"),
             ("a copy missing its last third", put("short.so", data[:len(data) * 2 // 3]), "truncated"),
             ("an empty file", put("empty.so", b""), "empty"),
             ("a text file", put("text.so", b"not a library\n"), "not an ELF file"),
             ("a FIFO (a hang before)", os.path.join(d, "fifo.so"), "FIFO"),
             ("a directory", os.path.join(d, "dir.so"), "directory"),
             ("a device", "/dev/zero", "character device"),
             ("another machine's library", put("arch.so", data[:18] + struct.pack(order + "H", other) + data[20:]),
              "AArch64" if other == 183 else "x86-64"),
             ("a 32-bit library", put("elf32.so", data[:4] + b"\x01" + data[5:]), "32-bit")]
    if os.geteuid() != 0:  # root reads any file
        os.chmod(put("unreadable.so", data), 0)
        cases.append(("an unreadable file", os.path.join(d, "unreadable.so"), "cannot be opened"))
    return cases


def test_library_files(check):
    """Issue 36: whatever REMAT_LIBRARY names that is not a regular, complete, readable ELF shared
    object of this machine is a LibraryError giving the reason, before dlopen: never a signal (a
    truncated file was SIGBUS) or a hang (a FIFO blocked dlopen forever); also a file rewritten while
    it is loaded. And the library is loaded and checked before plan() runs the model."""
    real = rematplan._lib.lib().path
    with open(real, "rb") as f:
        data = f.read()
    with tempfile.TemporaryDirectory() as d:
        for what, path, want in bad_libraries(d, data):
            out = child("import rematplan; rematplan.libremat_version()", path)
            check(refused(out, want) and path in last_line(out),
                  "REMAT_LIBRARY naming %s: a LibraryError saying %r, not a signal or a hang: exit %s, %s"
                  % (what, want, out and out.returncode, last_line(out)))
        moving = os.path.join(d, "moving.so")
        with open(moving, "wb") as f:
            f.write(data)
        out = child("import ctypes, rematplan\nreal = ctypes.CDLL\n\ndef rewrite(path, *a, **k):\n"
                    "    with open(path, 'ab') as f:\n        f.write(b'x')\n    return real(path, *a, **k)\n\n"
                    "ctypes.CDLL = rewrite\nrematplan.libremat_version()\n", moving)
        check(refused(out, "changed while it was loaded"), "a library rewritten while it is loaded: a LibraryError: "
              "exit %s, %s" % (out and out.returncode, last_line(out)))
        model = ("import torch, rematplan\nran = []\n\nclass M(torch.nn.Module):\n    def __init__(self):\n"
                 "        super().__init__()\n        self.fc = torch.nn.Linear(4, 4)\n\n    def forward(self, x):\n"
                 "        ran.append(1)\n        return self.fc(x).tanh().sum()\n\n"
                 "try:\n    rematplan.plan(M(), (torch.randn(8, 4),), 0.5)\nfinally:\n"
                 "    print('the model ran %d times' % len(ran))\n")
        other = os.path.join(d, "text.so")
        for what, lib in (("a truncated library", os.path.join(d, "cut.so")), ("a file that is not libremat", other)):
            out = child(model, lib)
            check(refused(out, lib) and "the model ran 0 times" in out.stdout,
                  "plan() with %s: a LibraryError before the model runs: exit %s, %s, %s"
                  % (what, out and out.returncode, out and out.stdout.strip(), last_line(out)))


def test_budget_limit(check, remat):
    """Issue 36: one limit on a budget in bytes, 2^60, with the CLI's words, checked before the
    model runs (Python took 2^70)."""
    from rematplan.planning import budget_bytes
    ran = []

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            ran.append(1)
            return self.fc(x).tanh().sum()
    try:
        quiet(rematplan.plan, M(), (torch.randn(8, 4),), 1 << 70)
        msg = "accepted"
    except ValueError as e:
        msg = str(e)
    cli = subprocess.run([remat, "plan", "--memory-budget", str(1 << 70)], capture_output=True, text=True)
    words = cli.stderr.strip().split("--memory-budget: ")[-1]
    check(cli.returncode == 2 and words in msg and "at most 2^60 bytes" in msg and not ran,
          "a budget of 2^70 bytes: refused as the CLI refuses it (%r), before the model runs (it ran %d times): %s"
          % (words, len(ran), msg))
    check(budget_bytes(1 << 60, 1) == 1 << 60, "a budget of 2^60 bytes is taken")


def test_plan_graph_errors(check):
    """Issue 36: plan_graph on a malformed graph raises RematError saying what is wrong (libremat's
    own message where libremat checks it), never a raw KeyError or TypeError; a graph without names
    or edges (libremat's defaults) plans."""
    nd = {"forward_time": 1.0, "backward_time": 2.0, "output_bytes": 1000}
    good = {"nodes": [dict(nd, name="n%d" % i) for i in range(6)],
            "edges": [{"producer": i, "consumer": i + 1} for i in range(5)]}
    bad = [({}, "nodes"), ([], "not a dict"), ("graph.json", "not a dict"), ({"nodes": []}, "nodes"),
           ({"nodes": [{}]}, "forward_time"), (dict(good, edges=[{"producer": 0}]), "producer"),
           (dict(good, edges=5), "edges"), ({"nodes": [dict(nd, forward_time="1")]}, "forward_time"),
           ({"nodes": [dict(nd, name="a"), dict(nd, name="a")]}, "both named 'a'"),
           ({"nodes": [nd, dict(nd, part_of=7)]}, "part_of"), ({"nodes": [dict(nd, name=5)]}, "name"),
           ({"nodes": [dict(nd, name="x" * 300)]}, "200 bytes"), (dict(good, extra=object()), "not JSON"),
           ({"nodes": [dict(nd, forward_time=float("nan"))]}, "not JSON")]
    for g, want in bad:
        try:
            rematplan.plan_graph(g, 4000)
            msg = "planned"
        except rematplan.RematError as e:
            msg = "RematError: %s" % e
        except Exception as e:  # noqa: B902: what the test is about
            msg = "%s: %s" % (type(e).__name__, e)
        check(msg.startswith("RematError") and want in msg, "plan_graph(%.60r): a RematError saying %r: %s"
              % (g, want, msg[:200]))
    bare = {"nodes": [dict(nd) for _ in range(6)]}
    bare["edges"] = good["edges"]
    outs = []
    for g in (bare, {"nodes": bare["nodes"]}):
        try:
            P = rematplan.plan_graph(g, 3000)
            outs.append(P.planner)
        except rematplan.BudgetError as e:
            outs.append(rematplan.plan_graph(g, e.least_bytes).planner)
        except Exception as e:  # noqa: B902
            outs.append("%s: %s" % (type(e).__name__, e))
    check(all(o.startswith(("rm_plan_graph", "store-all")) for o in outs), "graphs without names or edges plan: %s" % outs)


def test_h200_profile(check):
    """The GPT-2 124M profile today's rematplan made on an H200 (measured store-all 9378 MiB against
    7977 MiB in the profile): scaled to the measured step, plans at 0.3/0.5/0.7 of it predict a
    peak within the budget, the least names one that plans, and the budgets are monotone."""
    with open(os.path.join(HERE, "data", "gpt2_h200_graph.json")) as f:
        g = json.load(f)
    measured = 9378 << 20
    top = rematplan.planning.store_all(g)["store_all_bytes"]
    check(abs(top - (7977 << 20)) < (1 << 20), "the H200 profile's store-all is 7977 MiB: %d" % top)
    scale = measured / top
    ok, least = [], None
    for f in (0.3, 0.5, 0.7, 1.0):
        try:
            P = rematplan.plan_graph(g, f, scale=scale, store_all_bytes=measured)
            ok.append(P.peak_bytes <= P.budget_bytes)
        except rematplan.BudgetError as e:
            least = e.least_bytes
            P = rematplan.plan_graph(g, least, scale=scale, store_all_bytes=measured)
            ok.append(P.peak_bytes <= least)
    check(all(ok), "H200 GPT-2: plans scaled to the measured store-all predict peaks within budget: %s" % ok)
    check(least is None or least > 0.3 * measured, "H200 GPT-2: a refusal names a least above the budget")


def run(check, remat):
    import time
    for t in (test_small, test_untraceable, test_compile_solver, test_library, test_library_files,
              test_plan_graph_errors, test_h200_profile):
        t0 = time.perf_counter()
        t(check)
        print("%s: %.1f s" % (t.__name__, time.perf_counter() - t0))
    test_budget_limit(check, remat)
