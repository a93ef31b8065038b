"""What plan() is given, checked before anything runs (docs/RELIABILITY.md, "What plan() is given is
checked first"): each refusal a ModelError (a TypeError) or a ValueError saying what to do, so no
capture runs on a model or inputs it cannot plan."""
import torch

from ._apply import unwrapped
from ._tree import Example
from .capture import ModelError, refuse_compiled


def given(model, example_inputs, device):
    """(the model to plan, its inputs as an Example, the device the step runs on), or the refusal: an
    applied model is the model it runs; not an nn.Module, an applied plan inside, gradients off, lazy
    parameters not made yet, compiled modules, the meta device, a device not the inputs' are refused."""
    model = unwrapped(model, "rematplan.plan")
    _grads_on()
    _no_lazy(model)
    refuse_compiled(model)
    args = Example.of(example_inputs)
    return model, args, _checked_device(model, args, device)


def _checked_device(model, example, device):
    """The device the step runs on: the inputs' (device, where given, must be theirs); a ModelError where
    the model or inputs are on the meta device (no memory to measure) or the device is not one torch
    has."""
    ts = example.tensors()
    kinds = {t.device.type for t in ts} | {p.device.type for p in model.parameters()}
    if "meta" in kinds:
        raise ModelError("rematplan.plan: the model or its inputs are on the meta device, which holds no memory "
                         "to measure: plan on the device the model trains on")
    if device is None:
        return ts[0].device if ts else None
    from . import _device
    dev = _device("rematplan.plan", device)
    if ts and dev.type not in {t.device.type for t in ts}:
        raise ValueError("rematplan.plan: device %r, but the inputs are on %s: move the model and inputs there, "
                         "or leave device out (the inputs' device)" % (str(device), ts[0].device))
    return dev


def _grads_on():
    """plan() records a training step: a ModelError where gradients are off (the capture's loss then
    requires no grad, or inference tensors raise deep inside it) or saved-tensor hooks are disabled
    (the capture then failed as if the model itself had)."""
    off = "torch.inference_mode()" if getattr(torch, "is_inference_mode_enabled", lambda: False)() else \
        "torch.no_grad()" if not torch.is_grad_enabled() else None
    if off is not None:
        raise ModelError("rematplan.plan: gradients are off here (inside %s): plan() records a training step "
                         "(forward and backward); call it where the training step runs, with gradients on" % off)
    enabled = getattr(torch._C._autograd, "_saved_tensors_hooks_is_enabled", lambda: True)
    if not enabled():
        raise ModelError("rematplan.plan: saved-tensor hooks are disabled here (inside torch.autograd.graph."
                         "disable_saved_tensors_hooks): plan() records the step through them, and the applied "
                         "model recomputes through them; call plan() and the applied model outside that context")


def _no_lazy(model):
    """A ModelError where parameters or buffers are not made yet (nn.LazyLinear and the other lazy
    modules make them at their first forward): plan() records the model as it will train."""
    from torch.nn.parameter import UninitializedParameter
    try:
        from torch.nn.parameter import UninitializedBuffer
    except ImportError:  # pragma: no cover (torch < 1.9)
        UninitializedBuffer = UninitializedParameter
    lazy = [n for n, t in list(model.named_parameters()) + list(model.named_buffers())
            if isinstance(t, (UninitializedParameter, UninitializedBuffer))]
    if lazy:
        raise ModelError("rematplan.plan: %d parameter%s or buffers are not made yet (%s%s: lazy modules make "
                         "them at their first forward): run the model once on a batch (model(*inputs)) before "
                         "plan(), and make the optimizer after that" % (len(lazy), "" if len(lazy) == 1 else "s",
                                                                       ", ".join(lazy[:3]),
                                                                       ", ..." if len(lazy) > 3 else ""))
