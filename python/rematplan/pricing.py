"""What an op costs: FLOPs and bytes, priced by rates calibrated once by
timing a few operations on this device.

A plan that follows each op's measured time changes from one capture to
the next (a shared 2-core machine's timings move by tens of percent, and
the capture's own dispatch mode inflates every op), so the planner prices
ops from what does not move: an op's time is

    time = max(FLOPs / flop_rate, bytes moved / byte_rate) + per_op

(a roofline plus the framework's cost of one op), where the byte rate is
that of the op's class: plain memory ops (a copy, an add) run at the
memory's rate, but drawing random numbers (a dropout's mask: bernoulli_)
and transcendental functions (exp, softmax, gelu) run many times slower
per byte on a CPU (bernoulli_ 20-60x slower than mul here: priced at mul's
rate, T5's 44 recomputed dropout masks were predicted at 3 ms and took
200 ms). The rates are measured
apart from the model, without any mode: the FLOP rate on the captured
step's own heaviest matrix products (their shapes, dtypes and device
replayed on random tensors), each of its heaviest convolutions' FLOP rate
on its own shapes (a small or grouped convolution runs several times
slower per FLOP than a product), the byte rate on an elementwise op over a
tensor of the step's typical size, each slow class's functions on a
tensor of up to 4 MB (random: bernoulli_, normal_, uniform_; each
transcendental function by name), every other memory op that moves a
share of the step's bytes by name, replayed at its largest shape in the
step (a BatchNorm's statistics run 30x slower per byte than mul), the
cost of one op on a tiny one, and the cost of the recording mode per op
(the applied plan's dispatch mode): medians of several runs, rounded to a
grid of 2^(1/4) steps. A view moves no bytes: it costs one op.

Each rate is measured once per process, device and thread count (and per
tensor size or matrix product's shapes) and remembered: captures of the
same model in one process get the same rates, hence the same plan, however
the machine's load moves meanwhile (under a sanitizer two measurements of
gelu's rate fell on two steps of the grid). REMATPLAN_RATES=FILE keeps
them in a JSON file too, so later processes price the same way; delete the
file (or `forget_rates()`) to measure again.

FLOPs are counted by our own formulas (the same on every torch version):
matrix products, convolutions and attention; other ops count one FLOP per
output element (they are priced by their bytes).
"""
import functools
import json
import math
import os
import statistics
import time

import torch

from ._tree import flat_tensors, map_tree

GRID = 4  # rates rounded to 2^(k / GRID)


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _mm(args):
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    if len(ts) < 2:
        return 0.0
    a, b = ts[-2], ts[-1]
    if a.dim() < 2 or b.dim() < 2:
        return 0.0
    batch = _numel(a.shape[:-2]) if a.dim() > 2 else 1
    return 2.0 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]


def _conv(args, out):
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    if len(ts) < 2 or not isinstance(out, torch.Tensor):
        return 0.0
    x, w = ts[0], ts[1]
    transposed = len(args) > 6 and args[6] is True
    if transposed:  # every input element meets every (output channel / groups) x kernel weight
        return 2.0 * x.numel() * w.shape[1] * _numel(w.shape[2:])
    return 2.0 * out.numel() * w.shape[1] * _numel(w.shape[2:])


def _attention(args):
    ts = [a for a in args if isinstance(a, torch.Tensor)]
    if len(ts) < 3 or ts[0].dim() < 3:
        return 0.0
    q, k, v = ts[0], ts[1], ts[2]
    lq, e = q.shape[-2], q.shape[-1]
    s, ev = k.shape[-2], v.shape[-1]
    return 2.0 * _numel(q.shape[:-2]) * lq * s * (e + ev)


_MM = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "_addmm_activation"}
_CONV = {"convolution", "_convolution", "mkldnn_convolution", "cudnn_convolution", "convolution_overrideable",
         "_slow_conv2d_forward", "thnn_conv2d", "slow_conv3d_forward", "cudnn_convolution_transpose",
         "slow_conv_transpose2d", "slow_conv_dilated2d"}


# Ops that read only their tensor argument's shape, dtype and device (the first tensor argument): the
# capture records no read of it (no edge in the graph), and a recipe replays them from the layout they
# made (recompute.py), so rebuilding a dropout's noise never rebuilds the tensor it was made like.
SHAPE_ONLY = {"aten.empty_like.default": None, "aten.zeros_like.default": 0, "aten.ones_like.default": 1,
              "aten.full_like.default": "fill"}

_RANDOM = {"bernoulli", "bernoulli_", "normal", "normal_", "uniform_", "rand", "randn", "rand_like", "randn_like",
           "randint", "randint_like", "random_", "native_dropout", "multinomial", "exponential_", "geometric_",
           "log_normal_", "cauchy_", "randperm", "poisson"}
# transcendental functions, each timed by name on a tensor (x: the tensor; rows of 128 for the softmaxes)
_MATH = {"exp": lambda x: torch.exp(x), "log": lambda x: torch.log(x), "tanh": lambda x: torch.tanh(x),
         "sigmoid": lambda x: torch.sigmoid(x), "gelu": lambda x: torch.nn.functional.gelu(x),
         "silu": lambda x: torch.nn.functional.silu(x), "erf": lambda x: torch.erf(x),
         "rsqrt": lambda x: torch.rsqrt(x), "sqrt": lambda x: torch.sqrt(x), "pow": lambda x: torch.pow(x, 3.0),
         "sin": lambda x: torch.sin(x), "cos": lambda x: torch.cos(x),
         "_softmax": lambda x: torch.softmax(x.view(-1, 128), -1),
         "_safe_softmax": lambda x: torch.softmax(x.view(-1, 128), -1),
         "_log_softmax": lambda x: torch.log_softmax(x.view(-1, 128), -1)}
_MATH_ALIAS = {"softmax": "_softmax", "log_softmax": "_log_softmax", "exp_": "exp", "tanh_": "tanh",
               "sigmoid_": "sigmoid", "silu_": "silu", "gelu_": "gelu", "rsqrt_": "rsqrt", "sqrt_": "sqrt",
               "log_": "log", "erf_": "erf", "pow_": "pow"}


def draw_probability(name, args, kwargs):
    """A Bernoulli draw's probability (bernoulli_.float, bernoulli.p: dropout's keep probability),
    rounded to 0.1, or None."""
    if not name.startswith("aten.bernoulli"):
        return None
    p = args[1] if len(args) > 1 else kwargs.get("p")
    return round(float(p), 1) if isinstance(p, float) and 0 <= p <= 1 else None


def op_class(name, random=False, p=None):
    """The class an op's bytes are priced in: "random" (or "bernoulli <p>": a CPU draw at p = 0.5
    takes twice as long as one at 0.9, dropout's usual keep probability), a transcendental
    function's name, or None (memory's rate)."""
    base = name.replace("aten.", "").split(".")[0]
    if random or base in _RANDOM:
        return "random" if p is None else "bernoulli %.1f" % p
    base = _MATH_ALIAS.get(base, base)
    return base if base in _MATH else None


def kind(name):
    """'mm' (matrix products, convolutions, attention: priced by FLOPs) or 'mem' (by bytes)."""
    base = name.replace("aten.", "").split(".")[0]
    if base in _MM or base in _CONV or "scaled_dot_product" in base or "attention_forward" in base:
        return "mm"
    return "mem"


def op_flops(func, args, kwargs, out):
    """The forward FLOPs of an aten op on these arguments."""
    base = str(func).replace("aten.", "").split(".")[0]
    try:
        if base in _MM:
            return _mm(args)
        if base in _CONV:
            return _conv(args, out if isinstance(out, torch.Tensor) else next(iter(flat_tensors(out)), None))
        if "scaled_dot_product" in base or "attention_forward" in base:
            return _attention(args)
    except (TypeError, IndexError, ValueError):
        return 0.0
    return float(sum(t.numel() for t in flat_tensors(out)))


def moved_bytes(ins, outs, func=None):
    """Bytes an op reads and writes (each tensor's elements, not its whole storage); none for a view
    (view, t, permute, _unsafe_view, ...: a new tensor over its input's storage, no element read)."""
    if func is not None and is_view(func):
        return 0.0
    return float(sum(t.numel() * t.element_size() for t in ins) + sum(t.numel() * t.element_size() for t in outs))


def is_view(func):
    """Whether an aten op returns a view of an input (its schema: an alias that is not written)."""
    try:
        rets = func._schema.returns
    except AttributeError:
        return False
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


def _grid(x):
    if not (x > 0) or not math.isfinite(x):
        return x
    return 2.0 ** (round(math.log2(x) * GRID) / GRID)


class Rates:
    """flop_rate (FLOP per ms), byte_rate (bytes per ms), per_op, mode_op and record_op (ms), class_rates: the
    byte rate of each slow class (op_class), and op_rates: the byte rate of each memory op (by name)
    replayed at the step's largest shape for it; each at most byte_rate."""

    def __init__(self, flop_rate, byte_rate, per_op, mode_op=0.0, class_rates=None, op_rates=None):
        self.flop_rate, self.byte_rate, self.per_op, self.mode_op = flop_rate, byte_rate, per_op, mode_op
        self.flop_products = 0
        self.class_rates = dict(class_rates or {})
        self.op_rates = dict(op_rates or {})
        self.record_op = 0.0  # what recording an op's recipe adds to mode_op (an op the plan recomputes)
        # convolutions' FLOP rates by their shapes (_spec_key), and the rate of those not measured
        self.conv_rates, self.conv_rate = {}, None
        self.mask_element = 0.0  # ms per element of a dropout's noise rebuilt from its kept mask (0: unmeasured)

    def mask_time(self, numel, nbytes):
        """A dropout's noise rebuilt from its mask (masks._Mask.noise: the bits unpacked, cast, times
        the value): measured per element where calibrate() was given the rebuild, else by its bytes."""
        if self.mask_element > 0:
            return numel * self.mask_element + 3 * self.per_op
        return self.time(numel, numel // 8 + 4 * numel + 3 * nbytes)

    def time(self, flops, moved, cls=None, name=None, flop_rate=None):
        rate = self.class_rates.get(cls, self.byte_rate) if cls else self.byte_rate
        if name in self.op_rates and not (cls or "").startswith(("random", "bernoulli")):
            rate = self.op_rates[name]  # measured at its own shape: before the class's 1-D tensor
        return max(flops / (flop_rate or self.flop_rate), moved / min(rate, self.byte_rate)) + self.per_op

    @property
    def rebuild_op(self):
        """The Python a rebuild adds to each op it replays (about two dispatches' worth, and one op)."""
        return self.per_op + 2 * self.mode_op

    def op_time(self, op):
        """An op of the capture (.name, .random, .flops, .moved), priced; a convolution at the FLOP rate
        measured on its own shapes (or the convolutions' rate)."""
        flop_rate = None
        if self.conv_rates and _is_conv(op.name):
            flop_rate = self.conv_rates.get(_spec_key(op), self.conv_rate)
        return self.time(op.flops, op.moved, op_class(op.name, op.random, getattr(op, "p", None)), op.name,
                         flop_rate)

    def __repr__(self):
        slow = ", ".join("%s %.3g" % (k, v / 1e6) for k, v in sorted(self.class_rates.items()))
        ops = ", ".join("%s %.3g" % (k.replace("aten.", "").split(".")[0], v / 1e6)
                        for k, v in sorted(self.op_rates.items()) if v < self.byte_rate)
        return "Rates(%.3g GFLOP/s, %.3g GB/s, %.1f us per op, %.1f us per recorded op; GB/s of %s; of %s)" % (
            self.flop_rate / 1e6, self.byte_rate / 1e6, self.per_op * 1e3, self.mode_op * 1e3, slow or "-",
            ops or "-")


class TensorSpec:
    """A tensor argument as calibrate() replays it: its shape, dtype and device, and its strides where
    it is not contiguous (a leaf of map_tree, not a tuple: map_tree walks into tuples). Its repr names a
    rate in the REMATPLAN_RATES file. (Without the strides, ConvNeXt's channels-last depthwise
    convolutions were replayed contiguous, on another kernel: its 22 priced at 21.2 ms, 8.2 in the step.)"""
    __slots__ = ("shape", "dtype", "device", "stride")

    def __init__(self, t):
        self.shape, self.dtype, self.device = tuple(t.shape), t.dtype, t.device
        self.stride = None if t.is_contiguous() else tuple(t.stride())

    def __repr__(self):
        if self.stride is None:
            return "T(%r, %s, %s)" % (self.shape, self.dtype, self.device)
        return "T(%r, %s, %s, stride %r)" % (self.shape, self.dtype, self.device, self.stride)

    def made(self):
        """A tensor of this shape (and strides): random where floating point, else zeros."""
        if self.stride is None:
            t = torch.empty(self.shape, dtype=self.dtype, device=self.device)
        else:
            t = torch.empty_strided(self.shape, self.stride, dtype=self.dtype, device=self.device)
        return t.normal_() if t.is_floating_point() else t.zero_()


def spec(args, kwargs):
    """args and kwargs with every tensor replaced by its TensorSpec: what calibrate() replays an op on."""
    def one(x):
        return TensorSpec(x) if isinstance(x, torch.Tensor) else x
    return map_tree(tuple(args), one), map_tree(dict(kwargs), one)


def _made(v):
    """spec()'s arguments with made-up tensors of those shapes."""
    return map_tree(v, lambda x: x.made() if isinstance(x, TensorSpec) else x)


def _ms(fn, runs, device):
    """The median wall time of fn() in ms over `runs` runs after one more."""
    cuda = device is not None and torch.device(device).type == "cuda"
    times = []
    for i in range(runs + 1):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize(device)
        if i:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


_memo = {}          # (device, threads, what) -> a rate, measured once per process
_memo_loaded = [None]  # the REMATPLAN_RATES file read into _memo


def forget_rates():
    """Drops the remembered rates (and REMATPLAN_RATES's file): the next capture measures anew."""
    _memo.clear()
    path = os.environ.get("REMATPLAN_RATES")
    if path and os.path.isfile(path):
        os.remove(path)
    _memo_loaded[0] = None


def _load_memo():
    path = os.environ.get("REMATPLAN_RATES")
    if not path or _memo_loaded[0] == path:
        return
    _memo_loaded[0] = path
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return  # none yet, or unreadable: measured and written anew
    if isinstance(saved, dict):
        for k, v in saved.items():
            if isinstance(v, (int, float)) and v > 0 and math.isfinite(v):
                _memo.setdefault(k, float(v))


def _save_memo():
    path = os.environ.get("REMATPLAN_RATES")
    if not path:
        return
    tmp = path + ".tmp%d" % os.getpid()
    try:
        with open(tmp, "w") as f:
            json.dump(_memo, f, indent=0, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        pass  # a rates file that cannot be written costs only the next process's stability


def _remembered(dev, what, measure):
    """measure() the first time (dev, threads, what) is asked for in this process, the same value
    after."""
    key = "%s|%d|%s" % (dev, torch.get_num_threads(), what)
    if key not in _memo:
        _memo[key] = float(measure())
    return _memo[key]


def _keeps_rng(fn):
    """fn leaves the CPU's RNG state, and each CUDA device's where CUDA is initialized (never
    initializing it), as it found them: the rates are measured on random tensors (normal_, rand,
    bernoulli_) drawn from the global generators, and the first plan() of a process (or after
    forget_rates()) moved them, so a script seeded once drew other batches and masks after it."""
    @functools.wraps(fn)
    def kept(*args, **kwargs):
        cpu = torch.get_rng_state()
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_rng_state(cpu)
            if cuda is not None:
                torch.cuda.set_rng_state_all(cuda)
    return kept


@_keeps_rng
def calibrate(ops, device=None, act_numel=1 << 20, recording=None, mask_rebuild=None):
    """Rates for ops with .name, .flops and .spec (what calibrate replays), on device. recording(module,
    plan): a context that runs module's forward as an applied plan does (forward.Forward);
    mask_rebuild(device, n): a function rebuilding a dropout's noise of n elements from its mask as the
    runtime does (timed per element: priced at bytes alone, BART's were 4-5x low)."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    _load_memo()
    known = len(_memo)
    per_op = _remembered(dev, "per_op", lambda: _per_op(dev))
    mode_op = _remembered(dev, "mode_op %s" % ("recording" if recording else "passing"),
                          lambda: _mode_op(dev, recording))
    record_op = 0.0 if not recording else max(
        _remembered(dev, "record_op", lambda: _mode_op(dev, recording, recorded=200)) - mode_op, 0.0)
    k = min(max(int(act_numel), 1 << 16), 1 << 24)
    k = 1 << (k.bit_length() - 1)  # a power of two: models of about the same size share the rate
    with torch.no_grad():
        byte_rate = _remembered(dev, "bytes %d" % k, lambda: _byte_rate(dev, k, per_op))
        kc = min(k, 1 << 20)
        classes = {op_class(o.name, o.random, getattr(o, "p", None)) for o in ops} - {None}
        class_rates = {c: _remembered(dev, "class %s %d" % (c, kc), lambda c=c: _class_rate(c, dev, kc, per_op))
                       for c in sorted(classes)}
        rates = []
        heavy = {}
        for o in ops:
            if getattr(o, "spec", None) is not None and o.flops > 0:
                key = repr(o.spec)
                heavy.setdefault(key, [o, 0.0])[1] += o.flops
        for key, (o, _) in sorted(heavy.items(), key=lambda v: -v[1][1])[:3]:
            r = _remembered(dev, "flops " + key, lambda o=o: _flop_rate(o, dev, per_op))
            if r > 0:
                rates.append((r, o.flops))
        flop_rate = _weighted_median(rates) if rates else 50e6
        op_rates = _op_rates(ops, dev, per_op)
        conv_rates = _conv_rates(ops, dev, per_op)
    mask_element = 0.0
    if mask_rebuild is not None and any(o.random for o in ops):  # (a step that draws may have dropout masks)
        n = 1 << 20
        mask_element = _remembered(dev, "mask %d" % n, lambda: _ms(mask_rebuild(dev, n), 5, dev) / n)
    if len(_memo) != known:
        _save_memo()
    R = Rates(_grid(flop_rate), _grid(byte_rate), _grid(per_op), _grid(mode_op),
              {c: _grid(r) for c, r in class_rates.items()}, {n: _grid(r) for n, r in op_rates.items()})
    R.record_op = _grid(record_op) if record_op > 0 else 0.0
    R.mask_element = _grid(mask_element) if mask_element > 0 else 0.0
    R.flop_products = len(rates)  # products the FLOP rate was measured on (0: the fallback's 50 GFLOP/s)
    if conv_rates:
        R.conv_rates = {k: _grid(r) for k, (r, _) in conv_rates.items()}
        R.conv_rate = _grid(_weighted_median(list(conv_rates.values())))
    return R


def _per_op(dev, n=200):
    """One op as the step runs it (autograd recording): the framework's cost of an op, in ms."""
    a = torch.ones(1, device=dev, requires_grad=True)
    return _ms(lambda: [torch.mul(a, 2.0) for _ in range(n)], 5, dev) / n


class _Chain(torch.nn.Module):
    """n small products, each of the one before: each saves its inputs for the backward (the pack
    hook sees them), and while the first op's output lives, as in a step, every op's arguments are
    looked through for what recipes make."""

    def __init__(self, n):
        super().__init__()
        self.n = n

    def forward(self, x, w):
        for _ in range(self.n):
            x = torch.mul(x, w)
        return x


def _mode_op(dev, recording=None, n=200, recorded=1):
    """What the applied plan's recording mode adds to one op of the forward, in ms: _Chain run in it
    (recording(module, modes): its first `recorded` ops recomputed), against the same run plainly.
    Without recording: a mode that passes each op on, the least any mode costs."""
    from torch.utils._python_dispatch import TorchDispatchMode
    a, w = torch.ones(1, device=dev, requires_grad=True), torch.ones(1, device=dev, requires_grad=True)
    m = _Chain(n)
    modes = {("", 0, i): {0: "once"} for i in range(recorded)}

    class Passing(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls):  # as the runtime's mode (recompute.Step): no dynamo guard
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def in_mode():
        with (recording(m, modes) if recording else Passing()):
            m(a, w)
    return max((_ms(in_mode, 5, dev) - _ms(lambda: m(a, w), 5, dev)) / n, 1e-9)


def _byte_rate(dev, k, per_op):
    """Bytes per ms of an elementwise op over k elements, tensors taken in turn (as a step meets
    them: not the one just written, still in the cache)."""
    xs = [torch.ones(k, device=dev) for _ in range(8)]
    turn = [0]

    def mul():
        x = xs[turn[0] % 8]
        turn[0] += 1
        return torch.mul(x, x)
    return 2 * k * 4 / max(_ms(mul, 15, dev) - per_op, 1e-6)


def _flop_rate(o, dev, per_op):
    """FLOPs per ms of a matrix product replayed on made-up inputs of its shapes (0: cannot be)."""
    try:
        args, kwargs = _made(o.spec[0]), _made(o.spec[1])  # (under no_grad: the FLOPs alone)
        f = o.spec[2]
        return o.flops / max(_ms(lambda: f(*args, **kwargs), 5, dev) - per_op, 1e-6)
    except Exception:  # noqa: B902: an op that cannot be replayed on made-up inputs is not priced by it
        return 0.0


REPLAY_SHARE = 0.01  # memory ops replayed at their own shape: those moving this share of the step's bytes


def _op_rates(ops, dev, per_op):
    """{op name: bytes per ms}: each memory op that moves a share of the step's bytes, replayed at its
    largest shape in the step on made-up tensors (a BatchNorm's statistics over (N, H, W) ran at 5 GB/s
    where an elementwise op ran at 160, a log_softmax over rows of 50257 at 2 GB/s: priced at the
    elementwise rate, MobileNetV3's rebuilt BatchNorms were predicted at 1/20 of what they took)."""
    biggest, total = {}, {}
    for o in ops:
        if getattr(o, "spec", None) is None or o.moved <= 0 or o.random or kind(o.name) == "mm" \
                or o.name in SHAPE_ONLY or op_class(o.name) == "random" or _draws(o.spec):
            continue  # (a draw replayed would advance a generator the model holds)
        total[o.name] = total.get(o.name, 0.0) + o.moved
        if o.moved > biggest.get(o.name, (0.0, None))[0]:
            biggest[o.name] = (o.moved, o)
    share = REPLAY_SHARE * sum(total.values())
    out = {}
    for name in sorted(biggest):
        o = biggest[name][1]
        if total[name] >= share:
            r = _remembered(dev, "op %s %r" % (name, o.spec[:2]), lambda o=o: _replay_rate(o, dev, per_op))
            if r > 0:
                out[name] = r
    return out


CONV_SPECS = 32  # convolutions replayed at their own shapes: the heaviest this many (by FLOPs in the step)


def _is_conv(name):
    return name.replace("aten.", "").split(".")[0] in _CONV


def _spec_key(o):
    return repr(o.spec[:2]) if getattr(o, "spec", None) is not None else None


def _conv_rates(ops, dev, per_op):
    """{spec key: (FLOPs per ms, the step's FLOPs at it)}: the step's heaviest convolutions replayed at
    their own shapes. A convolution runs far from a matrix product's rate, and a small or grouped one
    further still: priced at the products' rate, MobileNetV3's 62 were 10.5-14.7 ms of the 24-25 ms
    they take in a warm forward, ConvNeXt's 22 3.0 of 8.2, and plans recomputed them as if cheap."""
    heavy = {}
    for o in ops:
        if _is_conv(o.name) and o.flops > 0 and getattr(o, "spec", None) is not None:
            heavy.setdefault(_spec_key(o), [o, 0.0])[1] += o.flops
    out = {}
    for key, (o, total) in sorted(heavy.items(), key=lambda v: -v[1][1])[:CONV_SPECS]:
        r = _remembered(dev, "flops " + repr(o.spec), lambda o=o: _flop_rate(o, dev, per_op))
        if r > 0:
            out[key] = (r, total)
    return out


def _draws(spec):
    """Whether an op's arguments hold a generator."""
    found = []
    map_tree(spec[:2], lambda x: found.append(x) if isinstance(x, torch.Generator) else x)
    return bool(found)


def _replay_rate(o, dev, per_op):
    """Bytes per ms of a memory op replayed on made-up inputs of its shapes (0: cannot be)."""
    try:
        args, kwargs = _made(o.spec[0]), _made(o.spec[1])
        f = o.spec[2]
        return o.moved / max(_ms(lambda: f(*args, **kwargs), 3, dev) - per_op, 1e-6)
    except Exception:  # noqa: B902: an op that cannot be replayed on made-up inputs keeps its class's rate
        return 0.0


def _class_rate(c, dev, k, per_op):
    """The byte rate (read and written) of a slow class (op_class) on k elements."""
    x = torch.rand(k, device=dev) + 0.5  # positive: log, sqrt and rsqrt stay finite
    if c == "random" or c.startswith("bernoulli "):
        p = 0.5 if c == "random" else float(c.split()[1])
        f = lambda: x.bernoulli_(p)  # noqa: E731
    else:
        f = lambda: _MATH[c](x)  # noqa: E731
    return 2 * k * 4 / max(_ms(f, 5, dev) - per_op, 1e-6)


def _weighted_median(pairs):
    """The median of values weighted by their weights (the ops that do most of the work count most)."""
    pairs = sorted(pairs)
    total = sum(w for _, w in pairs)
    acc = 0.0
    for v, w in pairs:
        acc += w
        if acc >= total / 2:
            return v
    return pairs[-1][0]
