"""Applying a plan without touching the user's code: a module that holds the
model's own submodules, parameters and buffers and runs the model's forward
with the plan's recomputation active (recompute.py: a dispatch mode and
saved-tensor hooks for the duration of the forward).

Nothing of the model is patched: its modules' forwards, hooks and
attributes are as they were, so the user's hooks run exactly as often as
without the plan, a deepcopy or the model called on its own runs plainly,
and a plan() that fails leaves nothing behind.
"""
import torch

from .recompute import Forward


def unwrapped(model, who):
    """The model a plan is made for: an applied model's own (plan() and apply() given apply's result
    plan and apply the model it runs); a TypeError (ModelError) for what is not an nn.Module, or holds
    an applied plan inside."""
    if isinstance(model, RematModel):
        model = model.remat_model
    from .capture import ModelError
    if not isinstance(model, torch.nn.Module):
        raise ModelError("%s: the model must be a torch.nn.Module whose forward returns the loss, not a %s; wrap "
                         "a function and its loss in an nn.Module" % (who, type(model).__name__))
    inner = [n for n, m in model.named_modules() if isinstance(m, RematModel)]
    if inner:  # its recording would hide the step from this one's, and the two plans would both run
        raise ModelError("%s: the model holds an applied plan (%s: rematplan.apply's result): one plan covers "
                         "the whole model; put the module back (model.%s = model.%s.remat_model) and plan the "
                         "model" % (who, ", ".join(inner[:3]), inner[0], inner[0]))
    return model


def apply(model, plan):
    """A module with the model's own submodules, parameters and buffers (the same names, the same
    order) whose forward runs the model with the plan. Given an applied model, the model it runs
    gets the new plan instead (the old one is left as it was)."""
    model = unwrapped(model, "rematplan.apply")
    if getattr(plan, "profile", None) is None:
        raise ValueError("rematplan.apply: this plan has no captured model (it was planned from a graph file)")
    if model is not plan.model:
        raise ValueError("rematplan.apply: the plan was made for another model object; plan this model")
    return RematModel(model, plan)


class RematModel(torch.nn.Module):
    """The applied model: the original's submodules, parameters and buffers registered under the
    same names in the same order (state_dict() and parameters() are the model's); calling it runs
    the original model with the plan active (while gradients are recorded)."""

    def __init__(self, model, plan):
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        for name, p in model.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in model.named_buffers(recurse=False):
            self.register_buffer(name, b, persistent=name not in getattr(model, "_non_persistent_buffers_set", ()))
        object.__setattr__(self, "remat_model", model)
        object.__setattr__(self, "remat_plan", plan)
        object.__setattr__(self, "remat_table", plan.table)
        object.__setattr__(self, "remat_check", None)  # verify()'s checker while it runs
        object.__setattr__(self, "remat_last", None)   # the last forward's recompute.Step (its stats)
        # the inputs the plan was made for (their shapes, dtypes, plain values), said once if a step differs
        object.__setattr__(self, "remat_inputs_key", getattr(plan.profile, "inputs_key", None))
        object.__setattr__(self, "remat_warned", False)
        self.train(model.training)

    def __getstate__(self):
        """Pickled (torch.save(model), copy.deepcopy) with the table it runs, not the Plan: the plan's
        profile holds the captured step (aten ops, its tensors), which neither pickles nor is needed
        to run the plan. The copy runs the plan; its remat_plan is None."""
        state = dict(self.__dict__)
        state["remat_plan"], state["remat_check"], state["remat_last"] = None, None, None
        return state

    def _check_inputs(self, args, kwargs):
        """A step on other inputs than the plan's (a larger batch, longer sequences) runs the plan, bit
        for bit, but its memory is not what the plan measured: said once (RuntimeWarning)."""
        from ._tree import Example
        if Example(args, kwargs).key() != self.remat_inputs_key:
            import warnings
            object.__setattr__(self, "remat_warned", True)
            warnings.warn("rematplan: this step's inputs differ from those the plan was made for (tensor shapes, "
                          "dtypes or other arguments): it runs the plan, but its peak is not the one measured "
                          "within the budget; plan() with inputs like these to hold the budget for them",
                          RuntimeWarning, stacklevel=3)

    def train(self, mode=True):
        super().train(mode)
        self.remat_model.train(mode)
        return self

    def forward(self, *args, **kwargs):
        table = self.remat_table
        if table is None or not table.modes or not torch.is_grad_enabled():
            return self.remat_model(*args, **kwargs)
        if self.__dict__.get("remat_inputs_key") is not None and not self.__dict__.get("remat_warned"):
            self._check_inputs(args, kwargs)
        with Forward(self.remat_model, table, self.remat_check) as step:
            out = self.remat_model(*args, **kwargs)
        object.__setattr__(self, "remat_last", step)
        return out
