"""Walking the nested arguments and outputs of ops and modules: the tensors
in tuples, lists and dicts, and the same structure with each leaf mapped."""
import torch


def flat_tensors(v):
    """The tensors in nested tuples, lists and dicts."""
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (tuple, list)):
        for x in v:
            yield from flat_tensors(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from flat_tensors(x)


def map_tree(v, f):
    """v with every leaf x (not a tuple, list or dict) replaced by f(x)."""
    if isinstance(v, (list, tuple)):
        return type(v)(map_tree(x, f) for x in v)
    if isinstance(v, dict):
        return {k: map_tree(x, f) for k, x in v.items()}
    return f(v)
