"""What an op allocates while it runs beyond what it returns (its
workspace), measured on the captured step itself, so the graph's bytes are
what the allocator counts:
  - CUDA: torch.cuda.max_memory_allocated (reset before each op, and at
    each autograd Node's end) above the allocation before it;
  - CPU: PyTorch's allocator events (the profiler's memory events) of one
    captured pass: every forward op runs inside a marker event, every
    autograd Node inside the engine's own "evaluate_function" event; the
    events between a marker's start and end are that op's, and their running
    sum's high-water mark above its start is its peak.
Also the profiler as rematplan runs it (Events: the memory events, not
parsed into the profiler's tables; allocator_only: no op event either, for
the measured steps, _verify.measure) and Python's collections while plan()
runs (settled, collect).
"""
import bisect
import contextlib
import gc

import torch


def _t(e):
    return e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1000


def _dur(e):
    return e.duration_ns() if hasattr(e, "duration_ns") else e.duration_us() * 1000


_SETTLING = {"depth": 0, "frozen": False}


@contextlib.contextmanager
def settled():
    """While plan() runs, what existed before it is set aside from Python's collector (gc.freeze, at
    its start, without a collection): the collections plan() makes before each measured step
    (_verify.measure) and after the lifetimes forward then scan only what plan() itself made (a
    full one took 0.18 s with transformers and torch 2 loaded). What was set aside cannot be freed
    during a measured step either, which is what the collection before it ensures for the rest
    (garbage from before plan() is freed after it, by Python's own next collection). Nothing is
    frozen where the program freezes objects itself (gc.get_freeze_count()): collect() is then a
    full collection.
    Autocast's cache of parameter casts is emptied at the start and at the end: plan() called inside
    the training's autocast context records its step making the casts, as a step in a fresh context
    does (with the casts of a step before it cached, the recorded step had fewer ops, and the plan's
    op keys named other ops in training), and leaves none of its own casts held by the user's
    context (memory above the budget until that context exits)."""
    outer = _SETTLING["depth"] == 0
    _SETTLING["depth"] += 1
    if outer:
        torch.clear_autocast_cache()
    if outer and hasattr(gc, "freeze") and not gc.get_freeze_count():
        gc.freeze()
        _SETTLING["frozen"] = True
    try:
        yield
    finally:
        _SETTLING["depth"] -= 1
        if outer:
            torch.clear_autocast_cache()
        if outer and _SETTLING["frozen"]:
            _SETTLING["frozen"] = False
            gc.unfreeze()


def collect():
    """gc.collect(): within settled(), of what plan() made (the rest is frozen)."""
    gc.collect()


class Events:
    """The profiler with its memory events (every allocation and free of PyTorch's CPU allocator:
    .kineto_results.events() after the block). allocator_only: no op events either (the profiler's
    callbacks run for record_function's scope alone), so the block runs at its plain speed (its
    time is measured: _verify.store_all_step). The events are not parsed into the profiler's own
    tables (torch 1.13 parses them on exit: 0.07-0.45 s a pass)."""

    def __init__(self, allocator_only=False):
        self.allocator_only = allocator_only and allocator_only_works()

    def __enter__(self):
        self.prof = prof = torch.autograd.profiler.profile(profile_memory=True)
        if not self.allocator_only:
            prof.__enter__()
            return self
        from torch._C._profiler import RecordScope
        prof._prepare_trace()
        prof.entered = True
        try:
            cfg = prof.config(create_trace_id=False)
        except TypeError:  # torch 1.13
            cfg = prof.config()
        on_start = getattr(torch.autograd.profiler, "_run_on_profiler_start", None)  # torch 2 (as __enter__)
        if on_start is not None:
            on_start()
        torch.autograd._enable_profiler(cfg, prof.kineto_activities, {RecordScope.USER_SCOPE})
        return self

    def __exit__(self, *exc):
        if hasattr(self.prof, "_needs_processing"):  # torch 2: parsed only when asked for
            self.prof.__exit__(*exc)
        else:
            self.prof.kineto_results = torch.autograd._disable_profiler()
        self.kineto_results = self.prof.kineto_results
        return False

    def events(self):
        """The CPU allocator's events in time order (ties in the recorded order)."""
        ev = [e for e in self.kineto_results.events() if e.name() == "[memory]" and
              e.device_type() == torch.autograd.DeviceType.CPU]
        ev.sort(key=_t)
        return ev


def allocator_peak(ev):
    """The high-water mark of the bytes allocated (above the level at the start) of events in order."""
    live = peak = 0
    for e in ev:
        live += e.nbytes()
        peak = max(peak, live)
    return peak


_ALLOCATOR_ONLY = None


def allocator_only_works():
    """Whether the profiler, restricted to record_function's scope, still records the allocator's
    events here (once per process, on a known allocation): else Events records every op too."""
    global _ALLOCATOR_ONLY
    if _ALLOCATOR_ONLY is None:
        _ALLOCATOR_ONLY = False
        try:
            ev = Events()
            ev.allocator_only = True
            with ev:
                x = torch.empty(1 << 20, dtype=torch.uint8)
                del x
            _ALLOCATOR_ONLY = allocator_peak(ev.events()) >= 1 << 20
        except Exception:  # noqa: BLE001 (an API this torch lacks: every op recorded, as before)
            _ALLOCATOR_ONLY = False
    return _ALLOCATOR_ONLY


class CpuPeaks(Events):
    """The profiler around one pass; afterwards, each op's and each Node's peak above its start."""

    PREFIX = "remat#"

    def marker(self, idx):
        return torch.autograd.profiler.record_function(self.PREFIX + str(idx))

    def peaks(self):
        """({op index: peak bytes above its start}, [(autograd Node's name, its peak above its start), in
        order])."""
        ev = list(self.prof.kineto_results.events())
        mem = sorted((_t(e), k, e.nbytes()) for k, e in enumerate(ev)
                     if e.name() == "[memory]" and e.device_type() == torch.autograd.DeviceType.CPU)
        times = [m[0] for m in mem]
        level, levels = 0, []
        for _, _, nb in mem:
            level += nb
            levels.append(level)
        fwd, bwd = {}, []
        spans = sorted((_t(e), _dur(e), e.name()) for e in ev
                       if e.name().startswith(self.PREFIX) or e.name().startswith("autograd::engine::evaluate_function"))
        for start, dur, name in spans:
            p = _peak(times, levels, start, start + dur)
            if name.startswith(self.PREFIX):
                fwd[int(name[len(self.PREFIX):])] = p
            else:
                bwd.append((name.rsplit(" ", 1)[-1].rsplit("::", 1)[-1], p))
        return fwd, bwd


def _peak(times, levels, start, end):
    """The high-water mark of the level within [start, end] above the level just before start."""
    i = bisect.bisect_left(times, start)
    j = bisect.bisect_right(times, end)
    base = levels[i - 1] if i > 0 else 0
    if j <= i:
        return 0
    return max(max(levels[i:j]) - base, 0)


class CudaNodePeaks:
    """At each autograd Node's end: the allocator's peak since the previous Node ended, above the
    allocation then."""

    def __init__(self):
        self.base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        self.peaks = []

    def stamp(self):
        self.peaks.append(max(torch.cuda.max_memory_allocated() - self.base, 0))
        self.base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
