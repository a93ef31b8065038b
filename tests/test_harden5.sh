#!/bin/sh
# test_harden5.sh: the fifth hardening round, model folders as a new user
# finds them (--init DIR; docs/RELIABILITY.md, "Readers never block and
# never trust a file"), each class tried on several members:
#  1. a file of the folder that is there but cannot be read as one: a
#     symbolic link to nothing (a Hugging Face cache whose blob is gone), a
#     link loop, a FIFO, a folder, for config.json, model.safetensors, the
#     index and a shard; a shard the index names that is missing; a folder
#     with no config.json (a cache's models--org--name/ root). Each says
#     what the name is and what to do, exit 1, no work (a FIFO or a
#     dangling model.safetensors said "'DIR' has no model.safetensors").
#  2. a model folder, or one of its files, given where remat reads its own
#     files (--load, --resume, --init FILE, inspect): the message says to
#     give the folder with --init DIR ("it is a directory", "header length
#     7165896756295633531 exceeds the limit", "missing tensor
#     'transformer.wte.weight'" said nothing of the kind).
#  3. more shards than the limit of open files leaves: each shard stays
#     open until the load is done (they are read, not mapped), so the
#     message says so and how to raise the limit (ulimit -n).
#  4. a name or value from the folder's files shown in a message (a tensor
#     name, model_type, hidden_act, architectures, rope_scaling's type, a
#     weight_map name, a key given twice, an unknown key in the note, a
#     link's target) with a newline or a terminal escape in it: the message
#     stays one line, the characters shown as '?' (a newline split the
#     error in two, an escape reached the terminal).
#  5. JSON that Python's json writes and reads but JSON does not allow
#     (NaN, Infinity, -Infinity: json.dump writes them for float('nan')),
#     and an empty file: the message shows what stands at the byte and
#     says what it is ("invalid JSON near byte 78 of 403" said neither),
#     in config.json, the index and any other JSON remat reads.
#  6. a path the user gives (--init, --data, --load, --resume, inspect)
#     with a newline or a terminal escape in it: the error quotes it on one
#     line, the characters shown as '?' (cli_fail; they were printed raw);
#     a note or a warning quoting it does the same (cli_notice).
# Every command runs under `timeout`: a hang is a failure (exit 124).
. "$(dirname "$0")/harden_lib.sh"
PY=$(command -v python3 || echo /usr/bin/python3)
SRC=$(cd "$(dirname "$R")/.." && pwd)/tests
"$PY" "$SRC/hf_tiny.py" base >/dev/null 2>&1 || bad "hf_tiny.py"
run "$R" eval --init base $HF --data data.txt
check '[ $rc -eq 0 ]' "the tiny folder evaluates: exit $rc $(cat err)"
# folder NAME: a copy of base/; sharded NAME [K]: the same weights as K shards (2) and an index
folder() { rm -rf "$1" && cp -r base "$1"; }
sharded() {
    folder "$1" && "$PY" - "$1" "${2:-2}" <<'PY'
import json, struct, sys
d, parts_n = sys.argv[1], int(sys.argv[2])
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head, data = json.loads(raw[8:8 + n]), raw[8 + n:]
names = sorted((k for k in head if k != "__metadata__"), key=lambda k: head[k]["data_offsets"][0])
wmap = {}
parts = [names[:10], names[10:]] if parts_n == 2 else [names[i::parts_n] for i in range(parts_n)]
for i, part in enumerate(parts):
    file, h, out = "model-%05d-of-%05d.safetensors" % (i + 1, parts_n), {}, b""
    for k in part:
        b = data[head[k]["data_offsets"][0]:head[k]["data_offsets"][1]]
        h[k] = dict(head[k], data_offsets=[len(out), len(out) + len(b)])
        out += b
        wmap[k] = file
    hb = json.dumps(h).encode()
    open(d + "/" + file, "wb").write(struct.pack("<Q", len(hb)) + hb + out)
json.dump({"metadata": {}, "weight_map": wmap}, open(d + "/model.safetensors.index.json", "w"))
PY
    rm -f "$1/model.safetensors"
}
S2=model-00002-of-00002.safetensors
sharded sh
run "$R" eval --init sh $HF --data data.txt
check '[ $rc -eq 0 ]' "the sharded folder evaluates: exit $rc $(cat err)"

# ---- 1. a name that is there but not a readable file ---------------------------
# try DIR WORDS...: eval and train refuse DIR, exit 1, naming each word
try() {
    dir=$1; shift
    for cmd in "eval --init $dir $HF --data data.txt" "train --init $dir $HF --steps 1"; do
        # shellcheck disable=SC2086
        run "$R" $cmd
        refused 1 "$cmd"
        for w in "$@"; do check 'grep -q -- "$w" err' "$cmd: no '$w' in: $(cat err)"; done
    done
}
folder w1 && rm w1/model.safetensors && ln -s ../../blobs/abc w1/model.safetensors
try w1 "w1/model.safetensors' is a symbolic link to '../../blobs/abc'" "download the model again"
folder w2 && rm w2/model.safetensors && mkfifo w2/model.safetensors
try w2 "w2/model.safetensors': it is a FIFO"
folder w3 && rm w3/model.safetensors && mkdir w3/model.safetensors
try w3 "w3/model.safetensors': it is a directory"
folder w4 && rm w4/model.safetensors && ln -s model.safetensors w4/model.safetensors
try w4 "w4/model.safetensors' is a symbolic link" "fix the link"
folder c1 && rm c1/config.json && ln -s ../../blobs/c1 c1/config.json
try c1 "c1/config.json' is a symbolic link to '../../blobs/c1'" "download the model again"
folder c2 && rm c2/config.json
try c2 "'c2' has no config.json: not a Hugging Face model folder"
mkdir -p hub/models--org--m/snapshots && cp -r base hub/models--org--m/snapshots/rev
try hub/models--org--m "give the folder snapshots/<revision>/"
sharded i1 && rm i1/model.safetensors.index.json && ln -s nowhere i1/model.safetensors.index.json
try i1 "i1/model.safetensors.index.json' is a symbolic link to 'nowhere'"
sharded i2 && rm i2/model.safetensors.index.json && mkfifo i2/model.safetensors.index.json
try i2 "i2/model.safetensors.index.json': it is a FIFO"
sharded s1 && rm s1/$S2
try s1 "s1/$S2', which model.safetensors.index.json names, does not exist"
sharded s2 && rm s2/$S2 && ln -s ../../blobs/s2 s2/$S2
try s2 "s2/$S2' is a symbolic link to '../../blobs/s2'" "download the model again"
sharded s3 && rm s3/$S2 && mkfifo s3/$S2
try s3 "s3/$S2': it is a FIFO"
# a model.safetensors that is not a file beside an index: the index is read (transformers does the same)
sharded s4 && ln -s ../../blobs/gone s4/model.safetensors
run "$R" eval --init s4 $HF --data data.txt
check '[ $rc -eq 0 ]' "a dangling model.safetensors beside the index: exit $rc $(cat err)"

# ---- 2. a model folder or its file where a remat file is read -----------------
for cmd in "inspect base" "inspect base/config.json" "sample --load base --tokens 2" \
    "sample --load base/model.safetensors --tokens 2" "eval --load base --data data.txt" \
    "eval --load base/model.safetensors --data data.txt" "train --resume base $HF --steps 1" \
    "train --resume base/model.safetensors $HF --steps 1" "train --init base/config.json $HF --steps 1" \
    "train --init base/model.safetensors $HF --steps 1" "train --init sh/model-00001-of-00002.safetensors $HF --steps 1" \
    "train --init sh/model.safetensors.index.json $HF --steps 1"; do
    # shellcheck disable=SC2086
    run "$R" $cmd
    refused 1 "$cmd"
    check 'grep -q "is a Hugging Face model folder.*remat reads one with --init \\(base\\|sh\\) (train" err' "$cmd: no --init DIR hint: $(cat err)"
done
# a file of remat's, or a file outside a model folder, gets no such hint
"$R" train $LLAMA --steps 1 --save own.st >/dev/null 2>&1 || bad "training own.st"
run "$R" eval --load data.txt --data data.txt
check '[ $rc -eq 1 ] && ! grep -q "Hugging Face" err' "eval --load data.txt: $(cat err)"
cp own.st base/run.safetensors
run "$R" train --resume base/run.safetensors --steps 2 --quiet --save own2.st
check '[ $rc -eq 0 ]' "a remat file inside a model folder resumes: exit $rc $(cat err)"

# ---- 3. more shards than open files allowed --------------------------------------
sharded many 21
for cmd in "eval --init many $HF --data data.txt" "train --init many $HF --steps 1"; do
    # shellcheck disable=SC2086
    (ulimit -n 20 && $TO "$R" $cmd >out 2>err); rc=$?
    refused 1 "ulimit -n 20, $cmd"
    check 'grep -q "Too many open files (.*shards open: .*ulimit -n, now 20)" err' "ulimit -n 20, $cmd: $(cat err)"
done
run "$R" eval --init many $HF --data data.txt
check '[ $rc -eq 0 ]' "21 shards within the limit: exit $rc $(cat err)"

# ---- 4. control characters from the files, in one-line messages ----------------
"$PY" - <<'PY'
import json, os, shutil, struct
def read(p):
    b = open(p, "rb").read(); n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
def write(p, head, data, raw=None):
    hb = raw if raw is not None else json.dumps(head).encode()
    open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + data)
head, data = read("base/model.safetensors")
cfg = json.load(open("base/config.json"))
def mk(name, **over):
    os.makedirs(name, exist_ok=True)
    json.dump(dict(cfg, **over), open(name + "/config.json", "w"))
    shutil.copy("base/model.safetensors", name)
mk("n_mt", model_type="lla\nma")
mk("n_act", hidden_act="si\nlu")
mk("n_arch", architectures=["Llama\x1b[31mForCausalLM"])
mk("n_rope", rope_scaling={"type": "li\nnear", "factor": 2.0})
mk("n_tensor")
h = dict(head); h["evil\nname\x1b[31m.weight"] = dict(head["model.norm.weight"])
write("n_tensor/model.safetensors", None, data, json.dumps(h).encode())
mk("n_hdup")
hb = json.dumps(head).encode()
write("n_hdup/model.safetensors", None, data, b'{"a\\nb": 1, "a\\nb": 2, ' + hb[1:])
mk("n_dup")
open("n_dup/config.json", "w").write(json.dumps(cfg)[:-1] + ', "a\\nb": 1, "a\\nb": 2}')
mk("n_idx")
os.remove("n_idx/model.safetensors"); shutil.copy("base/model.safetensors", "n_idx/a.safetensors")
wmap = {k: "a.safetensors" for k in head if k != "__metadata__"}
wmap["bad\nname"] = "a.safetensors"
json.dump({"weight_map": wmap}, open("n_idx/model.safetensors.index.json", "w"))
mk("n_note", **{"x\x1b[31mred\nkey": 1})
PY
folder n_link && rm n_link/model.safetensors && ln -s "$(printf 'blob\nx')" n_link/model.safetensors
esc=$(printf '\033')
for d in n_mt n_act n_arch n_rope n_tensor n_hdup n_dup n_idx n_link; do
    run "$R" eval --init $d $HF --data data.txt
    check '[ $rc -eq 1 ] && [ $(wc -l < err) -eq 1 ] && ! grep -q "$esc" err && grep -q "error: .*?" err' \
        "$d: not one line, or control characters: exit $rc: $(cat -A err | head -c 300)"
done
run "$R" eval --init n_note $HFV --data data.txt --max-batches 1
check '[ $rc -eq 0 ] && [ $(grep -c . err) -eq 1 ] && ! grep -q "$esc" err && grep -q "note: .*x?\[31mred?key" err' \
    "n_note: the note of keys not read: exit $rc: $(cat -A err | head -c 300)"

# ---- 5. NaN, Infinity, an empty file ----------------------------------------------
for lit in NaN Infinity -Infinity; do
    folder j$lit && sed "s/\"rope_theta\": [0-9.]*/\"rope_theta\": $lit/" base/config.json > j$lit/config.json
    try j$lit "config.json': not a JSON object: invalid JSON near byte [0-9]* of [0-9]* ('$lit," \
        "NaN and Infinity are not JSON numbers"
done
sharded jidx && sed 's/"weight_map"/"metadata": {"total_size": NaN}, "weight_map"/' sh/model.safetensors.index.json \
    > jidx/model.safetensors.index.json
try jidx "index.json': not a JSON object: invalid JSON near byte [0-9]* of [0-9]* ('NaN}" "are not JSON numbers"
folder jempty && : > jempty/config.json
try jempty "config.json': not a JSON object: invalid JSON near byte 0 of 0: the file is empty"
printf '{"stages": [{"a": Infinity}]}' > chain.json
run "$R" plan --chain chain.json --memory-budget 100
refused 1 "plan --chain with Infinity"
check 'grep -q "(.Infinity}]}.): NaN and Infinity are not JSON numbers" err' "plan --chain with Infinity: $(cat err)"
printf '{"stages": []}\n\033[31mred' > trail.json
run "$R" plan --chain trail.json --memory-budget 100
check '[ $rc -eq 1 ] && [ $(wc -l < err) -eq 1 ] && ! grep -q "$esc" err' "bytes after a chain file's object: $(cat -A err)"

# ---- 6. a path the user gives, with a newline or a terminal escape in it -----------
# the error quotes it: one line, the characters shown as '?' (cli_fail)
odd=$(printf 'no\nsuch\033[31mred')
for flags in "eval --init $odd --data data.txt" "train --data $odd --steps 1" "sample --load $odd" \
    "train --resume $odd" "inspect $odd"; do
    IFS='|'; set -- $(printf '%s' "$flags" | sed 's/ /|/g'); unset IFS
    run "$R" "$@"
    check '[ $rc -ne 0 ] && [ $(wc -l < err) -eq 1 ] && ! grep -q "$esc" err && grep -q "error: .*no?such?\[31mred" err' \
        "remat ${flags%% *} with a newline and an escape in a path: exit $rc: $(cat -A err | head -c 300)"
done

# notes and warnings quote it as one line too (cli_notice): a resumed run's note names its file
run "$R" train --model gpt --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --data data.txt --steps 1 \
    --save "$odd.safetensors" --quiet
run "$R" train --resume "$odd.safetensors" --lr 0.5 --steps 2 --quiet
check '[ $rc -eq 0 ] && grep -q "note: --lr overrides the value in .no?such?\[31mred" err && ! grep -q "$esc" err &&
    ! grep -qv "^remat: " err' "a note quoting a path with a newline and an escape: exit $rc: $(cat -A err | head -c 400)"
rm -f "$odd.safetensors"

# ---- a model whose vocab is above 256 given bytes ----------------------------
# (a text file, or token ids without --token-bytes): its ids above 255 are never seen; eval of a
# 320-id Hugging Face folder printed a perplexity of byte ids and exited 0 (--vocab given on the
# command line was refused, the model's own vocab was not checked)
awk 'BEGIN { for (i = 0; i < 2048; i++) printf "%c%c", 1, 1 }' > ids.u16  # id 257, 2048 times
V="--model llama --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --quiet"
run "$R" train $V --vocab 320 --data ids.u16 --token-bytes 2 --steps 1 --save v320.st
check '[ $rc -eq 0 ]' "a vocab-320 model on 2-byte ids: exit $rc $(cat err)"
for args in "train --resume v320.st --data data.txt --steps 2" "eval --load v320.st --data data.txt $HF" \
    "eval --load v320.st --data ids.u16 $HF"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused 2 "$args"
    check 'grep -q "is read as bytes .* but the model.s vocab is 320 (from --" err' "$args: $(cat err)"
done
run "$R" eval --load v320.st --data ids.u16 --token-bytes 2 $HF
check '[ $rc -eq 0 ]' "eval of the vocab-320 model on its ids with --token-bytes 2: exit $rc $(cat err)"
run "$R" sample --load v320.st --prompt "hello" --tokens 2 --threads 1
refused 2 "sample --prompt on a vocab-320 model"
check 'grep -q "vocab is 320 (token ids, not bytes)" err' "sample --prompt on a vocab-320 model: $(cat err)"
run "$R" sample --load v320.st --tokens 2 --threads 1
check '[ $rc -eq 0 ]' "sample of a vocab-320 model without --prompt: exit $rc $(cat err)"

echo "test_harden5: $pass passed, $fail failed"
[ $fail -eq 0 ]
