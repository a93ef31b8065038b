#!/bin/sh
# test_harden6.sh: the sixth hardening round, model folders and checkpoint
# files as a user brings them (docs/RELIABILITY.md), each class tried on
# several members:
#  1. a count a file sets (metadata keys of a safetensors header, entries of
#     an index's weight_map, tensors of a shard) met by a check whose time
#     grew with its square: 100000 metadata keys took 25 s to open (every
#     reader: inspect, --load, --resume, --init, a shard), an index of
#     100000 names 83 s; a 100 MB header or a 64 MB index, hours. Each is
#     now a sort (n log n): refused or read within seconds.
# Every command runs under `timeout`: a hang is a failure (exit 124).
. "$(dirname "$0")/harden_lib.sh"
PY=$(command -v python3 || echo /usr/bin/python3)
SRC=$(cd "$(dirname "$R")/.." && pwd)/tests
"$PY" "$SRC/hf_tiny.py" base >/dev/null 2>&1 || bad "hf_tiny.py"
N=150000 # quadratic: over a minute before (200 s for the index); a second or two now, under ASan too

# ---- 1. counts a file sets, checked in n log n ----------------------------------
# a header of N metadata keys and one tensor; a folder whose index maps N empty tensors of
# its shard and leaves the shard's last one unmapped (found only after every other is looked up)
"$PY" - "$N" <<'PY'
import json, os, struct, sys
n = int(sys.argv[1])
def st(path, head):
    hb = json.dumps(head).encode()
    open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + b"\0" * 4 * ("a" in head))
st("meta.st", {"__metadata__": {"k%07d" % i: "v" for i in range(n)},
               "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})
os.makedirs("big", exist_ok=True)
os.system("cp base/config.json big/")
shard = "model-00001-of-00001.safetensors"
st("big/" + shard, {"t%07d" % i: {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(n + 1)})
json.dump({"weight_map": {"t%07d" % i: shard for i in range(n)}}, open("big/model.safetensors.index.json", "w"))
PY
TO="timeout 20"
run "$R" inspect meta.st
check '[ $rc -eq 0 ] && grep -q "metadata: $N entries" out' "inspect of $N metadata keys: exit $rc $(head -c 300 err)"
for cmd in "sample --load meta.st --tokens 2" "train --init meta.st $LLAMA --steps 1" "train --resume meta.st --steps 1"; do
    # shellcheck disable=SC2086
    run "$R" $cmd
    refused 1 "$cmd, $N metadata keys"
done
for cmd in "eval --init big $HF --data data.txt" "train --init big $HF --steps 1"; do
    # shellcheck disable=SC2086
    run "$R" $cmd
    refused 1 "$cmd, an index of $N names"
    check 'grep -q "holds tensor .t0$N., which .big/model.safetensors.index.json. does not map to it" err' \
        "$cmd: $(head -c 300 err)"
done
TO="timeout 60"

echo "test_harden6: $pass passed, $fail failed"
[ $fail -eq 0 ]
