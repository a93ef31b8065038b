"""What a rebuild in the backward runs under (recompute.py): autocast off (the recorded casts are
replayed as ops), and whether the backward running keeps its graph for another (retain_graph,
create_graph), which says how long a recipe stays rebuildable."""
import os
import sys

import torch


def _autocast_on(device):
    """Whether autocast is on for a device type (torch 2.x takes the type; 1.13 has one call each)."""
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:
        return torch.is_autocast_cpu_enabled() if device == "cpu" else torch.is_autocast_enabled()


class _no_autocast:
    """Replays run the aten ops as recorded: no autocast casts them again. Where autocast is off (the
    usual backward) nothing is entered: torch.autocast objects cost ~10 us a rebuild."""

    def __enter__(self):
        self.ctx = []
        if _autocast_on("cpu"):
            self.ctx.append(torch.autocast("cpu", enabled=False))
        if _autocast_on("cuda") and torch.cuda.is_available():
            self.ctx.append(torch.autocast("cuda", enabled=False))
        for c in self.ctx:
            c.__enter__()

    def __exit__(self, *exc):
        for c in reversed(self.ctx):
            c.__exit__(*exc)
        return False


def _keep_graph_by_frames():
    """torch 1.13, which cannot say whether the running backward keeps its graph: the retain_graph
    of the torch.autograd.backward or grad call below on this thread's Python stack (both resolve it
    from create_graph before they call the engine); True (keep) where there is none (a backward on
    another thread: CUDA's device threads)."""
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_name in ("backward", "grad") and code.co_filename.endswith(_AUTOGRAD_FILE):
            keep = f.f_locals.get("retain_graph")
            return True if keep is None else bool(keep)
        f = f.f_back
    return True


_AUTOGRAD_FILE = os.path.join("torch", "autograd", "__init__.py")
# whether the backward running now keeps its graph for another (retain_graph, create_graph)
_keep_graph = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
_KEEP_GRAPH_ASKED = _keep_graph is not None  # else asked once a step, by its frames
