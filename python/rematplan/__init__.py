"""rematplan: remat's recomputation plans for PyTorch.

    plan = rematplan.plan(model, example_inputs, budget="3GiB")  # or 0.5 of store-all
    model = rematplan.apply(model, plan)
    rematplan.verify(model, example_inputs)

The model's forward returns the loss (alone, in a tuple, or as .loss).
Planning is libremat's C code (rm_plan_graph, rm_plan_chain,
rm_price_graph) loaded through ctypes; see docs/PYTORCH.md in remat's
repository.
"""
from ._lib import LibraryError, LibraryNotFound, RematError, version as libremat_version
from ._version import __version__  # noqa: F401
from .planning import BudgetError, Plan, human, plan_graph

__all__ = ["__version__", "plan", "apply", "verify", "plan_graph", "Plan", "BudgetError", "VerifyError", "ModelError",
           "RematError", "LibraryError", "LibraryNotFound", "libremat_version", "use_as_compile_solver", "forget",
           "forget_rates"]


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
    """One step of an applied model: its loss and gradients against the unplanned model's, every
    recomputed tensor against its first computation (bit for bit), and the measured peak against the
    plan (see _verify.verify)."""
    _flags("rematplan.verify", check_memory=check_memory, raise_on_mismatch=raise_on_mismatch)
    if device is not None:
        _device("rematplan.verify", device)
    from ._verify import verify as f
    return f(model, inputs, device, check_memory, raise_on_mismatch)


def _flags(who, **flags):
    """True/False arguments are True or False (or 0/1): a string is true, so check="no" checked."""
    for name, v in flags.items():
        if not isinstance(v, (bool, int)) or v not in (0, 1):
            raise TypeError("%s: %s is True or False, not %r" % (who, name, v))


def _device(who, device):
    """A device torch has (torch.device's RuntimeError, said as a ValueError naming the argument)."""
    import torch
    try:
        return torch.device(device)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError("%s: device %r: %s" % (who, device, e)) from None


def forget(model):
    """Drops the profiles kept for the model (after its structure changed)."""
    from .profile import forget as f
    return f(model)


def forget_rates():
    """Drops the op rates measured in this process (and the REMATPLAN_RATES file, if set): the next
    plan() measures them anew (after the machine changed)."""
    from .pricing import forget_rates as f
    return f()


def plan(model, example_inputs, budget, device=None, repeats=1, verbose=True, check=True, reuse=None):
    """Records one training step of the model called with example_inputs (a tensor, a tuple of
    positional arguments, or a dict of keyword arguments: model(**batch)), whose forward returns the
    loss, on the inputs' device, and plans, op by op, what to keep and what to recompute within `budget`: bytes (int), a
    fraction of the step's measured store-all peak (float in (0, 1]), or a string ("3GiB", "500MB",
    "50%"). Raises BudgetError, naming the least budget that works, when it cannot be met.
    check: measure the store-all step and the plan's step (PyTorch's allocator count on CPU,
    max_memory_allocated on CUDA): the profile's bytes are scaled to the measured store-all, and
    while a plan's measured peak exceeds the budget it is planned again for the budget less the
    excess. Prints the predicted (and measured) peak and overhead unless verbose=False.
    reuse: an earlier plan of the same model and inputs (profiles are kept per model anyway).
    An applied model (apply's result) is planned as the model it runs: plan it again at another
    budget and apply that plan to it."""
    from . import _lib
    from .budget import Search
    from .planning import budget_bytes, store_all
    _lib.lib()  # a broken library (LibraryError) and a bad budget cost no capture
    budget_bytes(budget, 1)
    _flags("rematplan.plan", verbose=verbose, check=check)
    from ._given import given
    from .profile import profile_of
    model, args, device = given(model, example_inputs, device)
    from .memory import settled
    try:
        with settled():
            prof = _reused(reuse, model, args, device) if reuse is not None else \
                profile_of(model, args, device, repeats)
            search = Search(model, args, device, prof, check)
            full = search.full if search.full is not None else store_all(prof.graph)["store_all_bytes"]
            P = search.plan(budget_bytes(budget, full))
    except Exception as e:  # noqa: B902: only running out of memory is said again, the rest raised as it is
        if not _out_of_memory(e):
            raise
        raise RematError("rematplan.plan: the training step ran out of memory (%s): plan() runs the step once as "
                         "it is, every activation kept (store-all), to record and measure it, so that step must fit "
                         "once in the memory free here; free memory (tensors held elsewhere; CUDA: "
                         "torch.cuda.empty_cache()), or plan where the step fits, with the same shapes and dtypes"
                         % (str(e).strip().splitlines() or [type(e).__name__])[0][:200]) from e
    if verbose:
        print(P.summary())
    return P


def _out_of_memory(e):
    """Whether e is an allocation that failed: MemoryError, torch's OutOfMemoryError (CUDA's), or the CPU
    allocator's RuntimeError."""
    if isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError":
        return True
    text = str(e)
    return isinstance(e, RuntimeError) and ("can't allocate memory" in text or "CUDA out of memory" in text)


def _reused(reuse, model, args, device):
    """plan(reuse=)'s profile: reuse must be a plan of this model for these inputs (a profile of other
    inputs plans for their memory, not these)."""
    from .profile import profile_key
    prof = getattr(reuse, "profile", None) if isinstance(reuse, Plan) else None
    if prof is None:
        raise TypeError("rematplan.plan: reuse must be an earlier rematplan.plan() result for this model, not %s; "
                        "leave it out (profiles are kept per model and inputs)"
                        % ("a plan_graph() plan" if isinstance(reuse, Plan) else "a %s" % type(reuse).__name__))
    if reuse.model is not model or prof.key != profile_key(model, args, device):
        raise ValueError("rematplan.plan: reuse is a plan of another model, of other inputs (shapes, dtypes, "
                         "arguments, device) or of the model before it changed (layers frozen or swapped); leave "
                         "reuse out: plan() captures these inputs (profiles are kept per model and inputs)")
    return prof


def apply(model, plan):
    """The model with the plan applied: a module with the model's own submodules, parameters and
    buffers (same names, same order) whose forward runs the model with the plan's recomputation
    (op by op: recompute.py). The model itself is left as it was."""
    from . import _apply as _apply_mod
    return _apply_mod.apply(model, plan)


def use_as_compile_solver(enable=True):
    """Makes libremat the solver of torch.compile's activation_memory_budget (torch >= 2.4)."""
    from .compile import use_as_compile_solver as f
    return f(enable)
