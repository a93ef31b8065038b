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
"""
import bisect

import torch


def _t(e):
    return e.start_ns() if hasattr(e, "start_ns") else e.start_us() * 1000


def _dur(e):
    return e.duration_ns() if hasattr(e, "duration_ns") else e.duration_us() * 1000


class CpuPeaks:
    """The profiler around one pass; afterwards, each op's and each Node's peak above its start."""

    PREFIX = "remat#"

    def __enter__(self):
        self.prof = torch.autograd.profiler.profile(profile_memory=True)
        self.prof.__enter__()
        return self

    def marker(self, idx):
        return torch.autograd.profiler.record_function(self.PREFIX + str(idx))

    def __exit__(self, *exc):
        self.prof.__exit__(*exc)
        return False

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
