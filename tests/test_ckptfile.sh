#!/bin/sh
# test_ckptfile.sh: checkpoint files (the training state on disk) end to end:
#  - exact resume: 2N steps in one go == N steps, save, --resume, N more,
#    with dropout on, under several recompute strategies and a memory
#    budget (another one on resuming), with evaluation
#    in between, for the GPT and the MLP with BatchNorm, AdamW and SGD; the
#    whole files are compared (SHA-256), so parameters, moments and
#    metadata are all identical;
#  - resuming under another strategy and thread count than the save;
#  - --save-every / --keep step files and their names; another run's never
#    replaced nor pruned;
#  - a writer killed (SIGKILL) between writing and renaming leaves the old
#    file loadable, and the next save removes its temp file;
#  - SIGINT / SIGTERM: exit 130 / 143, the state saved, resumable exactly;
#  - remat inspect and remat sample on a checkpoint file.
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
sha() { sha256sum "$1" | cut -d' ' -f1; }
meta() { "$R" inspect "$1" | sed -n "s/^  $2 = //p"; }
json() { sed -n "s/.*\"$2\": \([^,]*\),*/\1/p" "$1"; }

GPT="--layers 2 --dim 32 --heads 4 --context 16 --batch 4 --dropout 0.1 --seed 7 --threads 1 --quiet"
MLP="--model mlp --widths 24,32 --context 8 --batch 8 --dropout 0.1 --batchnorm --seed 3 --threads 1 --quiet"
# One thread: fast on a busy 2-core machine (no OpenMP threads waiting for
# each other), and a resumed run must be given it too (threads are a choice
# of the run, not stored in the file; see below).
RES="--threads 1 --quiet"

# exact_resume NAME "FLAGS" "RESUME FLAGS": 8 steps vs 4 + 4, evaluation every 3 steps
exact_resume() {
    name=$1; flags=$2; rflags=$3
    "$R" train $flags --steps 8 --save "$T/$name.full.st" || bad "$name: one-go run exited $?"
    "$R" train $flags --steps 4 --eval-every 3 --save "$T/$name.half.st" || bad "$name: first half exited $?"
    "$R" train --resume "$T/$name.half.st" --steps 8 --eval-every 3 $RES $rflags --save "$T/$name.res.st" \
        || bad "$name: resume exited $?"
    check '[ "$(sha "$T/$name.full.st")" = "$(sha "$T/$name.res.st")" ]' "$name: resumed file differs from the one-go run"
}
exact_resume gpt_none "$GPT --checkpoint none" "--checkpoint none"
exact_resume gpt_blocks "$GPT --checkpoint blocks" "--checkpoint blocks"
exact_resume gpt_revolve "$GPT --checkpoint revolve:2" "--checkpoint revolve:2"
# a memory budget, and another one on resuming (it is not part of the state)
exact_resume gpt_budget "$GPT --memory-budget 50%" "--memory-budget 70%"
exact_resume gpt_sgd_seq "$GPT --optimizer sgd --sampler sequential --lr 0.05 --warmup 3" ""
exact_resume mlp_bn "$MLP --checkpoint none" "--checkpoint segments:2"
# AdamW's betas and eps come back from the file (the resume gives none)
exact_resume gpt_betas "$GPT --adam-betas 0.8,0.99 --adam-eps 1e-6" ""
check '[ "$(meta "$T/gpt_betas.half.st" beta1)" = 0.8 ] && [ "$(meta "$T/gpt_betas.half.st" beta2)" = 0.99 ] && [ "$(meta "$T/gpt_betas.half.st" eps)" = 1e-06 ]' \
    "--adam-betas/--adam-eps saved: $(meta "$T/gpt_betas.half.st" beta1) $(meta "$T/gpt_betas.half.st" beta2) $(meta "$T/gpt_betas.half.st" eps)"
check '[ "$(meta "$T/gpt_none.res.st" step)" = 8 ] && [ "$(meta "$T/gpt_none.half.st" step)" = 4 ]' "metadata step"
check '[ "$(meta "$T/gpt_none.half.st" optimizer_updates)" = 4 ]' "metadata optimizer_updates"

# Another strategy and thread count than the save. Same threads: bit-identical
# (the engine's kernels do not depend on the strategy). Other threads:
# OpenBLAS splits a GEMM's work by thread count, so bits may differ; the
# portable GEMM does not, so without BLAS the files must be identical.
"$R" train $GPT --steps 4 --threads 1 --checkpoint blocks --save "$T/x.half.st" || bad "x: save exited $?"
"$R" train --resume "$T/x.half.st" --steps 8 --threads 1 --checkpoint revolve:2 --quiet --save "$T/x.res1.st" \
    || bad "x: resume exited $?"
"$R" train $GPT --steps 8 --threads 1 --checkpoint none --save "$T/x.full1.st" --report "$T/x.full1.json"
check '[ "$(sha "$T/x.full1.st")" = "$(sha "$T/x.res1.st")" ]' "resume under revolve:2 after blocks differs"
"$R" train --resume "$T/x.half.st" --steps 8 --threads 2 --checkpoint sqrt --quiet --save "$T/x.res2.st" \
    --report "$T/x.res2.json" || bad "x: resume with 2 threads exited $?"
if [ "$(json "$T/x.full1.json" blas)" = false ]; then
    check '[ "$(sha "$T/x.full1.st")" = "$(sha "$T/x.res2.st")" ]' "portable GEMM: resume with 2 threads differs"
else
    l1=$(json "$T/x.full1.json" final_loss); l2=$(json "$T/x.res2.json" final_loss)
    check 'awk -v a="$l1" -v b="$l2" "BEGIN { d = a - b; exit !(d < 1e-4 && d > -1e-4) }"' \
        "resume with 2 threads: final loss $l2 far from $l1"
fi

# Step files: --save-every 2 --keep 2 over 7 steps keeps steps 4 and 6, and
# the final state at PATH; a step file resumes like any other.
mkdir "$T/steps"
"$R" train $GPT --steps 7 --save "$T/steps/m.safetensors" --save-every 2 --keep 2 || bad "save-every exited $?"
check '[ "$(cd "$T/steps" && ls | tr "\n" " ")" = "m.safetensors m.step000004.safetensors m.step000006.safetensors " ]' \
    "step files: $(ls "$T/steps" | tr '\n' ' ')"
check '[ "$(meta "$T/steps/m.step000006.safetensors" step)" = 6 ] && [ "$(meta "$T/steps/m.safetensors" step)" = 7 ]' \
    "step file metadata"
"$R" train --resume "$T/steps/m.step000004.safetensors" --steps 7 $RES --save "$T/steps/r.safetensors"
check '[ "$(sha "$T/steps/m.safetensors")" = "$(sha "$T/steps/r.safetensors")" ]' "resume from a step file"
"$R" train $GPT --steps 3 --save "$T/steps/noext" --save-every 1 || bad "no extension exited $?"
check '[ -f "$T/steps/noext.step000003" ] && [ -f "$T/steps/noext.step000001" ] && [ -f "$T/steps/noext" ]' \
    "a name without extension: $(ls "$T/steps" | tr '\n' ' ')"
"$R" train $GPT --steps 1 --save-every 2 2>"$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "need --save" "$T/err"' "--save-every without --save: exit $rc"
# Another run's step files are never replaced nor pruned: a new run at the same --save, or a
# resume from before the last of them, is refused before any work (a fresh run with --keep 2
# deleted the first run's step 2 file and its own newest ones, and kept the first run's 4 and
# 6 as "the newest"); a resume from the newest prunes that run's older ones.
before=$(cd "$T/steps" && ls | tr "\n" " ")
"$R" train $GPT --steps 3 --save "$T/steps/m.safetensors" --save-every 1 --keep 2 2>"$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "step file .*m.step000004.safetensors. of another run is there" "$T/err" &&
       [ "$(cd "$T/steps" && ls | tr "\n" " ")" = "$before" ]' "a new run over another's step files: exit $rc $(cat "$T/err")"
"$R" train --resume "$T/steps/m.step000004.safetensors" --steps 7 $RES --save "$T/steps/m.safetensors" \
    --save-every 1 2>"$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "m.step000006.safetensors. of another run is there (after step 4" "$T/err"' \
    "a resume from before another step file: exit $rc $(cat "$T/err")"
"$R" train --resume "$T/steps/m.step000006.safetensors" --steps 8 $RES --save "$T/steps/m.safetensors" \
    --save-every 1 --keep 2 || bad "a resume from the newest step file exited $?"
check '[ "$(cd "$T/steps" && ls m.* | tr "\n" " ")" = "m.safetensors m.step000007.safetensors m.step000008.safetensors " ]' \
    "a resume from the newest, --keep 2: $(ls "$T/steps" | tr '\n' ' ')"

# A writer killed between writing its temp file and renaming it: the old
# file stays whole, and the next save removes the stray temp file.
mkdir "$T/kill"
K="$T/kill/k.safetensors"
"$R" train $GPT --steps 2 --save "$K" || bad "kill: first save exited $?"
before=$(sha "$K")
REMAT_TEST_SLOW_SAVE_MS=20000 "$R" train --resume "$K" --steps 3 $RES --save "$K" &
pid=$!
i=0
while [ $i -lt 300 ] && ! ls -a "$T/kill" | grep -q '\.tmp\.'; do sleep 0.05; i=$((i + 1)); done
check 'ls -a "$T/kill" | grep -q "^\.k\.safetensors\.tmp\.$pid$"' "no temp file appeared while saving"
kill -KILL $pid; wait $pid 2>/dev/null
check '[ "$(sha "$K")" = "$before" ]' "the killed save changed the file"
"$R" inspect "$K" >/dev/null; rc=$?
check '[ $rc -eq 0 ] && [ "$(meta "$K" step)" = 2 ]' "the old file is not loadable after the kill: $rc"
"$R" train --resume "$K" --steps 3 $RES --save "$K" || bad "kill: resume after the kill exited $?"
check '[ "$(ls -a "$T/kill" | grep -c "\.tmp\.")" = 0 ]' "stray temp files: $(ls -a "$T/kill" | tr '\n' ' ')"
check '[ "$(meta "$K" step)" = 3 ]' "the save after the kill"

# SIGINT / SIGTERM: finish the step, save, exit 128+signal; then resuming to
# a few steps further gives the same file as a run that never stopped.
# (A background job of sh starts with SIGINT ignored; remat installs its own.)
mkdir "$T/sig"
signal_test() {
    sig=$1; want=$2; save=$3
    rm -f "$T/sig/"*
    # not --quiet: the wait below looks for the first "val loss" line
    (cd "$T/sig" && exec "$R" train ${GPT% --quiet} --steps 1000000 --eval-every 50 $save >"$T/sig/out" 2>"$T/sig/err") &
    pid=$!
    i=0
    while [ $i -lt 400 ] && ! grep -q "val loss" "$T/sig/out" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
    kill -"$sig" $pid; wait $pid; rc=$?
    f="$T/sig/${save#--save }"
    [ -n "$save" ] || f="$T/sig/remat-interrupted.safetensors"
    check '[ $rc -eq $want ]' "$sig: exit $rc, expected $want; $(cat "$T/sig/err")"
    check 'grep -q "$sig: stopped after step [0-9]* of 1000000; saved .*safetensors" "$T/sig/err" && [ $(wc -l < "$T/sig/err") -eq 1 ]' \
        "$sig message: $(cat "$T/sig/err")"
    k=$(meta "$f" step)
    check '[ -n "$k" ] && [ "$k" -ge 50 ]' "$sig: saved step '$k'"
    [ -n "$k" ] || return
    "$R" train --resume "$f" --steps $((k + 3)) $RES --save "$T/sig/resumed.st" || bad "$sig: resume exited $?"
    "$R" train $GPT --steps $((k + 3)) --save "$T/sig/straight.st" || bad "$sig: straight run exited $?"
    check '[ "$(sha "$T/sig/resumed.st")" = "$(sha "$T/sig/straight.st")" ]' "$sig: resumed at $k differs from a straight run"
}
signal_test INT 130 "--save s.safetensors"
signal_test TERM 143 ""

# inspect: tensors, metadata and checksum; sample works on a training-state file
"$R" inspect "$T/gpt_none.full.st" > "$T/insp"; rc=$?
check '[ $rc -eq 0 ] && grep -q "^checksum: ok (sha256:[0-9a-f]\{64\})$" "$T/insp"' "inspect: exit $rc"
check 'grep -Eq "^  transformer\.wte\.weight +F32 +\[256, 32\] +32768$" "$T/insp"' "inspect lists tensors"
check 'grep -Eq "^  optimizer\.v\.transformer\.ln_f\.bias +F32 +\[32\] +128$" "$T/insp"' "inspect lists moments"
check 'grep -q "^  dropout = 0.1$" "$T/insp" && grep -q "^  model = gpt$" "$T/insp"' "inspect lists metadata"
"$R" sample --load "$T/gpt_none.full.st" --prompt "ab" --tokens 8 --seed 1 > "$T/smp"; rc=$?
check '[ $rc -eq 0 ] && grep -q "^ab" "$T/smp"' "sample on a checkpoint file: exit $rc"
"$R" inspect 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "inspect takes one file" "$T/err"' "inspect without a file: exit $rc"

echo "test_ckptfile: $pass passed, $fail failed"
[ $fail -eq 0 ]
