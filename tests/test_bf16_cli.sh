#!/bin/sh
# test_bf16.sh: remat's command line with --precision bf16 (issue 29):
#  - 500 steps on the built-in corpus (make run's), bf16 against fp32: the
#    validation loss within 1% (a small GPT, so the check costs ~20 s);
#  - the precision is recorded in the checkpoint file and a resumed run
#    keeps it (another --precision is refused, exit 2); a bad value too;
#  - plan --precision bf16 predicts the activation bytes train plans and
#    measures under the same budget; eval and bench take the flag.
. "$(dirname "$0")/lib.sh"
R=${BUILD:-build}/remat
M="--layers 2 --dim 64 --heads 4 --context 32 --batch 8 --threads 1"

# 1. 500 steps, fp32 and bf16: validation loss within 1% (100 in the
# sanitized build, which checks memory, not convergence, 3x slower)
N=500
if nm "$R" 2>/dev/null | grep -q __asan_init; then N=100; fi
for p in fp32 bf16; do
    $R train $M --steps $N --lr 3e-3 --warmup 50 --lr-schedule cosine --precision $p --report "$T/$p.json" --quiet \
        >"$T/$p.out" 2>&1 || bad "train --precision $p: $(tail -2 "$T/$p.out")"
done
v32=$(field "$T/fp32.json" val_loss); v16=$(field "$T/bf16.json" val_loss)
echo "$N steps on the corpus: validation loss fp32 $v32, bf16 $v16"
check "awk -v a='$v32' -v b='$v16' 'BEGIN { d = (b - a) / a; if (d < 0) d = -d; exit !(a > 0 && d <= 0.01) }'" \
    "bf16's validation loss $v16 is not within 1% of fp32's $v32"
check "grep -q '\"precision\": \"bf16\"' '$T/bf16.json'" "the report names the precision"

# 2. the flag's value, and the precision a checkpoint file records
$R train $M --steps 1 --precision fp16 >"$T/bad.out" 2>&1
check "[ $? -eq 2 ] && grep -q \"unknown precision 'fp16' (try fp32 or bf16)\" '$T/bad.out'" \
    "--precision fp16: exit 2 naming the choices ($(cat "$T/bad.out"))"
$R train $M --steps 2 --precision bf16 --save "$T/m.safetensors" --quiet >/dev/null 2>&1 || bad "train --save"
$R train --resume "$T/m.safetensors" --steps 3 --precision fp32 --quiet >"$T/mismatch.out" 2>&1
check "[ $? -eq 2 ] && grep -q 'was saved with --precision bf16' '$T/mismatch.out'" \
    "resuming a bf16 run in fp32 is refused: $(cat "$T/mismatch.out")"
$R train --resume "$T/m.safetensors" --steps 3 --report "$T/resumed.json" --quiet >"$T/resume.out" 2>&1
check "[ $? -eq 0 ] && grep -q '\"precision\": \"bf16\"' '$T/resumed.json'" \
    "a resumed run keeps the file's bf16: $(cat "$T/resume.out")"

# 3. plan predicts what train plans and measures, at 75% of store-all (the
# products' scratch, planned with each bf16 node, puts this small model's least
# budget near 70%)
B="--memory-budget 75% --precision bf16"
$R plan $M $B >"$T/plan.out" 2>&1 || bad "plan $B: $(tail -2 "$T/plan.out")"
planned=$(sed -n 's/^plan: .*activations \([0-9.]*\) MiB planned (arena \([0-9.]*\) MiB).*/\1 \2/p' "$T/plan.out")
$R train $M $B --steps 2 --report "$T/budget.json" --quiet >/dev/null 2>&1 || bad "train $B"
tp=$(field "$T/budget.json" activation_bytes_planned); tm=$(field "$T/budget.json" activation_bytes_measured)
ta=$(field "$T/budget.json" activation_arena_bytes)
check "[ -n '$planned' ] && [ \"\$(awk -v b='$tp' -v a='$ta' 'BEGIN { printf \"%.2f %.2f\", b / 1048576, a / 1048576 }')\" = '$planned' ] && [ '$tm' -le '$tp' ]" \
    "plan $B predicts $planned MiB (planned, arena); train planned $tp bytes (arena $ta) and measured $tm"
check "grep -q 'precision bf16: products take bf16 inputs' '$T/plan.out'" "plan says the precision"

# 4. eval and bench take it
$R eval --load "$T/m.safetensors" --data README.md --precision bf16 --max-batches 2 --quiet >"$T/eval.out" 2>&1
check "[ $? -eq 0 ] && grep -q 'loss' '$T/eval.out'" "eval --precision bf16: $(cat "$T/eval.out")"
$R bench $M --steps 1 --rounds 1 --budgets 2 --strategies none --precision bf16 --csv "$T/b.csv" >"$T/bench.out" 2>&1
check "[ $? -eq 0 ] && grep -q 'B8 bf16,none' '$T/b.csv'" "bench --precision bf16: $(tail -3 "$T/bench.out")"

echo "test_bf16_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
