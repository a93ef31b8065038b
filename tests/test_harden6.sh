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
#  2. a value a file gives that its reader took and the op refused: rope_theta
#     in (0, 1] and rms_norm_eps 1 in config.json, and in a checkpoint file's
#     metadata (with beta1 1, beta2 0.99999999 that is 1 as a float, eps 0)
#     failed with the op's message ("rope: theta = 0.5 must be a finite
#     number > 1", "rm_optim_new: eps (in (0, 1]) is 0"), naming neither the
#     file nor the key; data_position far from step (2^63 + 1) overflowed a
#     signed sum in train's loop (UBSan) and trained on. Each reader now
#     applies the op's rule (util.h), naming the file and the key.
#  3. the same for a LoRA file as sample and eval read it: sample took
#     lora_alpha 1e30 (then "the model's output is not finite ... check the
#     file") and lora_dropout 0.99, which --resume and eval refuse; eval's
#     message for a model its file's metadata cannot build named no file.
#     sample now reads a file with --resume's reader (rm_file_model_info):
#     one set of keys and ranges, one message.
#  4. the flags --rope-theta and --norm-eps take the ops' ranges (0.5 and 1
#     passed them and failed at the op, exit 2 naming no flag), and a resumed
#     file whose freeze metadata leaves nothing to train exits 1 naming it
#     (it exited 2 naming --freeze, a flag never given).
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

# ---- 2. values the readers took and the ops refused --------------------------------
# cfg NAME PYTHON: a copy of base/ whose config.json PYTHON (on dict c) edits
cfg() {
    rm -rf "$1" && cp -r base "$1" && "$PY" - "$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[2])
json.dump(c, open(sys.argv[1], "w"))
PY
}
for e in 'c["rope_theta"] = 0.5' 'c["rope_theta"] = 1.00000001' 'c["rms_norm_eps"] = 1.0' \
    'c["rope_parameters"] = {"rope_type": "default", "rope_theta": 1}'; do
    cfg c2 "$e"
    for cmd in "eval --init c2 $HF --data data.txt" "train --init c2 $HF --steps 1"; do
        # shellcheck disable=SC2086
        run "$R" $cmd
        refused 1 "$e: $cmd"
        check 'grep -q "c2/config.json.: .*\(rope_theta\|rms_norm_eps\) must be a number above" err' "$e: $cmd: $(cat err)"
    done
done
# meta IN OUT PYTHON: OUT, IN with its metadata (dict m) edited and its checksum recomputed
meta() {
    "$PY" - "$@" <<'PY'
import hashlib, json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h, data = json.loads(raw[8:8 + n]), raw[8 + n:]
m = h["__metadata__"]
exec(sys.argv[3])
t = {k: v for k, v in h.items() if k != "__metadata__"}
s = hashlib.sha256(b"remat-checksum-1\0" + b"%d\0" % len(t))
for k in sorted(t, key=str.encode):
    b = data[t[k]["data_offsets"][0]:t[k]["data_offsets"][1]]
    s.update(k.encode() + b"\0" + t[k]["dtype"].encode() + b"\0" + ",".join(map(str, t[k]["shape"])).encode() + b"\0" + b)
mm = {k: v for k, v in m.items() if k != "remat_checksum"}
s.update(b"%d\0" % len(mm))
for k in sorted(mm, key=str.encode):
    s.update(k.encode() + b"\0" + mm[k].encode() + b"\0")
m["remat_checksum"] = "sha256:" + s.hexdigest()
hb = json.dumps(h).encode()
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
PY
}
"$R" train $LLAMA --data data.txt --steps 2 --save ll.st >/dev/null 2>&1 || bad "training ll.st"
meta ll.st same.st 'pass'
run "$R" train --resume same.st --data data.txt --steps 3 --quiet
check '[ $rc -eq 0 ]' "the file rewritten as it was resumes: exit $rc $(cat err)"
for kv in rope_theta=0.5 norm_eps=1 eps=0 beta1=1 beta2=0.99999999 data_position=9223372036854775809; do
    meta ll.st bad.st "m['${kv%%=*}'] = '${kv#*=}'"
    run "$R" train --resume bad.st --data data.txt --steps 4 --quiet
    refused 1 "--resume, metadata $kv"
    check 'grep -q "bad.st.: metadata .${kv%%=*}. has the invalid value .${kv#*=}." err' "--resume, metadata $kv: $(cat err)"
done
for kv in rope_theta=0.5 norm_eps=1; do
    meta ll.st bad.st "m['${kv%%=*}'] = '${kv#*=}'"
    run "$R" sample --load bad.st --tokens 2 --threads 1
    refused 1 "sample --load, metadata $kv"
    check 'grep -q "bad.st.: metadata .${kv%%=*}. has the invalid value .${kv#*=}." err' \
        "sample --load, metadata $kv (--resume's reader, rm_file_model_info): $(cat err)"
done

# ---- 3. a LoRA file's metadata as sample and eval read it ---------------------------
"$R" train $LLAMA --data data.txt --steps 2 --lora 4 --save lo.st >/dev/null 2>&1 || bad "training lo.st"
for kv in lora_alpha=1e30 lora_dropout=0.99; do
    meta lo.st bad.st "m['${kv%%=*}'] = '${kv#*=}'"
    run "$R" sample --load bad.st --tokens 2 --threads 1
    refused 1 "sample --load, metadata $kv"
    check 'grep -q "bad.st.: metadata .${kv%%=*}. has the invalid value .${kv#*=}." err' "sample, $kv: $(cat err)"
done
meta lo.st bad.st "m['lora_targets'] = 'nothing'"
for cmd in "sample --load bad.st --tokens 2 --threads 1" "eval --load bad.st --data data.txt $HF"; do
    # shellcheck disable=SC2086
    run "$R" $cmd
    refused 1 "$cmd, lora_targets nothing"
    check 'grep -q "bad.st.: llama: LoRA target .nothing. is not one of its linear layers" err' "$cmd: $(cat err)"
done

# ---- 4. a rule's ends said where the value comes from ------------------------------
# --rope-theta 0.5 and --norm-eps 1 passed the flags' ranges and failed at the op (exit 2 with the op's
# message, no flag named); a file whose freeze metadata freezes everything exited 2 naming --freeze,
# a flag never given
for fv in "--rope-theta 0.5" "--rope-theta 1" "--norm-eps 1" "--norm-eps 0"; do
    # shellcheck disable=SC2086
    run "$R" train $LLAMA --data data.txt --steps 1 $fv
    refused 2 "$fv"
    check 'grep -q "^remat: error: ${fv%% *} expects a number above" err' "$fv: $(cat err)"
done
run "$R" train $LLAMA --data data.txt --steps 1 --rope-theta 1e30 --quiet
check '[ $rc -eq 0 ]' "--rope-theta 1e30 (the top of its range): exit $rc $(cat err)"
meta ll.st bad.st "m['freeze'] = '*'"
run "$R" train --resume bad.st --data data.txt --steps 4 --quiet
refused 1 "--resume, metadata freeze *"
check 'grep -q "bad.st.: its freeze metadata leaves no parameter to train" err' "--resume, freeze *: $(cat err)"

# JSON nested past cJSON's limit (1000) is valid JSON remat cannot read: the message says so (it said only
# "invalid JSON near byte 1004"); brackets inside a string do not count
"$PY" -c 'print("{\"a\": \"" + "[" * 1500 + "\", \"b\": " + "[" * 1100 + "]" * 1100 + "}")' > deep.json
rm -rf deep && cp -r base deep && cp deep.json deep/config.json
for cmd in "plan --graph deep.json --memory-budget 1" "eval --init deep $HF --data data.txt"; do
    # shellcheck disable=SC2086
    run "$R" $cmd
    refused 1 "$cmd, nested 1100 deep"
    check 'grep -q "invalid JSON near byte 2[0-9]* of .*: nested deeper than 1000 arrays and objects" err' "$cmd: $(cat err)"
done

# an index whose weight_map is empty said the model's first tensor was missing
empty_index() { rm -rf "$1" && cp -r big "$1" && printf '{"metadata": {}, "weight_map": {}}' > "$1/model.safetensors.index.json"; }
empty_index emptymap
run "$R" eval --init emptymap $HF --data data.txt
refused 1 "an index mapping nothing"
check 'grep -q "index.json.: its weight_map maps no tensor to a shard" err' "an index mapping nothing: $(cat err)"

echo "test_harden6: $pass passed, $fail failed"
[ $fail -eq 0 ]
