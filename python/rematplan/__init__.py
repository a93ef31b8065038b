"""rematplan: remat's recomputation plans for PyTorch.

    plan = rematplan.plan(model, example_inputs, budget="3GiB")  # or 0.5 of store-all
    model = rematplan.apply(model, plan)
    rematplan.verify(model, example_inputs)

The model's forward returns the loss (alone, in a tuple, or as .loss).
Planning is libremat's C code (rm_plan_graph, rm_plan_chain,
rm_price_graph) loaded through ctypes; see docs/PYTORCH.md in remat's
repository.
"""
import copy
import math

from ._lib import LibraryError, LibraryNotFound, RematError, version as libremat_version
from ._version import __version__  # noqa: F401
from .planning import BudgetError, Plan, human, plan_graph

__all__ = ["__version__", "plan", "apply", "verify", "plan_graph", "Plan", "BudgetError", "VerifyError", "ModelError",
           "RematError", "LibraryError", "LibraryNotFound", "libremat_version", "use_as_compile_solver", "forget"]


def __getattr__(name):  # torch is imported when a model is planned, not to plan a graph file
    if name == "VerifyError":
        from ._verify import VerifyError
        return VerifyError
    if name == "ModelError":
        from .capture import ModelError
        return ModelError
    if name == "_apply_mod":
        from . import _apply
        return _apply
    raise AttributeError("module 'rematplan' has no attribute %r" % name)


def verify(model, inputs, device=None, check_memory=True, raise_on_mismatch=True):
    """One step of an applied model: every recomputed saved tensor compared bit for bit with its
    first computation, and the measured peak against the plan (see _verify.verify)."""
    from ._verify import verify as f
    return f(model, inputs, device, check_memory, raise_on_mismatch)


def forget(model):
    """Drops the profiles kept for the model (after its structure changed)."""
    from .profile import forget as f
    return f(model)


def _device_of(example_inputs):
    from .capture import flat_tensors
    ts = list(flat_tensors(example_inputs))
    return ts[0].device if ts else None


def plan(model, example_inputs, budget, device=None, repeats=1, verbose=True, check=True, reuse=None):
    """Records one training step of model(*example_inputs) (which returns the loss) on the inputs'
    device and plans what to keep and what to recompute within `budget`: bytes (int), a fraction of
    the step's measured store-all peak (float in (0, 1]), or a string ("3GiB", "500MB", "50%").
    Raises BudgetError, naming the least budget that works, when it cannot be met.
    check: measure the store-all step and the plan's step (PyTorch's allocator count on CPU,
    max_memory_allocated on CUDA): the profile's bytes are scaled to the measured store-all, and
    while a plan's measured peak exceeds the budget it is planned again for the budget less the
    excess. Prints the predicted (and measured) peak and overhead unless verbose=False.
    reuse: an earlier plan of the same model and inputs (profiles are kept per model anyway)."""
    from . import _lib, planning
    _lib.lib()  # a broken library (LibraryError) and a bad budget cost no capture
    planning.budget_bytes(budget, 1)
    import torch
    from . import _apply as _apply_mod
    from .capture import refuse_compiled
    from .profile import profile_of
    refuse_compiled(model)
    args = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
    if device is None:
        device = _device_of(args)
    planning.REGION_BYTES = torch.get_rng_state().numel()
    planning.SAC = _apply_mod.sac_available()
    if device is not None and torch.device(device).type == "cuda":
        planning.REGION_BYTES += torch.cuda.get_rng_state(device).numel()
    prof = reuse.profile if reuse is not None and reuse.model is model else profile_of(model, args, device, repeats)
    ctx = _Context(model, args, device, prof, check)
    try:
        P = ctx.make(budget)
    except BudgetError as e:
        P = ctx.least_or_raise(e)
    if check:
        P = ctx.checked(P)
    if verbose:
        print(P.summary())
    return P


class _Context:
    """One plan() call: the profile, the measured steps, and how a plan is made."""

    def __init__(self, model, args, device, prof, check):
        self.model, self.args, self.device, self.prof, self.check = model, args, device, prof, check
        self.scale, self.full = 1.0, None
        self.fittest = None  # (measured peak, plan): the lowest measured peak of any plan tried
        if check:
            if prof.measured_store_all is None:
                from ._verify import measure_step
                prof.measured_store_all = measure_step(model, args, device)
            profile_all = planning_store_all(prof.graph)
            self.full = prof.measured_store_all
            self.scale = self.full / max(profile_all, 1)

    def make(self, budget, **kw):
        P = plan_graph(self.prof.graph, budget, structure=self.prof.structure, scale=self.scale,
                       store_all_bytes=self.full, **kw)
        P.model, P.structure, P.profile = self.model, self.prof.structure, self.prof
        if P.planner == "store-all" and self.full is not None:
            P.measured_peak = self.full
        return P

    def measure(self, P):
        from . import _apply as _apply_mod
        from ._verify import measure_step
        from .profile import plan_key
        if P.planner == "store-all" and self.full is not None:
            return self.full
        key = plan_key(P)
        if key not in self.prof.measured:
            self.prof.measured[key] = measure_step(_apply_mod.apply(self.model, P), self.args, self.device)
        P.measured_peak = self.prof.measured[key]
        if self.fittest is None or P.measured_peak < self.fittest[0]:
            self.fittest = (P.measured_peak, P)
        return P.measured_peak

    def fitting(self, want, P=None, inner=None):
        """(a plan for `want` whose measured peak is within it, or None; a budget to try next): the
        plan measured, and planned again for less (the excess taken off) while it is over. inner:
        the planners' budget to start from (default: want less the margin)."""
        for _ in range(5):
            if P is None:
                try:
                    P = self.make(want, inner=inner)
                except BudgetError as e:
                    return None, e.least_bytes
            m = self.measure(P)
            if m <= want:
                return P, want
            inner = int((inner if inner is not None else P.planner_budget * self.scale) - (m - want))
            P = None
            if inner <= 0:
                break
        return None, want

    def checked(self, P):
        """P if its measured peak fits its budget, else a plan for less that does, else the least plan
        (when its budget is within this one), else a refusal naming it."""
        want = P.budget_bytes
        F, _ = self.fitting(want, P)
        if F is not None:
            return F
        least, LP = self.least(P.least_bytes)
        if least <= want:
            return LP
        raise self.refusal(want, least)

    def least_or_raise(self, e):
        if not self.check:
            raise e
        least, LP = self.least(e.least_bytes)
        if least <= e.want:
            return LP
        raise self.refusal(e.want, least)

    def least(self, start):
        """The least budget whose plan's measured peak fits it, and that plan (kept in the profile):
        from the planners' least, raised 2% at a time until a plan fits."""
        if self.prof.least is not None:
            return self.prof.least
        least = start
        for _ in range(12):
            P, hint = self.fitting(least)
            if P is not None:
                self.prof.least = self.lower(least, P)
                return self.prof.least
            if self.fittest is not None and self.fittest[0] <= least:
                break  # a plan tried on the way measured within this budget
            least = max(int(least * 1.02) + 1, hint)
            if least >= self.full:
                break
        if self.fittest is not None and self.fittest[0] < self.full:
            # the plan of lowest measured peak: where plans of the planners' budgets measure far
            # above their prediction (timings moved the choice to one the model prices badly), one
            # tried on the way still fits, and its measured peak is a budget that works
            m, P = self.fittest
            P = copy.copy(P)
            P.budget_bytes = m
            self.prof.least = (m, P)
            return self.prof.least
        P = self.make(self.full)  # store-all: its measured peak is the step's
        self.prof.least = (self.full, P)
        return self.prof.least

    def lower(self, least, P):
        """(least, P), lowered while the model's own margin allows: where P measured below its
        prediction, a budget at P's measured peak is planned with the planners given that much more
        room (the model's bytes over the allocator's, as P showed)."""
        from .planning import MARGIN
        for _ in range(3):
            m, pred = P.measured_peak, P.peak_bytes
            low = int(math.ceil(m / (1 - MARGIN))) + 1
            if low >= least or pred <= m:
                break
            Q, _ = self.fitting(low, inner=int(low * (1 - MARGIN) * pred / m))
            if Q is None:
                break
            least, P = low, Q
        return least, P

    def refusal(self, want, least):
        return BudgetError("rematplan: budget %s (%d bytes) cannot be met: the least budget that works is %s "
                           "(%d bytes, its plan measured; store-all %s); raise the budget to at least %d bytes"
                           % (human(want), want, human(least), least, human(self.full), least),
                           least, self.full, want)


def planning_store_all(graph):
    from .planning import store_all
    return store_all(graph)["store_all_bytes"]


def apply(model, plan):
    """The model with the plan applied: a module with the model's own submodules, parameters and
    buffers (same names, same order) whose forward runs the model with the plan's regions under
    torch.utils.checkpoint (non-reentrant). The model itself is left as it was."""
    from . import _apply as _apply_mod
    return _apply_mod.apply(model, plan)


def use_as_compile_solver(enable=True):
    """Makes libremat the solver of torch.compile's activation_memory_budget (torch >= 2.4)."""
    from .compile import use_as_compile_solver as f
    return f(enable)
