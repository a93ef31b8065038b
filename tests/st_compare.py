#!/usr/bin/env python3
"""st_compare.py A B [TOL]: compares the F32 tensors of two .safetensors
files (same names). Without TOL they must be bit-identical; with TOL the
largest absolute difference must be <= TOL. Prints the largest difference
and exits 0 when the files agree, 1 when not. Pure Python (no numpy)."""
import array, json, struct, sys

def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        out[name] = data[a:b]
    return out

def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    tol = float(sys.argv[3]) if len(sys.argv) > 3 else None
    if sorted(a) != sorted(b):
        print("tensor names differ:", sorted(set(a) ^ set(b)))
        return 1
    worst, same = 0.0, True
    for name in a:
        if a[name] == b[name]:
            continue
        same = False
        x, y = array.array("f", a[name]), array.array("f", b[name])
        worst = max(worst, max(abs(p - q) for p, q in zip(x, y)))
    print("tensors %d, bit-identical %s, max |diff| %.3g" % (len(a), same, worst))
    return 0 if (same if tol is None else worst <= tol) else 1

sys.exit(main())
