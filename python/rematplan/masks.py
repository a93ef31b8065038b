"""A dropout's noise kept as its mask (issue 34): one bit an element and its
one nonzero value, which give the noise back bit for bit (recompute.py packs
a noise the plan keeps this way, and rebuilds it from here in the backward).
"""
import torch

try:
    import numpy as _np  # packbits: one pass (torch has no bit packing)
except ImportError:  # pragma: no cover (torch's own ops below)
    _np = None


class _Mask:
    """A dropout's noise (graph.py, _NOISE: Bernoulli draws of 0.0 and 1.0 divided in place by q > 0)
    as its mask, one bit an element (_pack), and its one nonzero value: the mask times the value gives
    it back bit for bit (0 / q is +0.0; every 1 / q is the same number)."""
    __slots__ = ("version", "bits", "value", "shape", "numel")

    @staticmethod
    def of(r, t):
        """The mask of recipe r's noise t (the whole storage), or None where r is not that pattern."""
        names = [str(s.func) for s in r.steps]
        if names[:2] != ["aten.empty_like.default", "aten.bernoulli_.float"] or len(names) > 3:
            return None
        if len(names) == 3:
            s = r.steps[2]
            q = s.args[1] if len(s.args) > 1 else s.kwargs.get("other")
            if names[2] != "aten.div_.Scalar" or isinstance(q, (torch.Tensor, complex)) or not (0 < q < float("inf")):
                return None
        if not (t.is_contiguous() and t.numel() == r.numel and t.storage_offset() == r.offset and
                t.is_floating_point()):
            return None
        m = _Mask()
        m.version, m.shape, m.numel = len(r.steps), t.shape, t.numel()
        with torch.no_grad():
            # 0 * inf is not 0: where the value is not finite, noise() would not give the noise back
            if _numpy_ok(t):
                a = (t.detach() if t.requires_grad else t).numpy().reshape(-1)
                m.bits = _pack(a, t.device)
                value = _first_nonzero(a, m.bits.numpy())  # (a max would read the noise again)
                if not _np.isfinite(value):
                    return None
                m.value = torch.from_numpy(_np.array(value))  # 0-dim, the noise's dtype
                return m
            m.value = t.max() if t.numel() else t.new_zeros(())
            if not bool(torch.isfinite(m.value)):
                return None
            m.bits = _pack(t.view(-1), t.device)
        return m

    def noise(self):
        """The noise, bit for bit: the mask as 1.0 and 0.0 times the value (0 * value is +0.0, as the
        draws made it), in the noise's shape."""
        with torch.no_grad():
            return _unpack(self.bits, self.numel).to(self.value.dtype).mul_(self.value).view(self.shape)


def mask_rebuild(device, n):
    """A function rebuilding a dropout noise of n fp32 elements from its mask as the runtime does
    (pricing.calibrate times it)."""
    t = torch.empty(n, device=device).bernoulli_(0.9).div_(0.9)
    m = _Mask()
    m.version, m.shape, m.numel = 1, t.shape, n
    m.bits = _pack(t.numpy() if _numpy_ok(t) else t, t.device)
    m.value = torch.tensor(1 / 0.9, dtype=t.dtype, device=device)
    return m.noise


# A mask is packed this many elements at a time: the comparison's bool scratch is 1 MiB, whatever the
# noise's size (the graph counts the packed bits, one byte per 8 elements, and nothing else).
_CHUNK = 1 << 20

_NUMPY_FLOATS = (torch.float16, torch.float32, torch.float64)


def _first_nonzero(a, bits):
    """The first nonzero element of a (numpy) by its packed bits, or 0 where there is none: every
    nonzero element of a dropout's noise is the same value (_Mask)."""
    i = int(bits.argmax()) if bits.size else 0
    if not bits.size or not bits[i]:
        return a.dtype.type(0)
    byte = int(bits[i])
    return a[i * 8 + (byte & -byte).bit_length() - 1]


def _numpy_ok(t):
    return _np is not None and t.device.type == "cpu" and t.dtype in _NUMPY_FLOATS


def _pack(flat, device):
    """flat != 0 as bits, little-endian in each byte (element i is bit i % 8 of byte i // 8): a uint8
    tensor of ceil(n / 8) bytes on the device. 8x smaller than a bool mask: a plan keeps a dropout's
    mask for 1/32 of its noise's fp32 bytes (issue 34: BART's 42 masks are 6% of its store-all in
    bools). flat: a 1-dim tensor, or on the CPU its numpy array: numpy compares and packs there
    (0.1 ms for 786k elements, where torch's comparison to a bool tensor took 0.47 ms and each torch
    op in the forward's mode ~20 us more). The bits and the scratch are torch's (the allocator counts
    them)."""
    n, array = (flat.numel(), False) if isinstance(flat, torch.Tensor) else (flat.size, True)
    out = torch.empty((n + 7) // 8, dtype=torch.uint8, device=device)
    scratch = torch.empty((min(n, _CHUNK) + 7) // 8 * 8, dtype=torch.bool, device=device)
    numpy = _np is not None and device.type == "cpu"
    on, bn = (out.numpy(), scratch.numpy()) if numpy else (None, None)
    weights = None if numpy else torch.tensor([1, 2, 4, 8, 16, 32, 64, 128], dtype=torch.uint8, device=device)
    for a in range(0, n, _CHUNK):
        m = min(_CHUNK, n - a)
        w = (m + 7) // 8 * 8
        (bn if numpy else scratch)[m:w] = False
        if array:
            _np.not_equal(flat[a:a + m], 0, out=bn[:m])
        else:
            torch.ne(flat[a:a + m], 0, out=scratch[:m])
        if numpy:
            on[a // 8: a // 8 + w // 8] = _np.packbits(bn[:w], bitorder="little")
        else:
            torch.sum(scratch[:w].view(torch.uint8).view(-1, 8) * weights, 1, dtype=torch.uint8,
                      out=out[a // 8: a // 8 + w // 8])
    return out


def _unpack(bits, n):
    """_pack's bits as n uint8 values 0 and 1."""
    if _np is not None and bits.device.type == "cpu":
        return torch.from_numpy(_np.unpackbits(bits.detach().numpy(), count=n, bitorder="little"))
    shifts = torch.arange(8, dtype=torch.uint8, device=bits.device)
    return ((bits.unsqueeze(1) >> shifts) & 1).view(-1)[:n]
