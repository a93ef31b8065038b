"""Walking the nested arguments and outputs of ops and modules: the tensors
in tuples, lists and dicts, and the same structure with each leaf mapped.
Both run for every op of an applied model's forward (recompute.py), so they
build lists, not generators: a generator frame per nesting level cost 12 ms
of Whisper's forward (~1700 ops)."""
from collections.abc import Mapping

import torch

_Tensor = torch.Tensor


class Example:
    """A step's inputs as the model is called with them: a tensor (model(x)), a tuple or list of
    positional arguments (model(*args)), or a mapping of keyword arguments (model(**batch): a
    tokenizer's BatchEncoding, a dict with labels)."""
    __slots__ = ("args", "kwargs")

    def __init__(self, args, kwargs):
        self.args, self.kwargs = args, kwargs

    @staticmethod
    def of(inputs):
        if isinstance(inputs, Example):
            return inputs
        if isinstance(inputs, Mapping):
            if not all(isinstance(k, str) for k in inputs):
                raise TypeError("example inputs: a mapping's keys must be the forward's argument names (strings)")
            return Example((), dict(inputs))
        return Example(tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,), {})

    def call(self, model):
        return model(*self.args, **self.kwargs)

    def tensors(self):
        """The tensors in them, positional first, then by keyword in the mapping's order."""
        return flat_tensors((self.args, self.kwargs))

    def key(self):
        """What the profile is kept for: each tensor's shape, dtype and device, the keywords, and the
        plain values beside them (use_cache=False and True are other steps)."""
        def frozen(x):  # hashable: tuples for lists and dicts
            if isinstance(x, _Tensor):
                return (tuple(x.shape), str(x.dtype), str(x.device))
            if isinstance(x, (tuple, list)):
                return tuple(frozen(v) for v in x)
            if isinstance(x, Mapping):
                return tuple((repr(k), frozen(v)) for k, v in x.items())
            return x if x is None or isinstance(x, (bool, int, float, str)) else type(x).__name__
        return frozen(self.args), tuple(sorted((k, frozen(v)) for k, v in self.kwargs.items()))


def flat_tensors(v):
    """The tensors in nested tuples, lists and dicts, as a list."""
    if isinstance(v, _Tensor):
        return [v]
    out = []
    _into(v, out)
    return out


def flat_args(args, kwargs):
    """flat_tensors((args, kwargs)) for an op's arguments (a tuple and a dict), in the same order,
    without the two outer levels of recursion (the applied plan's mode asks it of every op)."""
    out = []
    for x in args:
        if isinstance(x, _Tensor):
            out.append(x)
        elif isinstance(x, (tuple, list, dict)):
            _into(x, out)
    if kwargs:
        for x in kwargs.values():
            if isinstance(x, _Tensor):
                out.append(x)
            elif isinstance(x, (tuple, list, dict)):
                _into(x, out)
    return out


def _into(v, out):
    if isinstance(v, (tuple, list)):
        for x in v:
            if isinstance(x, _Tensor):
                out.append(x)
            elif isinstance(x, (tuple, list, dict)):
                _into(x, out)
    elif isinstance(v, dict):
        _into(tuple(v.values()), out)


def map_args(args, f):
    """map_tree(args, f) for an op's positional arguments (a plain tuple), one level less deep."""
    return tuple(map_tree(x, f) if isinstance(x, (tuple, list, dict)) else f(x) for x in args)


def map_tree(v, f):
    """v with every leaf x (not a tuple, list or dict) replaced by f(x)."""
    tv = type(v)
    if tv is tuple or tv is list:
        m = [map_tree(x, f) for x in v]
        return m if tv is list else tuple(m)
    if isinstance(v, (list, tuple)):
        return tv(map_tree(x, f) for x in v)
    if isinstance(v, dict):
        return {k: map_tree(x, f) for k, x in v.items()}
    return f(v)
