#!/bin/sh
# test_cli.sh: the remat command end to end: training under every recompute
# strategy saves bit-identical weights (same SHA-256, dropout on), reports
# carry the memory figures, and bad usage gives the documented exit codes.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"
weights_sha() { sha256sum "$1" | cut -d' ' -f1; }

GPT="--layers 3 --dim 32 --heads 4 --context 16 --batch 4 --steps 6 --dropout 0.1 --seed 5 --quiet"
for s in none blocks segments:3 sqrt selective revolve:2; do
    "$R" train $GPT --checkpoint $s --verify-recompute --save "$T/gpt_$s.safetensors" --report "$T/gpt_$s.json" \
        || bad "gpt train --checkpoint $s exited $?"
done
base=$(weights_sha "$T/gpt_none.safetensors")
for s in blocks segments:3 sqrt selective revolve:2; do
    check '[ "$(weights_sha "$T/gpt_$s.safetensors")" = "$base" ]' "gpt weights under $s differ from none"
done
planned() { sed -n "s/.*\"activation_bytes_planned\": \([0-9]*\).*/\1/p" "$1"; }
measured() { sed -n "s/.*\"activation_bytes_measured\": \([0-9]*\).*/\1/p" "$1"; }
for s in none blocks selective revolve:2; do
    check '[ "$(planned "$T/gpt_$s.json")" = "$(measured "$T/gpt_$s.json")" ]' "gpt $s: measured != planned"
done
check '[ "$(planned "$T/gpt_none.json")" -gt "$(planned "$T/gpt_blocks.json")" ]' "none > blocks"
check '[ "$(planned "$T/gpt_none.json")" -gt "$(planned "$T/gpt_selective.json")" ]' "none > selective"
check '[ "$(planned "$T/gpt_blocks.json")" -gt "$(planned "$T/gpt_revolve:2.json")" ]' "blocks > revolve:2"
check 'grep -q "\"recompute_flops\"" "$T/gpt_blocks.json"' "report has recompute_flops"
check 'grep -q "\"predicted_overhead\"" "$T/gpt_blocks.json"' "report has predicted_overhead"

MLP="--model mlp --widths 32,48,32,48 --context 8 --batch 8 --steps 6 --dropout 0.1 --batchnorm --seed 3 --quiet"
for s in none blocks segments:2 revolve:2; do
    "$R" train $MLP --checkpoint $s --save "$T/mlp_$s.safetensors" || bad "mlp train --checkpoint $s exited $?"
done
base=$(weights_sha "$T/mlp_none.safetensors")
for s in blocks segments:2 revolve:2; do
    check '[ "$(weights_sha "$T/mlp_$s.safetensors")" = "$base" ]' "mlp+batchnorm weights/running stats under $s differ"
done

# --print-plan lists kept and recomputed values
"$R" train ${GPT% --steps 6 *} --dropout 0.1 --seed 5 --quiet --steps 1 --checkpoint blocks --print-plan > "$T/plan.txt" 2>&1
check 'grep -q "recompute  h.0" "$T/plan.txt"' "--print-plan lists recomputed values"
check 'grep -q "keep " "$T/plan.txt"' "--print-plan lists kept values"

# usage errors exit 2 with one line; runtime errors exit 1
"$R" train --checkpoint bogus --steps 1 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "unknown recompute strategy" "$T/err" && [ $(wc -l < "$T/err") -eq 1 ]' "bad strategy: exit $rc, $(cat "$T/err")"
"$R" train --layers x 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ]' "bad number: exit $rc"
"$R" train --frobnicate 1 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "unknown flag" "$T/err"' "unknown flag: exit $rc"
for bad in "--adam-betas 0.9" "--adam-betas 1,0.95" "--adam-betas 0.9,x" "--adam-eps 0" "--adam-eps nan"; do
    "$R" train $bad --steps 1 2> "$T/err"; rc=$?
    check '[ $rc -eq 2 ] && grep -q -- "${bad%% *} expects" "$T/err" && [ $(wc -l < "$T/err") -eq 1 ]' "$bad: exit $rc, $(cat "$T/err")"
done
"$R" train --dim 30 --heads 4 --steps 1 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "not a multiple of --heads 4" "$T/err"' "dim/heads: exit $rc"
"$R" train --data "$T/nope.txt" --steps 1 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "nope.txt" "$T/err"' "missing data file: exit $rc $(cat "$T/err")"
"$R" train --init "$T/nope.safetensors" --steps 1 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "nope.safetensors" "$T/err"' "missing init file: exit $rc $(cat "$T/err")"
"$R" sample 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q -- "--load" "$T/err"' "sample without --load: exit $rc"
"$R" bogus 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ]' "unknown command: exit $rc"

# every subcommand's --help prints its flags on stdout and exits 0
for c in train sample plan inspect; do
    "$R" $c --help > "$T/help" 2> "$T/err"; rc=$?
    check '[ $rc -eq 0 ] && [ ! -s "$T/err" ] && grep -q "usage: remat $c" "$T/help"' "$c --help: exit $rc $(cat "$T/err")"
done
"$R" train --help | grep -q -- "--memory-budget" || bad "train --help lists --memory-budget"
"$R" sample -h | grep -q -- "--temperature" || bad "sample -h lists --temperature"
"$R" plan --help | grep -q "bwd_tmp" || bad "plan --help explains Rotor's bwd_tmp"
# an unknown flag says so, even as the last argument (not "needs a value")
for c in train sample plan; do
    "$R" $c --bogus 2> "$T/err"; rc=$?
    check '[ $rc -eq 2 ] && grep -q "unknown flag '"'"'--bogus'"'"'" "$T/err" && [ $(wc -l < "$T/err") -eq 1 ]' "$c --bogus: exit $rc $(cat "$T/err")"
done
"$R" --version | grep -q "^remat [0-9]" || bad "--version"

# a text file trains; sampling from the saved model works
printf 'hello world, hello remat. ' > "$T/a.txt"
for i in 1 2 3 4 5 6; do cat "$T/a.txt" "$T/a.txt" > "$T/b.txt"; mv "$T/b.txt" "$T/a.txt"; done
"$R" train --data "$T/a.txt" --layers 1 --dim 32 --heads 2 --context 16 --batch 4 --steps 5 --quiet --save "$T/m.safetensors"
check '[ $? -eq 0 ]' "train on a text file"
"$R" sample --load "$T/m.safetensors" --prompt "hel" --tokens 10 --seed 1 > "$T/s.txt"; rc=$?
check '[ $rc -eq 0 ] && grep -q "^hel" "$T/s.txt"' "sample: exit $rc"

# flags of a training run are usage errors for plan and sample, not ignored
for c in "plan --layers 1 --dim 32 --heads 2 --context 16 --memory-limit 1GiB" \
         "plan --layers 1 --dim 32 --heads 2 --context 16 --fuse-optimizer" \
         "sample --load $T/m.safetensors --memory-limit 1GiB" "sample --load $T/m.safetensors --resume x"; do
    # shellcheck disable=SC2086
    "$R" $c > "$T/out" 2> "$T/err"; rc=$?
    check '[ $rc -eq 2 ] && grep -q "applies to remat train" "$T/err" && [ $(wc -l < "$T/err") -eq 1 ]' "$c: exit $rc $(cat "$T/err")"
done

echo "test_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
