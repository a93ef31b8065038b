#!/bin/sh
# test_budget.sh: --memory-budget end to end: the measured activation
# high-water mark stays at or under the budget, weights stay bit-identical to
# store-all, impossible budgets fail before training with the minimum, and
# `remat plan` answers for models and for chains from other frameworks.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"

GPT="--layers 4 --dim 32 --heads 4 --context 16 --batch 4 --steps 5 --dropout 0.1 --seed 9 --quiet"
MLP="--model mlp --widths 64,128,32,256,64,128 --context 16 --batch 8 --steps 5 --dropout 0.1 --batchnorm --seed 4 --quiet"
for model in GPT MLP; do
    eval flags=\$$model
    "$R" train $flags --save "$T/none.safetensors" --report "$T/none.json" || fail=$((fail + 1))
    store_all=$(field "$T/none.json" activation_arena_bytes)
    for pct in 90 60 45; do
        budget=$((store_all * pct / 100))
        "$R" train $flags --memory-budget $budget --save "$T/b.safetensors" --report "$T/b.json" 2> "$T/err"
        rc=$?
        if grep -q "minimum feasible" "$T/err"; then
            check '[ $rc -eq 1 ]' "$model $pct%: an infeasible budget exits 1"
            continue
        fi
        check '[ $rc -eq 0 ]' "$model $pct%: exit $rc $(cat "$T/err")"
        m=$(field "$T/b.json" activation_bytes_measured); a=$(field "$T/b.json" activation_arena_bytes)
        check '[ "$m" -le "$budget" ] && [ "$a" -le "$budget" ]' "$model $pct%: measured $m / arena $a over budget $budget"
        check 'cmp -s "$T/b.safetensors" "$T/none.safetensors"' "$model $pct%: weights differ from store-all"
    done
done

# percent form, and a budget below the minimum fails before training, naming the minimum
"$R" train $GPT --memory-budget 50% --report "$T/p.json" 2> "$T/err"
check '[ $? -eq 0 ]' "--memory-budget 50% works: $(cat "$T/err")"
"$R" train $GPT --memory-budget 1KiB 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "minimum feasible" "$T/err" && [ $(wc -l < "$T/err") -eq 1 ]' "1KiB budget: exit $rc: $(cat "$T/err")"
"$R" train $GPT --memory-budget lots 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "not a size" "$T/err"' "bad budget string: exit $rc: $(cat "$T/err")"

# remat plan on a model: a schedule and the sweep table
"$R" plan $GPT --memory-budget 50% > "$T/plan.txt"
check '[ $? -eq 0 ] && grep -q "minimum feasible" "$T/plan.txt"' "plan on a model"
"$R" plan $GPT --sweep --csv "$T/sweep.csv"
check '[ $(wc -l < "$T/sweep.csv") -ge 5 ] && head -1 "$T/sweep.csv" | grep -q budget_bytes' "plan --sweep --csv"

# remat plan --chain: the published homogeneous example
stage='{"uf":1,"ub":2,"a":1,"ab":2}'
printf '{"stages": [%s,%s,%s,%s,%s,%s,{"uf":0,"ub":0,"a":1,"ab":0}]}' $stage $stage $stage $stage $stage $stage > "$T/chain.json"
for pair in 5:33 6:26 7:23 9:21 14:18; do
    b=${pair%:*}; want=${pair#*:}
    out=$("$R" plan --chain "$T/chain.json" --memory-budget $b --json)
    check 'echo "$out" | grep -q "\"feasible\":true,\"time\":$want,"' "chain budget $b: want time $want, got $out"
done
out=$("$R" plan --chain "$T/chain.json" --memory-budget 3 --json); rc=$?
check '[ $rc -eq 1 ] && echo "$out" | grep -q "\"feasible\":false" && echo "$out" | grep -q "\"min_budget_bytes\":5"' "infeasible chain: exit $rc $out"
echo '{"stages": [{"uf": 1}]}' > "$T/bad.json"
"$R" plan --chain "$T/bad.json" --memory-budget 10 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "stage 0" "$T/err"' "malformed chain: exit $rc $(cat "$T/err")"

echo "test_budget: $pass passed, $fail failed"
[ $fail -eq 0 ]
