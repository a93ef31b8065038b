#!/usr/bin/env python3
"""st_state.py FILE: the SHA-256 of a checkpoint file's training state: every
tensor (name, dtype, shape, bytes) and every metadata entry but the checksum
and the scratch bandwidth a paged run's plan assumed (scratch_write_bps,
scratch_read_bps: a fact of the disk, not of the state). A run that pages
and one that does not write the same state, bit for bit. Pure Python."""
import hashlib, json, struct, sys

SKIP = {"remat_checksum", "scratch_write_bps", "scratch_read_bps"}

def main():
    raw = open(sys.argv[1], "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    h = hashlib.sha256()
    meta = head.pop("__metadata__", {})
    for k in sorted(meta):
        if k not in SKIP:
            h.update(("%s\0%s\0" % (k, meta[k])).encode())
    for name in sorted(head):
        t = head[name]
        a, b = t["data_offsets"]
        h.update(("%s\0%s\0%s\0" % (name, t["dtype"], t["shape"])).encode())
        h.update(data[a:b])
    print(h.hexdigest())

main()
