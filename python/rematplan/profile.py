"""A model's profile: its captured step (capture.py) as a graph (graph.py)
and its module calls (structure.py), and the measured store-all step.

Profiles are kept per model object (weakly) and per inputs' shapes,
dtypes and devices, and for the grad, autocast and training mode they ran
under: planning the same model at another budget reuses its profile (and
the steps already measured), so a least budget that plan() names plans the
same way when asked for. `forget(model)` drops them.
"""
import weakref

import torch

from .capture import capture, flat_tensors
from .graph import build
from .structure import Structure

_profiles = weakref.WeakKeyDictionary()


class Profile:
    def __init__(self, model, inputs, device, repeats):
        self.rec = capture(model, inputs, device, repeats)
        self.built = build(self.rec)
        self.graph = self.built.graph
        self.structure = Structure(self.rec, self.built)
        self.device = device
        self.measured_store_all = None
        self.measured = {}   # plan key -> measured peak
        self.least = None    # (least bytes, Plan): the least plan, measured within it


def _key(inputs, device):
    ts = [(tuple(t.shape), str(t.dtype), str(t.device)) for t in flat_tensors(inputs)]
    autocast = [torch.is_autocast_enabled()]
    if hasattr(torch, "get_autocast_gpu_dtype"):
        autocast.append(str(torch.get_autocast_gpu_dtype()))
    return (tuple(ts), str(device), torch.is_grad_enabled(), tuple(autocast))


def profile_of(model, inputs, device=None, repeats=1, fresh=False):
    """The model's profile for these inputs (captured now, or kept from before)."""
    per = _profiles.setdefault(model, {})
    key = (_key(inputs, device), model.training)
    if fresh or key not in per:
        per[key] = Profile(model, inputs, device, repeats)
    return per[key]


def forget(model):
    """Drops the model's kept profiles (after its structure changed)."""
    _profiles.pop(model, None)


def plan_key(P):
    """What identifies a plan's regions (its measured peak is kept under it)."""
    def key(regions):
        return tuple((tuple(r.calls), tuple(r.nodes), tuple(r.sac) if r.sac is not None else None,
                      key([i for i in r.items if not isinstance(i, int)])) for r in regions)
    return key(P.regions)
