#!/bin/sh
# test_probe2.sh: issue 22's classes 3, 6, 12, 14, 17 and 18, more members
# than the issue's examples (its "hidden suite"): flags given twice, flags
# that would be ignored, JSON with a key twice or bytes after a NUL, lists,
# numbers and sizes under one rule. Each case failed on main at 6cb7aa7.
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
TO="timeout 120"
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1"
# run EXPECT_RC WHAT CMD...: the exit status, and one error line on stderr when it fails
run() {
    want=$1 what=$2; shift 2
    $TO "$@" >"$T/out" 2>"$T/err"; rc=$?
    check '[ $rc -eq "$want" ]' "$what: exit $rc, $want wanted: $(grep -v warning "$T/err" | head -c 300)"
    if [ "$want" -ne 0 ]; then
        check '[ "$(grep -c "^remat: error" "$T/err")" -eq 1 ]' "$what: not one error line: $(head -c 300 "$T/err")"
    fi
}
# says WHAT REGEX: the last run's stderr says it
says() { pat=$2; check 'grep -q -e "$pat" "$T/err"' "$1: '$2' not in: $(head -c 300 "$T/err")"; }

"$R" train $TINY --steps 1 --quiet --save plain.st >/dev/null 2>&1 || bad "setup: plain.st"
"$R" train $TINY --steps 1 --quiet --lora 2 --save lora.st >/dev/null 2>&1 || bad "setup: lora.st"

# ---- class 18: a flag given twice with two values: the last is used, and said (it was silent) ----
# warned WHAT CMD...: exit 0 and a warning naming both values
warned() {
    what=$1; shift
    run 0 "$what" "$@"
    says "$what" "warning: .* is given twice, '.*' then '.*': the last is used"
}
warned "train --save twice" "$R" train $TINY --steps 1 --quiet --save a.st --save b.st
says "train --save twice" "--save is given twice, 'a.st' then 'b.st'"
check '[ ! -e a.st ] && [ -s b.st ]' "train --save twice: not the last one written"
warned "train --lr twice (--lr=)" "$R" train $TINY --steps 1 --quiet --lr 0.1 --lr=0.2
run 0 "train --steps twice, one value" "$R" train $TINY --steps 1 --quiet --steps 1
check '! grep -q warning "$T/err"' "the same value twice: warned: $(cat "$T/err")"
warned "sample --tokens twice" "$R" sample --load plain.st --tokens 3 --tokens 4
check '[ "$(wc -c <"$T/out")" -le 5 ]' "sample --tokens 3 --tokens 4: not the last: $(wc -c <"$T/out") bytes"
warned "plan --csv twice" "$R" plan $TINY --sweep --csv a.csv --csv b.csv
check '[ ! -e a.csv ] && [ -s b.csv ]' "plan --csv twice: not the last one written"
warned "bench --rounds twice" "$R" bench $TINY --steps 1 --budgets 0 --rounds 2 --rounds 1 --strategies none
warned "export --out twice" "$R" export --load lora.st --merge-lora --out a.st --out m2.st
check '[ -s m2.st ]' "export --out twice: not the last one written"

# ---- class 18: flags that would be ignored are refused ----
run 2 "export --base-model without --adapters" "$R" export --load plain.st --merge-lora --out m.st --base-model x
check '[ ! -e m.st ]' "export --base-model without --adapters: wrote m.st"
run 2 "--resume of a file without LoRA, --lora-alpha" "$R" train --resume plain.st --steps 2 --quiet --lora-alpha 4
says "--resume --lora-alpha" "holds no LoRA adapters"
run 2 "--resume of a file without LoRA, --lora-targets" "$R" train --resume plain.st --steps 2 --quiet --lora-targets q_proj
run 2 "plan --sweep --checkpoint" "$R" plan $TINY --sweep --checkpoint sqrt
run 0 "plan --checkpoint plans that strategy" "$R" plan $TINY --checkpoint sqrt
check 'grep -q "^--checkpoint sqrt: activations" "$T/out"' "plan --checkpoint: $(tail -3 "$T/out")"
run 2 "train --eval-every with --val-fraction 0" "$R" train $TINY --steps 2 --quiet --eval-every 1 --val-fraction 0
run 2 "sample --top-k with --temperature 0" "$R" sample --load plain.st --top-k 3 --temperature 0
run 2 "sample --seed with --temperature 0" "$R" sample --load plain.st --seed 3 --temperature 0
run 2 "train --save-every past --steps" "$R" train $TINY --steps 2 --quiet --save se.st --save-every 3
check '[ ! -e se.st ]' "--save-every past --steps: trained before refusing"
run 2 "train --eval-every past --steps" "$R" train $TINY --steps 2 --quiet --eval-every 3
run 0 "train --save-every at --steps" "$R" train $TINY --steps 2 --quiet --save se.st --save-every 2
run 2 "train --optimizer sgd --adam-betas" "$R" train $TINY --steps 1 --quiet --optimizer sgd --adam-betas 0.8,0.9
run 2 "bench --optimizer sgd --adam-eps" "$R" bench $TINY --steps 1 --budgets 0 --rounds 1 --strategies none \
    --optimizer sgd --adam-eps 1e-6
check '! grep -q "bench: 1/" "$T/err"' "bench --optimizer sgd --adam-eps: ran a point"
"$R" train $TINY --steps 1 --quiet --optimizer sgd --save sgd.st >/dev/null 2>&1
run 2 "--resume of an SGD run with --adam-betas" "$R" train --resume sgd.st --steps 2 --quiet --adam-betas 0.8,0.9
for f in "sample --load" "train --init" "train --resume" "train --save" "export --merge-lora --out m.st --load"; do
    run 2 "$f ''" "$R" $f ""
    says "$f ''" "needs a file name, got ''"
done
run 0 "sample --seed with sampling" "$R" sample --load plain.st --seed 3 --tokens 2

# ---- class 18/17: JSON with a key twice, or bytes hidden after a NUL ----
printf '{"stages": [{"ub": 10, "ab": 10, "tf": 1, "tb": 1}], "stages": [{"ub": 1, "ab": 1, "tf": 1, "tb": 1}]}' >dup.json
run 1 "chain with 'stages' twice" "$R" plan --chain dup.json --memory-budget 100
says "chain with 'stages' twice" "'stages' appears twice"
printf '{"stages": [{"ub": 10, "ab": 10, "tf": 1, "tb": 1, "ab": 2}]}' >dup2.json
run 1 "chain stage with 'ab' twice" "$R" plan --chain dup2.json --memory-budget 100
run 1 "chain sweep with a key twice" "$R" plan --chain dup2.json --sweep
printf '{"nodes": [{"name": "a", "bytes": 4, "time": 1, "name": "b"}]}' >gdup.json
run 1 "graph node with 'name' twice" "$R" plan --graph gdup.json
printf '{"stages": [{"ub": 1, "ab": 1, "tf": 1, "tb": 1}]}\000junk' >nul.json
run 1 "chain with bytes after a NUL" "$R" plan --chain nul.json --memory-budget 100
says "chain NUL" "a NUL byte at byte 50 of 55"
printf '{"nodes": [{"name": "a", "bytes": 4, "time": 1}]}\000{' >gnul.json
run 1 "graph with bytes after a NUL" "$R" plan --graph gnul.json
run 2 "plan --chain --sweep --json" "$R" plan --chain dup.json --sweep --json
# a safetensors header naming one tensor twice: which bytes are 'a'?
h='{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}'
{ printf "\\$(printf %03o ${#h})\\000\\000\\000\\000\\000\\000\\000"; printf '%s' "$h"; printf '\000\000\000\000'; } >dup.st
run 1 "safetensors header with a tensor twice" "$R" inspect dup.st
says "safetensors dup" "header names 'a' twice"

# ---- class 3/6/14: one rule for numbers, sizes and list items: no white space, decimal, no empty item ----
M="--model mlp --context 8 --batch 2 --steps 1 --quiet --threads 1"
for w in " 8,8" "8,8 " "8 ,8" "8, 8" "8,8," ",8" "8,,8" "0x8,8"; do
    run 2 "--widths '$w'" "$R" train $M --widths "$w"
done
run 0 "--widths 8,8" "$R" train $M --widths 8,8
for v in " 1" "1 " "0x1" ""; do run 2 "--layers '$v'" "$R" train $TINY --steps 1 --quiet --layers "$v"; done
for v in " 0.1" "0.1 " "0x1" "inf" "nan"; do run 2 "--lr '$v'" "$R" train $TINY --steps 1 --quiet --lr "$v"; done
for v in "--dropout 0.95" "--val-fraction 0.9" "--adam-eps 1e-30" "--lr 100" "--grad-clip 1e9"; do
    run 0 "a range's end is in it: $v" "$R" train $TINY --steps 1 --quiet $v
done
for v in "--dropout 0.9500001" "--adam-eps 9.9e-31" "--lr 1e39" "--lr 1e999"; do
    run 2 "just past a range's end: $v" "$R" train $TINY --steps 1 --quiet $v
done
run 0 "--lr 1e-45 (below the smallest float: 'expects 0 to 100' before)" "$R" train $TINY --steps 1 --quiet --lr 1e-45
for b in " 0.9,0.95" "0.9 ,0.95" "0.9, 0.95" "0.9,0.95,"; do
    run 2 "--adam-betas '$b'" "$R" train $TINY --steps 1 --quiet --adam-betas "$b"
done
for f in "transformer.wte," ",transformer.wte" " transformer.wte" "transformer.wte, transformer.wpe" \
    "transformer.wte,,transformer.wpe"; do
    run 2 "--freeze '$f'" "$R" train $TINY --steps 1 --quiet --freeze "$f"
    run 2 "--train-only '$f'" "$R" train $TINY --steps 1 --quiet --train-only "$f"
done
run 0 "--freeze transformer.wte,transformer.wpe" "$R" train $TINY --steps 1 --quiet --freeze transformer.wte,transformer.wpe
for t in "c_attn," " c_attn" "c_attn, c_proj" ",c_attn"; do
    run 2 "--lora-targets '$t'" "$R" train $TINY --steps 1 --quiet --lora 2 --lora-targets "$t"
done
for c in "segments: 2" "segments:+2" "segments:2 " " sqrt"; do
    run 2 "--checkpoint '$c'" "$R" train $TINY --steps 1 --quiet --checkpoint "$c"
done
run 2 "bench --budgets ' 1'" "$R" bench $TINY --steps 1 --budgets " 1" --rounds 1 --strategies none
run 2 "bench --strategies 'none, sqrt'" "$R" bench $TINY --steps 1 --budgets 0 --rounds 1 --strategies "none, sqrt"
for b in " 5MiB" "5MiB " "" "1.5" "1.5B" "0x10MiB" "2EiB" "5mib"; do
    run 2 "--memory-budget '$b'" "$R" train $TINY --steps 1 --quiet --memory-budget "$b"
done
says "--memory-budget 5mib" "is not a size: use e.g. 64MiB"
for b in "1EiB" "5 MiB" "1TiB" "1e9"; do
    run 0 "--memory-budget '$b'" "$R" train $TINY --steps 1 --quiet --memory-budget "$b"
done
run 2 "--memory-limit ' 1GiB'" "$R" train $TINY --steps 1 --quiet --memory-limit " 1GiB"
printf '{"stages": [{"uf": 1, "ub": 1, "a": 10, "ab": 10}, {"uf": 1, "ub": 1, "a": 10, "ab": 10}]}' >c.json
run 0 "plan --chain --memory-budget 100" "$R" plan --chain c.json --memory-budget 100
for b in "" " 100" "100 " "0x64" "inf" "1e999"; do
    run 2 "plan --chain --memory-budget '$b'" "$R" plan --chain c.json --memory-budget "$b"
    run 2 "plan --graph --memory-budget '$b'" "$R" plan --graph gdup.json --memory-budget "$b"
done

# ---- class 12: sizes whose planning never ended are bounded, with the flag's name ----
run 2 "encdec --enc-layers 1025" "$R" plan --model encdec --enc-layers 1025 --dec-layers 1
says "encdec --enc-layers 1025" "--enc-layers is at most 1024"
run 2 "encdec --dec-layers 4096" "$R" train --model encdec --enc-layers 1 --dec-layers 4096 --steps 1 --quiet
run 2 "uvit --layers 1025 (was the library's 'rm_uvit_build:')" "$R" plan --model uvit --layers 1025
python3 -c 'import json; print(json.dumps({"stages": [{"uf": 1, "ub": 1, "a": 10, "ab": 10}] * 100000}))' >c100k.json 2>/dev/null &&
    { run 1 "a chain of 100000 stages" "$R" plan --chain c100k.json --memory-budget 1000
      says "100000 stages" "too many for the planner (10000 at most)"; }

# ---- class 17: the flags' words, not the library's function names ----
run 2 "--heads 3 --dim 16" "$R" train $TINY --steps 1 --quiet --heads 3 --dim 16
says "--heads 3 --dim 16" "^remat: error: --dim 16 is not a multiple of --heads 3.*--dim 15 or 18"
run 2 "uvit --heads 3" "$R" plan --model uvit --heads 3 --dim 16
check '! grep -q "rm_uvit_build" "$T/err"' "uvit --heads 3: a function name: $(cat "$T/err")"
run 2 "--lora on an mlp" "$R" train --model mlp --widths 8 --context 8 --steps 1 --quiet --lora 2
check '! grep -q "rm_run_build" "$T/err"' "--lora on an mlp: a function name: $(cat "$T/err")"
run 2 "--checkpoint segments (no count)" "$R" train $TINY --steps 1 --quiet --checkpoint segments
says "--checkpoint segments" "needs a count after a colon: segments:K"

echo "test_probe2: $pass passed, $fail failed"
[ $fail -eq 0 ]
