"""One forward of the applied model (recompute.Step): the context around it, and which mode class
runs it (torch 2.x: with dynamo's guard only under a compiled caller)."""
import torch

from .recompute import Step


def _outer_hooks():
    """The saved-tensor hooks active around the applied model's call (torch.autograd.graph.save_on_cpu, a
    user's own), or None: the innermost hooks alone see a saved tensor, so the applied model's hid them and
    what they would have kept (on the CPU, compressed) stayed as it was. torch 2.x says which they are;
    torch 1.13 cannot (docs/PYTORCH.md)."""
    top = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)
    return top(False) if top is not None else None


class _WatchedStep(Step):
    """Step with torch's dynamo guard around __torch_dispatch__ (torch 2.x): for a forward whose caller
    dynamo compiles (torch.compile of the applied model), where dynamo would otherwise trace the mode's
    own frames (the gradients then differed)."""
    __torch_dispatch__ = Step.__torch_dispatch__

    @classmethod
    def _should_skip_dynamo(cls):
        return True


def _dynamo_watching():
    """Whether dynamo's frame callback is on here (a compiled caller): new Python frames are its."""
    set_eval_frame = getattr(getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None), "set_eval_frame", None)
    if set_eval_frame is None:  # torch 1.13: no dynamo
        return False
    prior = set_eval_frame(None)
    if prior is not None:
        set_eval_frame(prior)
    return prior is not None


class Forward:
    """The context of one forward of the applied model: the module calls, the mode, the hooks."""

    def __init__(self, model, table, check=None):
        self.step = (_WatchedStep if _dynamo_watching() else Step)(model, table, check)

    def __enter__(self):
        s = self.step
        s.outer = _outer_hooks()  # before ours are pushed
        self.hooks = torch.autograd.graph.saved_tensors_hooks(s.pack, s.unpack)
        s.calls.__enter__()
        try:
            self.hooks.__enter__()
        except RuntimeError as e:  # (torch raises the message the user gave)
            s.calls.__exit__(None, None, None)
            from ._lib import RematError
            raise RematError("rematplan: the applied model recomputes through saved-tensor hooks, and they are "
                             "disabled here (torch.autograd.graph.disable_saved_tensors_hooks: %s); call the applied "
                             "model outside that context, or its model (.remat_model) here, which runs without the "
                             "plan and its budget" % e) from None
        s.__enter__()
        return s

    def __exit__(self, *exc):
        s = self.step
        try:
            s.__exit__(*exc)
        finally:
            self.hooks.__exit__(*exc)
            s.calls.__exit__(*exc)
            s.end()
        return False
