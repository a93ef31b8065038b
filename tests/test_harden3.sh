#!/bin/sh
# test_harden3.sh: the command-line classes of the third hardening round
# (issue 28), each tried on several members:
#  1. no output replaces an input by any name: a Hugging Face cache's links
#     (snapshots/<rev>/x -> ../../blobs/<sha>), hard links, a sharded
#     folder's index and shards, a step file that already exists as a link;
#     every output flag of train, eval, bench, export (exit 2, nothing
#     written, the input unchanged).
#  2. eval's answer is finite or there is none: a batch whose loss is not
#     finite is exit 1 naming the batch (it printed "mean loss -nan" and
#     exited 0); a perplexity past a double is said, and null in --report;
#     sample draws no token from logits that are not finite.
#  3. the narrowing rule: --frozen-dtype f16 (or bf16) refuses, before step
#     0, a weight it cannot hold, naming the tensor and suggesting bf16/f32,
#     for a Hugging Face folder and a remat file, in train and eval.
#  6. a NUL character in the JSON of a Hugging Face folder (after
#     config.json's object, in a tensor name, in a weight_map shard name)
#     is exit 1 "... contains a NUL character".
#  7. messages and lists: every list of names refuses an item twice and an
#     empty item (--lora-targets, --freeze, --train-only, --page,
#     --strategies); --scratch '' names the flag; --steps 0 prints no nan.
#  4. --scratch that cannot page what the limit needs says why and what
#     would (the fused optimizer), with that least limit, which then works;
#  5. the scratch bandwidth: the median of the probe's rounds, in the report
#     with its spread, and in the checkpoint file: --resume plans with it
#     unless --scratch-bandwidth (a figure, or measure) says otherwise.
# Every command runs under `timeout`: a hang is a failure (exit 124).
. "$(dirname "$0")/harden_lib.sh"

# ---- 1. file identity -------------------------------------------------------
# A Hugging Face cache: hub/blobs/<sha> holds the bytes, snapshots/<rev>/NAME
# links to them. A plain weights blob (export --merge-lora writes HF names).
"$R" train $LLAMA --lora 2 --steps 1 --save lora.st >/dev/null 2>&1 || bad "training the LoRA llama"
"$R" export --load lora.st --merge-lora --out merged.st >/dev/null 2>&1 || bad "export --merge-lora"
mkdir -p hub/blobs hub/snapshots/rev hub/shard
cp merged.st hub/blobs/w1
echo "$LLAMA_CONFIG" > hub/blobs/c1
ln -s ../../blobs/w1 hub/snapshots/rev/model.safetensors
ln -s ../../blobs/c1 hub/snapshots/rev/config.json
# a sharded folder: the index and its one shard (any name it gives) are links
cp merged.st hub/blobs/w2
"$R" inspect merged.st | awk '/^checksum/ { on = 0 } on { printf "%s\"%s\": \"part-a.bin.safetensors\"", n++ ? ", " : "", $1 }
    /^tensors:/ { on = 1; getline }
    END { print "" }' > names
printf '{"metadata": {}, "weight_map": {%s}}\n' "$(cat names)" > hub/blobs/i2
ln -s ../blobs/c1 hub/shard/config.json
ln -s ../blobs/i2 hub/shard/model.safetensors.index.json
ln -s ../blobs/w2 hub/shard/part-a.bin.safetensors
ln hub/blobs/c1 hard-config.json
for f in w1 c1 w2 i2; do cp hub/blobs/$f $f.orig; done
blobs_kept() { cmp -s hub/blobs/w1 w1.orig && cmp -s hub/blobs/c1 c1.orig && cmp -s hub/blobs/w2 w2.orig &&
               cmp -s hub/blobs/i2 i2.orig; }
run "$R" train --init hub/snapshots/rev $HFV --steps 1 --save fine.st
check '[ $rc -eq 0 ] && grep -q "loaded 12 tensors" out' "the cached folder does not train: exit $rc $(cat err)"
run "$R" train --init hub/shard $HFV --steps 1 --save fine2.st
check '[ $rc -eq 0 ] && grep -q "loaded 12 tensors" out' "the sharded folder does not train: exit $rc $(cat err)"
S=hub/snapshots/rev
for args in "train --init $S $HF --steps 1 --save hub/blobs/w1" "train --init $S $HF --steps 1 --report hub/blobs/c1" \
    "train --init $S $HF --steps 1 --trace hub/blobs/w1" "train --init $S $HF --steps 1 --report hard-config.json" \
    "train --init $S $HF --steps 1 --save $S/../../blobs/w1" "train --init $S/ $HF --steps 1 --save ./hub/blobs/c1" \
    "train --init $S $HF --steps 2 --save run.st --save-every 1 --report hub/blobs/w1" \
    "train --init $S $HF --steps 1 --lora 2 --save-adapters hub/blobs/../snapshots/rev --report hub/blobs/c1" \
    "eval --init $S $HF --data data.txt --report hub/blobs/w1" "eval --init $S $HF --data data.txt --report hub/blobs/c1" \
    "train --init hub/shard $HF --steps 1 --save hub/blobs/w2" "train --init hub/shard $HF --steps 1 --report hub/blobs/i2" \
    "eval --init hub/shard $HF --data data.txt --report hub/blobs/w2" \
    "eval --init hub/shard $HF --data data.txt --report hub/blobs/i2" \
    "bench --init $S $HF --steps 1 --budgets 0 --rounds 1 --strategies none --csv hub/blobs/w1" \
    "bench --init hub/shard $HF --steps 1 --budgets 0 --rounds 1 --strategies none --svg hub/blobs/i2"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused 2 "$args"
    check 'blobs_kept && grep -q "replace" err' "$args: a blob changed or the reason is not said: $(cat err)"
done
# the adapter folder's files are outputs too: a link in it to an input
mkdir -p ad && ln -s ../hub/blobs/c1 ad/adapter_config.json
run "$R" train --init $S $HF --steps 1 --lora 2 --save-adapters ad
refused 2 "--save-adapters DIR whose adapter_config.json links to config.json's blob"
rm ad/adapter_config.json && ln data.txt ad/adapter_model.safetensors
run "$R" train $LLAMA --lora 2 --steps 1 --data data.txt --save-adapters ad
refused 2 "--save-adapters DIR whose adapter_model.safetensors is a hard link to --data"
rm ad/adapter_model.safetensors && ln lora.st ad/adapter_model.safetensors
run "$R" export --load lora.st --adapters ad
refused 2 "export --adapters DIR whose adapter_model.safetensors is a hard link to another input"
rm -f ad/adapter_model.safetensors
# a step file of --save-every that exists already, a link to an input
ln -s data.txt run.step000002.st
run "$R" train $LLAMA --steps 3 --data data.txt --save run.st --save-every 2
refused 2 "a step file that is a link to --data"
check '[ ! -e run.st ] && [ -L run.step000002.st ]' "the step file's link was replaced"
ln lora.st run2.step000001.st
cp lora.st lora.orig
run "$R" train $LLAMA --steps 2 --init lora.st --lora 2 --save run2.st --save-every 1
refused 2 "a step file that is a hard link to --init"
run "$R" export --load lora.st --merge-lora --out run2.step000001.st
refused 2 "export --out: a hard link to --load"
check 'cmp -s lora.st lora.orig' "--init's file changed"
# the same file spelled through a linked folder
ln -s hub/blobs blobs-link
run "$R" eval --init $S $HF --data data.txt --report blobs-link/w1
refused 2 "eval --report through a linked folder onto the weights blob"
run "$R" eval --init $S $HF --data data.txt --report report.json
check '[ $rc -eq 0 ] && [ -s report.json ] && blobs_kept' "eval --report elsewhere: exit $rc $(cat err)"

# ---- 2, 3, 6: files crafted with Python's struct and json ----------------------
# edit SRC DST TENSOR INDEX VALUE: a copy of SRC with element INDEX of
# TENSOR (F32) set to VALUE (INDEX -1: all of them); DST's checksum dropped
edit() {
    python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name, index, value = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
b = bytearray(open(src, 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
lo, hi = h[name]['data_offsets']
at = range((hi - lo) // 4) if index < 0 else [index]
for i in at:
    b[8 + n + lo + 4 * i:8 + n + lo + 4 * i + 4] = struct.pack('<f', value)
h.get('__metadata__', {}).pop('remat_checksum', None)
j = json.dumps(h).encode()
j += b' ' * ((8 - len(j) % 8) % 8)
open(dst, 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
}
# folder NAME WEIGHTS: a Hugging Face folder of the config above and WEIGHTS
folder() { mkdir -p "$1" && cp hub/blobs/c1 "$1/config.json" && cp "$2" "$1/model.safetensors"; }
if command -v python3 >/dev/null 2>&1; then
    # 2. a head whose logits overflow: every batch's loss is NaN
    edit merged.st huge.st lm_head.weight -1 3e38 && folder huge huge.st
    run "$R" eval --init huge $HF --data data.txt --report huge.json
    check '[ $rc -eq 1 ] && grep -q "batch 0 of [0-9]* .*NaN" err && ! grep -qi "nan" out && [ ! -e huge.json ]' \
        "eval of a model whose loss is NaN: exit $rc: $(cat out err)"
    # sample from the same weights: no token from logits that are not finite (it printed NUL bytes, exit 0)
    edit lora.st hugel.st lm_head.weight -1 3e38
    run "$R" sample --load hugel.st --tokens 4 --prompt ab
    check '[ $rc -eq 1 ] && grep -q "generated token 0 is not finite" err' "sample of logits that overflow: exit $rc: $(cat err)"
    # a finite loss past 709: its perplexity overflows a double: said, null in the report
    edit merged.st far.st lm_head.weight -1 0 && python3 - far.st <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
lo, hi = h['lm_head.weight']['data_offsets']
rows, cols = h['lm_head.weight']['shape']
for r in range(rows):  # column 0 of token 0's row: 1e6, so a target other than 0 costs ~1e6 * |h0|
    b[8 + n + lo + 4 * r * cols:8 + n + lo + 4 * r * cols + 4] = struct.pack('<f', 1e6 if r == 0 else 0.0)
open(sys.argv[1], 'wb').write(b)
PY
    folder far far.st
    run "$R" eval --init far $HF --data data.txt --report far.json
    check '[ $rc -eq 0 ] && grep -q "perplexity beyond" out && grep -q "\"perplexity\": null" far.json' \
        "eval with a perplexity past a double: exit $rc: $(cat out err) $(cat far.json 2>/dev/null)"
    # 3. a weight above F16's 65504 (and one halfway past it, -65520), by every loader
    for v in 70000 -65520; do
        edit merged.st w$v.st model.layers.0.self_attn.q_proj.weight 5 $v && folder w$v w$v.st
        for cmd in "train --init w$v $HF --steps 1 --lora 2 --frozen-dtype f16 --save x.st" \
            "eval --init w$v $HF --data data.txt --frozen-dtype f16" \
            "train --init w$v.st $LLAMA --steps 1 --lora 2 --frozen-dtype f16 --save x.st"; do
            # shellcheck disable=SC2086
            run "$R" $cmd
            check '[ $rc -eq 1 ] && grep -q "q_proj.weight.*does not fit F16.*bf16 or f32" err && ! grep -q "^step\|diverged\|saved" out err && [ ! -e x.st ]' \
                "$cmd: exit $rc: $(cat err)"
        done
        run "$R" train --init w$v $HF --steps 1 --lora 2 --frozen-dtype bf16
        check '[ $rc -eq 0 ]' "a weight of $v in bf16: exit $rc $(cat err)"
    done
    edit merged.st w65504.st model.layers.0.self_attn.q_proj.weight 5 65504 && folder w65504 w65504.st
    run "$R" train --init w65504 $HF --steps 1 --lora 2 --frozen-dtype f16
    check '[ $rc -eq 0 ]' "65504, F16's largest, was refused: $(cat err)"
    # 6. NUL characters in a folder's JSON
    mkdir -p nul1 && cp merged.st nul1/model.safetensors && { cat hub/blobs/c1; printf '\0junk'; } > nul1/config.json
    python3 - merged.st nul2.st <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n])
h['model.norm.weight\u0000x'] = h.pop('model.norm.weight')  # remat read 'model.norm.weight', Python another name
j = json.dumps(h).encode()
j += b' ' * ((8 - len(j) % 8) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(j)) + j + b[8 + n:])
PY
    folder nul2 nul2.st
    mkdir -p nul3 && cp hub/blobs/c1 nul3/config.json && cp merged.st "nul3/part.safetensors"
    sed 's/part-a.bin.safetensors/part.safetensors\\u0000.bin/g' hub/blobs/i2 > nul3/model.safetensors.index.json
    mkdir -p nul4 && cp merged.st nul4/model.safetensors
    sed 's/"vocab_size"/"note": "a\\u0000b", "vocab_size"/' hub/blobs/c1 > nul4/config.json
    for d in nul1 nul2 nul3 nul4; do
        run "$R" train --init $d $HF --steps 1
        check '[ $rc -eq 1 ] && grep -q "contains a NUL character" err' "a NUL in $d's JSON: exit $rc: $(cat err)"
        run "$R" eval --init $d $HF --data data.txt
        check '[ $rc -eq 1 ] && grep -q "contains a NUL character" err' "eval: a NUL in $d's JSON: exit $rc: $(cat err)"
    done
else
    echo "test_harden3.sh: no python3 to craft files; classes 2, 3 and 6 are in test_harden3.c only"
fi

# ---- 7. lists, empty values, nothing printed as nan -----------------------------
G="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --quiet"
for args in "train $LLAMA --lora 2 --lora-targets q_proj,q_proj" "train $LLAMA --lora 2 --lora-targets q_proj,v_proj,q_proj" \
    "train $G --freeze transformer.wte,transformer.wte" "train $G --train-only transformer.wte,transformer.wte" \
    "train $G --scratch . --page activations,activations" "train $G --scratch . --page ,activations" \
    "train $G --scratch . --page activations," "plan $G --scratch . --page activations,,moments" \
    "bench $G --strategies none,sqrt,none --steps 1" "train $LLAMA --lora 2 --lora-targets ,q_proj" \
    "train $G --scratch ''" "plan $G --scratch '' --memory-budget 50%" "bench $G --scratch '' --steps 1" \
    "export --load lora.st --adapters ad5 --base-model ''"; do
    eval "set -- $args"
    run "$R" "$@"
    refused 2 "$args"
    check '! grep -q "rm_options\|rm_compile" err' "$args: the library's names in the message: $(cat err)"
done
run "$R" train --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --steps 0 --save zero.st
check '[ $rc -eq 0 ] && ! grep -qi "nan" out err && grep -q "no final loss" out' "--steps 0: exit $rc: $(cat out err)"
run "$R" train --resume zero.st --steps 0 --threads 1
check '[ $rc -eq 0 ] && ! grep -qi "nan" out err' "--resume at its --steps: exit $rc: $(cat out err)"
run "$R" train $G --adam-betas 0.9,0.9 --steps 1
check '[ $rc -eq 0 ]' "a sequence may repeat a value (--adam-betas 0.9,0.9): exit $rc $(cat err)"

# ---- 4, 5. paging to a scratch folder (on the build's disk: /tmp may be tmpfs) ----
S=$(mktemp -d "$(cd "$(dirname "$R")" && pwd)/harden3_sh.XXXXXX")
trap 'rm -rf "$T" "$S"' EXIT
P="--layers 2 --dim 128 --heads 4 --context 64 --batch 4 --threads 1 --steps 2 --quiet"
# limits above the start-up RSS and margin (under ASan the start-up is larger): FLOOR + MiB for remat
floor() {
    "$R" train "$@" --memory-limit 1MiB 2>&1 | sed -n 's/.*raise the limit above \([0-9.]*\) MiB.*/\1/p'
}
above() { awk -v f="$1" -v m="$2" 'BEGIN { printf "%.2fMiB", f + m }'; }
F=$(floor $P)
check '[ -n "$F" ]' "no start-up floor from --memory-limit 1MiB"
for scratch in "--scratch $S" ""; do
    run "$R" train $P --memory-limit "$(above "$F" 4)" $scratch
    least=$(sed -n 's/.*--grad-clip 0, and with them it is \([0-9.]*\)MiB.*/\1/p' err)
    check '[ $rc -eq 1 ] && [ -n "$least" ] && grep -q "fused optimizer" err' \
        "unfused ${scratch:+with --scratch }under a small limit: exit $rc, no least limit with --fuse-optimizer: $(cat err)"
    if [ -n "$scratch" ]; then
        check 'grep -q "the --scratch given pages activations and frozen weights only" err' \
            "--scratch given: the refusal does not say why it cannot help: $(cat err)"
    fi
done
run "$R" train $P --memory-limit "${least}MiB" --scratch "$S" --fuse-optimizer --grad-clip 0 --report lim.json
check '[ $rc -eq 0 ] && grep -q "\"paged_moments\": [1-9]" lim.json' \
    "the least limit named (${least}MiB) with --fuse-optimizer --grad-clip 0 and --scratch: exit $rc: $(cat err)"
# a frozen base (LoRA) pages unfused: both least limits are named
L="--model llama --layers 2 --dim 128 --heads 4 --context 64 --batch 4 --threads 1 --quiet --steps 2 --lora 2"
F=$(floor $L)
run "$R" train $L --memory-limit "$(above "$F" 1.5)" --scratch "$S"
check '[ $rc -eq 1 ] && grep -q "with --scratch DIR (paging the training state to a disk) it is .*--grad-clip 0, and with them it is" err' \
    "LoRA unfused with --scratch: exit $rc: $(cat err)"
# 5. the probe's median and spread in the report; the checkpoint file's bandwidth on --resume
run "$R" train $P --scratch "$S" --page activations --save bw.st --report bw1.json
check '[ $rc -eq 0 ] && grep -q "\"scratch_bandwidth_source\": \"measured\"" bw1.json &&
       [ "$(field bw1.json scratch_probe_rounds)" -ge 3 ] &&
       awk -v lo="$(field bw1.json scratch_write_bps_min)" -v m="$(field bw1.json scratch_write_bps)" -v hi="$(field bw1.json scratch_write_bps_max)" "BEGIN { exit !(lo > 0 && lo <= m && m <= hi) }"' \
    "the probe's rounds in the report: exit $rc: $(cat err) $(grep scratch bw1.json)"
w=$(field bw1.json scratch_write_bps); r=$(field bw1.json scratch_read_bps)
check '"$R" inspect bw.st | grep -q "scratch_write_bps = $w" && "$R" inspect bw.st | grep -q "scratch_read_bps = $r"' \
    "the checkpoint file lacks the bandwidth the plan used ($w, $r)"
run "$R" train --resume bw.st --steps 3 --threads 1 --scratch "$S" --page activations --report bw2.json
check '[ $rc -eq 0 ] && grep -q "\"scratch_bandwidth_source\": \"resumed\"" bw2.json &&
       [ "$(field bw2.json scratch_write_bps)" = "$w" ] && [ "$(field bw2.json scratch_read_bps)" = "$r" ] &&
       grep -q "plans the paging with the scratch bandwidth the run planned with before" err' \
    "--resume did not plan with the file's bandwidth: exit $rc: $(cat err) $(grep scratch bw2.json)"
run "$R" train --resume bw.st --steps 3 --threads 1 --quiet --scratch "$S" --page activations --scratch-bandwidth 2GB/s --report bw3.json
check '[ $rc -eq 0 ] && grep -q "\"scratch_bandwidth_source\": \"given\"" bw3.json && [ "$(field bw3.json scratch_read_bps)" = 2000000000 ]' \
    "--resume with --scratch-bandwidth 2GB/s: exit $rc: $(cat err) $(grep scratch bw3.json)"
run "$R" train --resume bw.st --steps 3 --threads 1 --quiet --scratch "$S" --page activations --scratch-bandwidth measure --report bw4.json
check '[ $rc -eq 0 ] && grep -q "\"scratch_bandwidth_source\": \"measured\"" bw4.json' \
    "--resume with --scratch-bandwidth measure: exit $rc: $(cat err) $(grep scratch bw4.json)"
run "$R" train ${P% --quiet} --scratch "$S"
check '[ $rc -eq 0 ] && grep -q "note: --scratch pages what a --memory-limit or --memory-budget needs" err' \
    "--scratch with nothing to page is not said: exit $rc: $(cat err)"
check '[ -z "$(ls -A "$S")" ]' "files left in the scratch folder: $(ls -A "$S")"

echo "test_harden3.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
