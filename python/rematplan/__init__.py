"""rematplan: remat's recomputation plans for PyTorch.

    plan = rematplan.plan(model, example_inputs, budget="3GiB")  # or 0.5 of store-all
    model = rematplan.apply(model, plan)
    rematplan.verify(model, example_inputs)

The model's forward must return the loss. Planning is libremat's C code
(rm_plan_graph, rm_plan_chain, rm_price_graph) loaded through ctypes; see
docs/PYTORCH.md in remat's repository.
"""
from ._lib import RematError, LibraryNotFound, version as libremat_version
from .planning import BudgetError, Plan, human, plan_graph
from ._verify import VerifyError, verify
from . import _apply as _apply_mod

__version__ = "0.1.0"
__all__ = ["plan", "apply", "verify", "plan_graph", "Plan", "BudgetError", "VerifyError", "RematError",
           "LibraryNotFound", "libremat_version", "use_as_compile_solver"]


def plan(model, example_inputs, budget, device=None, repeats=3, verbose=True, check=True, reuse=None):
    """Profiles model(*example_inputs) (which returns the loss) on the inputs' device and plans
    what to keep and what to recompute within `budget`: bytes (int), a fraction of what storing
    every activation needs (float in (0, 1]), or a string ("3GiB", "500MB", "50%").
    Raises BudgetError, naming the least budget that works, when it cannot be met.
    Prints the predicted peak and overhead unless verbose=False.
    check: run the plan once and measure its peak (PyTorch's allocator count on CPU, which costs
    a profiled step; max_memory_allocated on CUDA); while it exceeds the budget, plan again for
    the budget less the excess (what the profile does not see: autograd's own buffers).
    reuse: an earlier plan of the same model and inputs, whose profile is used again."""
    from .profile import profile
    if device is None:
        import torch
        ts = [t for t in (example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,))
              if isinstance(t, torch.Tensor)]
        device = ts[0].device if ts else None
    from . import planning
    import torch
    planning.REGION_BYTES = torch.get_rng_state().numel()
    planning.SAC = _apply_mod.sac_available()
    if device is not None and torch.device(device).type == "cuda":
        planning.REGION_BYTES += torch.cuda.get_rng_state(device).numel()
    if reuse is not None and reuse.model is model:
        gm, prof = reuse.graph_module, reuse.profile
    else:
        gm, prof = profile(model, example_inputs, repeats=repeats, device=device)
    graph = prof.graph

    def make(budget=budget, **kw):
        P = plan_graph(graph, budget, **kw)
        P.graph_module, P.members, P.model, P.profile = gm, prof.members, model, prof
        return P

    try:
        P = make()
    except BudgetError as e:
        if check:  # the least named must hold when measured too
            e = _measured_least(make, e, model, example_inputs, device)
        raise e
    if check:
        P = _checked(make, P, model, example_inputs, device)
    if verbose:
        print(P.summary())
    return P


def _measured(P, model, inputs, device):
    from ._verify import measure_step
    if P.n_regions() == 0 and P.planner == "store-all":
        P.measured_peak = measure_step(model, inputs, device)
    else:
        P.measured_peak = measure_step(_apply_mod.apply(model, P), inputs, device)
    return P.measured_peak


def _checked(make, P, model, inputs, device):
    """Plans again, lower, while the measured peak exceeds the budget (at most 4 times)."""
    inner = P.planner_budget
    for _ in range(4):
        m = _measured(P, model, inputs, device)
        if m <= P.budget_bytes:
            return P
        inner -= m - P.budget_bytes
        try:
            P = make(inner=inner)
        except BudgetError as e:
            raise _measured_least(make, e, model, inputs, device) from None
    if _measured(P, model, inputs, device) > P.budget_bytes:
        raise BudgetError("rematplan: no plan found whose measured peak (%d bytes) stays within %d bytes"
                          % (P.measured_peak, P.budget_bytes), P.measured_peak, P.store_all_bytes)
    return P


def _measured_least(make, e, model, inputs, device):
    """The refusal, naming a least budget whose plan also holds when measured: from the planned
    least, raised to the measured peak (and the margin) until a plan's measured peak fits it."""
    import math
    from .planning import MARGIN
    least = e.least_bytes
    for _ in range(6):
        try:
            P = make(budget=least)
        except BudgetError as e2:
            least = max(least + 1, e2.least_bytes)
            continue
        m = _measured(P, model, inputs, device)
        if m <= least:
            break
        least = int(math.ceil(m / (1 - MARGIN))) + 1
    return BudgetError("rematplan: budget %s (%d bytes) cannot be met: the least budget that works is %s "
                       "(%d bytes, its plan measured; store-all %s); raise the budget to at least %d bytes"
                       % (human(e.want), e.want, human(least), least, human(e.store_all_bytes), least),
                       least, e.store_all_bytes, e.want)


def apply(model, plan):
    """The model with the plan applied: a module with the model's own submodules, parameters and
    buffers (same names, same order) whose forward runs the plan's regions under
    torch.utils.checkpoint (non-reentrant)."""
    return _apply_mod.apply(model, plan)


def use_as_compile_solver(enable=True):
    """Makes libremat the solver of torch.compile's activation_memory_budget (torch >= 2.4)."""
    from .compile import use_as_compile_solver as f
    return f(enable)
