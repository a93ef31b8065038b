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


def plan(model, example_inputs, budget, device=None, repeats=3, verbose=True):
    """Profiles model(*example_inputs) (which returns the loss) on the inputs' device and plans
    what to keep and what to recompute within `budget`: bytes (int), a fraction of what storing
    every activation needs (float in (0, 1]), or a string ("3GiB", "500MB", "50%").
    Raises BudgetError, naming the least budget that works, when it cannot be met.
    Prints the predicted peak and overhead unless verbose=False."""
    from .profile import profile
    if device is None:
        import torch
        ts = [t for t in (example_inputs if isinstance(example_inputs, (tuple, list)) else (example_inputs,))
              if isinstance(t, torch.Tensor)]
        device = ts[0].device if ts else None
    gm, prof = profile(model, example_inputs, repeats=repeats, device=device)
    graph = prof.graph
    P = plan_graph(graph, budget, verbose=verbose)
    P.graph_module, P.members, P.model, P.profile = gm, prof.members, model, prof
    return P


def apply(model, plan):
    """The model with the plan applied (an fx GraphModule sharing the model's parameters)."""
    return _apply_mod.apply(model, plan)


def use_as_compile_solver(enable=True):
    """Makes libremat the solver of torch.compile's activation_memory_budget (torch >= 2.4)."""
    from .compile import use_as_compile_solver as f
    return f(enable)
