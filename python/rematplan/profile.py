"""A model's profile: its captured step (capture.py), the rates its ops are
priced at (pricing.py), its graph (graph.py), the table a plan's modes
become for the applied model (recompute.py), and the measured store-all
step.

Profiles are kept per model object (weakly) and per inputs (the tensors'
shapes, dtypes and devices, the keywords, and the plain values beside them:
use_cache=False and True are other steps; before, they shared a profile),
per the model's structure (its modules and their training mode, its
parameters' shapes, dtypes and whether they train: a layer frozen or a
module swapped is another step), and for the grad and autocast mode they
ran under: planning the same model at another budget reuses its profile (and
the steps already measured), so a least budget that plan() names plans the
same way when asked for. `forget(model)` drops them.
"""
import weakref

import torch

from ._tree import Example
from .capture import ACT, capture
from .graph import build
from .masks import mask_rebuild as _mask_rebuild
from .pricing import calibrate
from .forward import Forward
from .recompute import Table

_profiles = weakref.WeakKeyDictionary()


class Profile:
    def __init__(self, model, inputs, device, repeats):
        self.rec = capture(model, inputs, device, repeats)
        self.inputs_key = Example.of(inputs).key()  # what the applied model's steps are compared with
        self.autocast = autocast_state()  # (and the autocast they run under)
        acts = sorted(s.nbytes // 4 for s in self.rec.storages if s.kind == ACT)
        self.rates = calibrate(self.rec.ops, device, acts[len(acts) // 2] if acts else 1 << 20, _recording,
                               _mask_rebuild)
        self.built = build(self.rec, self.rates)
        self.graph = self.built.graph
        self.device = device
        self.measured_store_all = None
        self.store_all_ms = None
        self.measured = {}   # plan key -> measured peak
        self.measured_plans = {}  # plan key -> the Plan measured (budget.Search.fastest)
        self.least = None    # (least bytes, Plan): the least plan, measured within it
        self.key = None      # profile_key: what it was captured for (plan(reuse=) checks it)

    def checkpoint_note(self):
        """What to say where the model recomputes with torch.utils.checkpoint itself ("" where not):
        its store-all is then that step, and rematplan plans only what checkpoint leaves saved."""
        paths = self.rec.checkpointed
        if not paths:
            return ""
        return ("the model already recomputes %d module call%s with torch.utils.checkpoint (%s%s): store-all here is "
                "that step, and rematplan plans only what it leaves saved; turn it off (transformers: "
                "model.gradient_checkpointing_disable()) and plan again to let rematplan choose what to recompute"
                % (len(paths), "" if len(paths) == 1 else "s", ", ".join(p or "(the model)" for p in paths[:3]),
                   ", ..." if len(paths) > 3 else ""))

    def recompute_ms(self, P):
        """What a plan adds to the store-all step, in ms: the nodes the planner's schedule recomputes
        (their ops priced by pricing.Rates, and the Python that rebuilds each op: graph.py's
        forward_time), the dispatch of every forward op through the recording mode, and the
        recording of each op the plan recomputes."""
        if P.planner == "store-all":
            return 0.0
        ops = self.built.node_ops
        recorded = sum(len(ops[k]) for k, m in enumerate(P.modes) if m != "keep" and k < len(ops))
        r = self.rates
        return P.recompute_time + r.mode_op * len(self.rec.ops) + getattr(r, "record_op", 0.0) * recorded

    def table(self, modes):
        """The runtime's table of a plan's modes: for each storage a recomputed node counts, the op
        that made it (by key) and its place among the op's outputs."""
        rec, b = self.rec, self.built
        table = {}
        for k, mode in enumerate(modes):
            if mode == "keep":
                continue
            for sid in b.node_sids[k]:
                op = rec.ops[rec.storages[sid].producer]
                pos = op.new_pos[op.new.index(sid)]
                table.setdefault(op.key, {})[pos] = mode
        takeovers = [rec.ops[ops[0]].key for k, ops in enumerate(b.node_ops)
                     if ops and b.graph["nodes"][k].get("keep") and rec.ops[ops[0]].writes and not rec.ops[ops[0]].new]
        # a dropout's noise the plan recomputes while it keeps its mask: packed as the mask
        masked = [rec.ops[b.node_ops[n][0]].key for n, m in b.mask_of.items()
                  if modes[m] == "keep" and modes[n] != "keep"]
        # rebuilt each time from a mask drawn once in the backward and held (the planner's ONCE for it)
        later = [rec.ops[b.node_ops[n][0]].key for n, m in b.mask_of.items()
                 if modes[m] == "once" and modes[n] == "each"]
        random = [op.key for op in rec.ops if op.random]
        writes = {}  # what ops write that is not an activation (a buffer), by place among their inputs
        for op in rec.ops:
            w = [i for i, sid in enumerate(op.reads) if sid is not None and sid in op.writes and
                 rec.storages[sid].kind != ACT]
            if w:
                writes[op.key] = w
        names = {op.key: op.name for op in rec.ops if op.key in table}
        return Table(table, takeovers, random, writes, masked, names, later)


def _recording(module, modes):
    """module's forward as an applied plan runs it, the plan's table {op key: {place: mode}} (pricing:
    what the recording costs an op)."""
    return Forward(module, Table(modes))


def autocast_state():
    """((device type, on, dtype or None), ...) of CPU's and CUDA's autocast here. (torch's
    is_autocast_enabled() without a device is CUDA's alone: a plan() inside torch.autocast("cpu") was
    given the profile captured outside it, its fp32 ops and bytes.)"""
    out = []
    for dev in ("cpu", "cuda"):
        try:  # torch 2.x
            on = torch.is_autocast_enabled(dev)
            dtype = torch.get_autocast_dtype(dev) if on else None
        except (TypeError, AttributeError, RuntimeError):  # torch 1.13: one function per device
            on = torch.is_autocast_cpu_enabled() if dev == "cpu" else torch.is_autocast_enabled()
            dtype = (torch.get_autocast_cpu_dtype() if dev == "cpu" else torch.get_autocast_gpu_dtype()) \
                if on else None
        out.append((dev, bool(on), None if dtype is None else str(dtype)))
    return tuple(out)


def _key(inputs, device):
    return (Example.of(inputs).key(), str(device), torch.is_grad_enabled(), autocast_state())


def _structure(model):
    """What of the model makes its step: its modules (types, training mode) and parameters (names, shapes,
    dtypes, devices, whether they train). A layer frozen, a module swapped (LoRA, PEFT) or a dtype
    changed after a plan is another step: it is captured again, not planned from the old profile."""
    return (tuple((n, type(m).__name__, m.training) for n, m in model.named_modules()),
            tuple((n, tuple(p.shape), str(p.dtype), str(p.device), p.requires_grad)
                  for n, p in model.named_parameters()))


def profile_key(model, inputs, device=None):
    """What a profile is kept under: the inputs (and device, grad and autocast mode) and the model's
    structure."""
    return (_key(inputs, device), _structure(model))


def profile_of(model, inputs, device=None, repeats=1, fresh=False):
    """The model's profile for these inputs (captured now, or kept from before)."""
    per = _profiles.setdefault(model, {})
    key = profile_key(model, inputs, device)
    if fresh or key not in per:
        per[key] = Profile(model, inputs, device, repeats)
        per[key].key = key
    return per[key]


def forget(model):
    """Drops the model's kept profiles (after its structure changed)."""
    model = getattr(model, "remat_model", model)  # (an applied model: the model it runs)
    if not isinstance(model, torch.nn.Module):
        from .capture import ModelError
        raise ModelError("rematplan.forget: give the model (an nn.Module) whose profiles to drop, not a %s"
                         % type(model).__name__)
    _profiles.pop(model, None)


def plan_key(P):
    """What identifies a plan (its measured peak is kept under it): its modes."""
    return tuple(P.modes)
