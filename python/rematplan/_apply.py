"""Applying a plan without touching the user's code: a module that holds the
model's own submodules, parameters and buffers and runs the model's forward
with the plan's recomputation active (recompute.py: a dispatch mode and
saved-tensor hooks for the duration of the forward).

Nothing of the model is patched: its modules' forwards, hooks and
attributes are as they were, so the user's hooks run exactly as often as
without the plan, a deepcopy or the model called on its own runs plainly,
and a plan() that fails leaves nothing behind.
"""
import inspect
import types

import torch

from .forward import Forward


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
    from .planning import Plan
    if isinstance(model, Plan) and isinstance(plan, torch.nn.Module):
        raise TypeError("rematplan.apply: the arguments are swapped: rematplan.apply(model, plan)")
    model = unwrapped(model, "rematplan.apply")
    if not isinstance(plan, Plan):  # (None, a budget: "no captured model" said nothing of what was given)
        raise TypeError("rematplan.apply: plan must be rematplan.plan(model, inputs, budget)'s result, not a %s"
                        % type(plan).__name__)
    if plan.profile is None:
        raise ValueError("rematplan.apply: this plan has no captured model (it was planned from a graph file)")
    if model is not plan.model:
        raise ValueError("rematplan.apply: the plan was made for another model object; plan this model")
    return RematModel(model, plan)


class RematModel(torch.nn.Module):
    """The applied model: its submodules, parameters and buffers are the original's own dicts of them,
    shared (state_dict() and parameters() are the model's, and stay so whatever replaces an entry);
    calling it runs the original model with the plan active (while gradients are recorded)."""

    def __init__(self, model, plan):
        super().__init__()
        self._share(model)
        object.__setattr__(self, "remat_model", model)
        object.__setattr__(self, "remat_plan", plan)
        object.__setattr__(self, "remat_table", plan.table)
        object.__setattr__(self, "remat_check", None)  # verify()'s checker while it runs
        object.__setattr__(self, "remat_last", None)   # the last forward's recompute.Step (its stats)
        # the inputs and the model's structure (modules, parameters' shapes and dtypes) the plan was made
        # for: a step that differs is said once
        object.__setattr__(self, "remat_inputs_key", getattr(plan.profile, "inputs_key", None))
        object.__setattr__(self, "remat_autocast", getattr(plan.profile, "autocast", None))
        object.__setattr__(self, "remat_structure", _planned_structure(model, plan))
        object.__setattr__(self, "remat_compared", False)  # the structure, compared at the next step
        object.__setattr__(self, "remat_warned", False)
        self._sign_forward()
        self.train(model.training)

    def _sign_forward(self):
        """self.forward with the model's forward's parameters (inspect.signature): HF's Trainer keeps the
        dataset columns the model's forward names, and (*args, **kwargs) named none (\"the batch received
        was empty\"). A bound copy of RematModel.forward with that __signature__, in the instance."""
        f = RematModel.forward
        try:
            sig = inspect.signature(self.remat_model.forward)
            me = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
            sig = sig.replace(parameters=[me] + list(sig.parameters.values()))
        except (TypeError, ValueError):  # no signature (a builtin), or a parameter named self
            return
        g = types.FunctionType(f.__code__, f.__globals__, f.__name__, f.__defaults__, f.__closure__)
        g.__qualname__, g.__doc__, g.__signature__ = f.__qualname__, f.__doc__, sig
        object.__setattr__(self, "forward", types.MethodType(g, self))

    def __getattr__(self, name):
        """What the applied model does not have itself (its submodules, parameters and buffers are the
        model's) is the model's: .config, .generate, .save_pretrained, a training loop's attributes."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("remat_model")
            if model is None or name.startswith("__"):
                raise
            return getattr(model, name)

    def _share(self, model):
        """The model's own dicts of submodules, parameters and buffers are this module's: whatever
        replaces an entry through either (Module._apply replacing a buffer in .to(dtype), load_state_dict
        with assign=True, setattr, register_buffer) replaces it for both, so the forward always reads
        what parameters(), state_dict() and an optimizer see. Copies of the entries went stale: the
        forward ran on the old tensors (a dtype error, or training tensors the forward never read)."""
        for name in ("_modules", "_parameters", "_buffers", "_non_persistent_buffers_set"):
            if name in model.__dict__:
                object.__setattr__(self, name, model.__dict__[name])

    def _apply(self, fn, *args, **kwargs):
        """.to(), .half(), .cuda(), to_empty(): the model's own _apply (a model that overrides it to
        convert what it keeps aside, a rotary table, is converted as it expects); the entries are shared."""
        self.remat_model._apply(fn, *args, **kwargs)
        object.__setattr__(self, "remat_compared", False)
        return self

    def _save_to_state_dict(self, *args, **kwargs):
        return self.remat_model._save_to_state_dict(*args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        """The model's own (its overrides and load_state_dict pre-hooks run as without the plan)."""
        object.__setattr__(self, "remat_compared", False)  # (assign=True may bring other dtypes)
        return self.remat_model._load_from_state_dict(*args, **kwargs)

    def __getstate__(self):
        """Pickled (torch.save(model), copy.deepcopy) with the table it runs, not the Plan: the plan's
        profile holds the captured step (aten ops, its tensors), which neither pickles nor is needed
        to run the plan. The copy runs the plan; its remat_plan is None."""
        state = dict(self.__dict__)
        state["remat_plan"], state["remat_check"], state["remat_last"] = None, None, None
        state.pop("forward", None)  # (a method made for this object: _sign_forward makes the copy's)
        return state

    def __setstate__(self, state):
        """The copy's entries are its model's (pickle keeps the shared dicts shared; a copy pickled
        before they were shared is made to share them)."""
        super().__setstate__(state)
        self._share(self.remat_model)
        self._sign_forward()

    def _check_step(self, args, kwargs):
        """A step on other inputs than the plan's (a larger batch, longer sequences), or of the model
        changed since (.to(torch.bfloat16) of the applied model), runs the plan bit for bit, but its
        memory is not what the plan measured: said once (RuntimeWarning). The structure is compared at
        the first step and after the applied model's _apply or load_state_dict, not at every step
        (0.9 ms for a 24-layer encoder)."""
        from ._tree import Example
        from .profile import _structure, autocast_state
        what = None
        inputs_key, structure = self.__dict__.get("remat_inputs_key"), self.__dict__.get("remat_structure")
        autocast, autocast_now = self.__dict__.get("remat_autocast"), autocast_state()
        if inputs_key is not None and Example(args, kwargs).key() != inputs_key:
            what = "this step's inputs differ from those the plan was made for (tensor shapes, dtypes or other " \
                   "arguments)"
        elif autocast is not None and autocast_now != autocast:
            what = "this step runs under another autocast than the plan was made under (%s; planned: %s): its " \
                   "ops and their bytes differ" % (_autocast_words(autocast_now), _autocast_words(autocast))
        elif structure is not None and not self.__dict__.get("remat_compared") and \
                _structure(self.remat_model) != structure:
            what = "the model changed since the plan was made (its modules, training mode, or its parameters' " \
                   "shapes, dtypes, devices or requires_grad: .to(dtype), a layer frozen)"
        object.__setattr__(self, "remat_compared", True)
        if what is None:
            return
        import warnings
        object.__setattr__(self, "remat_warned", True)
        warnings.warn("rematplan: %s: it runs the plan, but its peak is not the one measured within the budget; "
                      "plan() the model and inputs as they are now (inside the autocast the steps run under) to "
                      "hold the budget for them" % what,
                      RuntimeWarning, stacklevel=3)

    def train(self, mode=True):
        super().train(mode)
        self.remat_model.train(mode)
        return self

    def forward(self, *args, **kwargs):
        table = self.remat_table
        if table is None or not table.modes or not torch.is_grad_enabled():
            return self.remat_model(*args, **kwargs)
        if not self.__dict__.get("remat_warned"):
            self._check_step(args, kwargs)
        with Forward(self.remat_model, table, self.remat_check) as step:
            out = self.remat_model(*args, **kwargs)
        object.__setattr__(self, "remat_last", step)
        return out


def _autocast_words(state):
    on = ["autocast(%s, %s)" % (dev, dtype) for dev, o, dtype in state if o]
    return ", ".join(on) or "no autocast"


def _planned_structure(model, plan):
    """The model's structure (profile._structure) as the plan's profile was captured: the key that
    profile is kept under (the structure now where it is not found)."""
    from .profile import _profiles, _structure
    for (_, structure), prof in _profiles.get(model, {}).items():
        if prof is plan.profile:
            return structure
    return _structure(model)
