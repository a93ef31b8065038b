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

# ---- class 18: a flag given twice with two values (the first was dropped silently) ----
run 2 "train --save twice" "$R" train $TINY --steps 1 --quiet --save a.st --save b.st
says "train --save twice" "given twice, 'a.st' then 'b.st'"
check '[ ! -e a.st ] && [ ! -e b.st ]' "train --save twice: wrote a file"
run 2 "train --lr twice (--lr=)" "$R" train $TINY --steps 1 --quiet --lr 0.1 --lr=0.2
run 0 "train --steps twice, one value" "$R" train $TINY --steps 1 --quiet --steps 1
run 2 "sample --tokens twice" "$R" sample --load plain.st --tokens 3 --tokens 4
run 2 "plan --csv twice" "$R" plan $TINY --sweep --csv a.csv --csv b.csv
run 2 "plan --chain twice" "$R" plan --chain a.json --chain b.json --memory-budget 10
run 2 "bench --rounds twice" "$R" bench $TINY --steps 1 --budgets 1 --rounds 1 --rounds 2 --strategies none
check '! grep -q "bench: 1/" "$T/err"' "bench --rounds twice: ran a point"
run 2 "export --out twice" "$R" export --load plain.st --merge-lora --out a.st --out b.st

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

echo "test_probe2: $pass passed, $fail failed"
[ $fail -eq 0 ]
