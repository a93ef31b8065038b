#!/bin/sh
# test_paging.sh: remat train --scratch DIR (issue 20) end to end:
#  - forced paging (--page all) trains the same file bit for bit as no paging;
#  - a DIR on tmpfs is refused (exit 2), as is --page without --scratch;
#  - kill -9 mid-run leaves nothing in DIR (the file is anonymous);
#  - a full scratch disk (injected ENOSPC; and a real one, a small loop-mounted
#    file system, where the test may mount one): exit 1 naming DIR and the
#    bytes, the last --save file untouched and loadable, nothing left in DIR;
#  - SIGINT saves the paged state (exit 130), and resuming it, paged or not,
#    gives the file of a run that never stopped;
#  - the report and the end-of-run summary give what was paged, --trace puts
#    the transfers on their own track; remat plan (--print-plan, --sweep) and
#    remat bench show paging and paged points;
#  - peak RSS stays under --memory-limit on a
#    model whose training state is larger than the limit (not under ASan);
#  - LoRA under a limit only --scratch meets: frozen base weights paged, the
#    adapters the same bytes as an unconstrained run's.
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
# the state a file holds: a paged run's file also records the scratch
# bandwidth its plan assumed (metadata scratch_*_bps, issue 28), which a run
# that pages nothing does not have
ST_STATE=$(cd "$(dirname "$0")" && pwd)/st_state.py
sha() { python3 "$ST_STATE" "$1"; }
meta() { "$R" inspect "$1" | sed -n "s/^  $2 = //p"; }
json() { sed -n "s/.*\"$2\": \([^,]*\),*/\1/p" "$1"; }

# the scratch folder: on the repository's disk (/tmp may be tmpfs)
S=$(mktemp -d "$(cd "$BUILD" && pwd)/paging_sh.XXXXXX")
trap 'rm -rf "$T" "$S"' EXIT
empty() { [ -z "$(ls -A "$1")" ]; }

GPT="--layers 2 --dim 32 --heads 4 --context 16 --batch 4 --dropout 0.1 --seed 7 --threads 1 --quiet"
FUSED="--fuse-optimizer --grad-clip 0"
BW="--scratch-bandwidth 1GB/s" # no probe: faster (the first paged run measures it)

# forced paging: the same file, bit for bit
"$R" train $GPT $FUSED --steps 6 --save "$T/plain.st" || bad "plain run exited $?"
"$R" train $GPT $FUSED --steps 6 --save "$T/paged.st" --scratch "$S" --page all --report "$T/paged.json" \
    || bad "paged run exited $?"
check '[ "$(sha "$T/plain.st")" = "$(sha "$T/paged.st")" ]' "--page all: the file differs from no paging"
check 'empty "$S"' "files left in the scratch folder: $(ls -A "$S")"
# the I/O thread instead of io_uring (REMAT_NO_URING): the same file
REMAT_NO_URING=1 "$R" train $GPT $FUSED --steps 6 --save "$T/paged_thread.st" --scratch "$S" --page all ||
    bad "paged run on the I/O thread exited $?"
check '[ "$(sha "$T/plain.st")" = "$(sha "$T/paged_thread.st")" ]' "--page all on the I/O thread: the file differs"
check '[ "$(json "$T/paged.json" paged_out_bytes)" -gt 0 ] && [ "$(json "$T/paged.json" paged_in_bytes)" -gt 0 ]' \
    "report: paged bytes $(json "$T/paged.json" paged_out_bytes)"
check 'grep -q "\"io_ms\"" "$T/paged.json" && grep -q "\"io_overlap\"" "$T/paged.json"' "report: io figures"
# --trace: the transfers on their own track (tid 2), the waits on the step's
"$R" train $GPT $FUSED --steps 3 --scratch "$S" $BW --page all --trace "$T/paged_trace.json" || bad "traced run exited $?"
check 'grep -q "\"tid\":2,\"name\":\"thread_name\",\"args\":{\"name\":\"scratch I/O\"}" "$T/paged_trace.json" &&
       grep -q "\"cat\":\"page-out\"" "$T/paged_trace.json" && grep -q "\"cat\":\"page-in\"" "$T/paged_trace.json"' \
    "trace: no I/O track"

# the end-of-run summary says what was paged
"$R" train ${GPT% --quiet} $FUSED --steps 2 --scratch "$S" $BW --page all >"$T/out" 2>&1 || bad "summary run exited $?"
check 'grep -q "^paging: [0-9]* activations, moments of [0-9]* and [0-9]* parameters in the scratch file .* MiB out and .* MiB in a step, I/O .* ms a step, waited .* overlapped compute" "$T/out"' \
    "summary: no paging line in $(cat "$T/out")"

# remat plan shows paging: paged values per stage, the file's line; the
# sweep gives every budget twice, recomputing only and with paging, and at
# the least budget paging beats recomputing (a disk said to be fast: plans
# only); remat bench runs
# the budget sweep again with paging ('+page' points)
P="--layers 4 --dim 128 --heads 4 --context 64 --batch 4 --threads 1"
"$R" plan $P --memory-budget 3.1MiB --scratch "$S" --scratch-bandwidth 100GB/s --print-plan >"$T/plan" 2>&1 ||
    bad "plan with --scratch exited $?"
check 'grep -q "^    page  " "$T/plan" && grep -q "^paging to .* a step moves .* MiB out and .* MiB in, predicted to wait" "$T/plan"' \
    "plan --print-plan: no paging in $(cat "$T/plan")"
"$R" plan $P --scratch "$S" --scratch-bandwidth 100GB/s --sweep >"$T/sweep" 2>&1 || bad "plan --sweep with --scratch exited $?"
check 'head -1 "$T/sweep" | grep -q ",paging,paged_out_bytes,paged_in_bytes,predicted_io_wait_ms$" &&
       [ "$(grep -c ",0,[0-9]*,[0-9]*,[0-9.]*$" "$T/sweep")" = "$(grep -c ",1,[0-9]*,[0-9]*,[0-9.]*$" "$T/sweep")" ] &&
       awk -F, "NR == 2 { a = \$4 } NR == 3 { b = \$4; p = \$6 } END { exit !(\$5 != \"\" && b < a && p > 0) }" "$T/sweep"' \
    "plan --sweep with --scratch: no paged points, or paging not cheaper at the least budget: $(head -3 "$T/sweep")"
"$R" bench $P --steps 1 --rounds 1 --strategies none --budgets 2 --scratch "$S" $BW >"$T/bench" 2>/dev/null ||
    bad "bench --scratch exited $?"
check '[ "$(grep -c "^budget [0-9]*% +page " "$T/bench")" -eq 2 ]' "bench --scratch: no paged points in $(cat "$T/bench")"
# bench's children run in a temporary folder: a relative --scratch is made absolute
(cd "$(dirname "$S")" && "$R" bench $P --steps 1 --rounds 1 --strategies none --budgets 1 --scratch "$(basename "$S")" \
    $BW >"$T/bench_rel" 2>/dev/null) || bad "bench with a relative --scratch exited $?"
check '[ "$(grep -c "^budget [0-9]*% +page " "$T/bench_rel")" -eq 1 ] && ! grep -q skipped "$T/bench_rel"' \
    "bench with a relative --scratch: $(cat "$T/bench_rel")"
rc=0; "$R" bench $P --steps 1 --budgets 1 $BW >/dev/null 2>"$T/bench_bw" || rc=$?
check '[ $rc -eq 2 ] && grep -q "add --scratch DIR" "$T/bench_bw"' "bench --scratch-bandwidth alone: $(cat "$T/bench_bw")"
rc=0; "$R" bench $P --steps 1 --budgets 1 --scratch "$S" --page all >/dev/null 2>"$T/bench_page" || rc=$?
check '[ $rc -eq 2 ] && grep -q "^remat: error: --page applies to remat train and plan, not remat bench" "$T/bench_page"' \
    "bench --page: $(cat "$T/bench_page")"
check 'empty "$S"' "files left after plan and bench: $(ls -A "$S")"

# the least --memory-budget with --scratch: the profiled re-plan pages more
# than the first plan (here 42 transfers against 36), and the scratch file's
# queue grows for them (it had slots for the first plan only: a write past
# its table, and with io_uring a wait that never ended); the same file as
# without --scratch (guarded by a timeout: a hang fails the test)
LB="--layers 6 --dim 256 --heads 4 --context 128 --batch 4 --dropout 0.1 --threads 1 --steps 2 --quiet"
"$R" plan $LB --sweep --csv "$T/lb.csv" >/dev/null 2>&1 || bad "plan --sweep exited $?"
least=$(sed -n 2p "$T/lb.csv" | cut -d, -f1)
"$R" train $LB --memory-budget "$least" --save "$T/lb_plain.st" || bad "least budget without --scratch exited $?"
timeout -s KILL 300 "$R" train $LB --memory-budget "$least" --scratch "$S" --scratch-bandwidth 1GB/s --save "$T/lb_paged.st" \
    --report "$T/lb.json"; rc=$?
check '[ $rc -eq 0 ] && [ "$(json "$T/lb.json" paged_values)" -gt 0 ]' "least budget with --scratch: exit $rc"
check '[ "$(sha "$T/lb_plain.st")" = "$(sha "$T/lb_paged.st")" ]' "least budget with --scratch: the file differs"

# refusals
if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ]; then
    "$R" train $GPT --steps 1 --scratch /dev/shm 2>"$T/err"; rc=$?
    check '[ $rc -eq 2 ] && grep -q "tmpfs" "$T/err"' "tmpfs: exit $rc, $(cat "$T/err")"
else
    echo "skipped: /dev/shm is not tmpfs here"
fi
"$R" train $GPT --steps 1 --page all 2>"$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "needs --scratch" "$T/err"' "--page without --scratch: exit $rc, $(cat "$T/err")"
"$R" train $GPT --steps 1 --scratch "$S" --page moments 2>"$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "fuse-optimizer" "$T/err"' "--page moments unfused: exit $rc, $(cat "$T/err")"

# kill -9 while paging: nothing left behind
"$R" train ${GPT% --quiet} $FUSED --steps 1000000 --scratch "$S" $BW --page all >"$T/out" 2>&1 &
pid=$!
i=0
while [ $i -lt 400 ] && ! grep -q "step" "$T/out" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
sleep 0.3
kill -KILL $pid; wait $pid 2>/dev/null
check 'empty "$S"' "kill -9 left files in the scratch folder: $(ls -A "$S")"

# a full disk while paging (injected): exit 1 naming the folder and the bytes;
# the last --save file is what the step before wrote
REMAT_SCRATCH_FAULT=enospc:400 "$R" train $GPT $FUSED --steps 40 --save "$T/full.st" --save-every 2 --scratch "$S" \
    $BW --page all 2>"$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "No space left on device" "$T/err" && grep -q "$S" "$T/err" && grep -q "paging needs" "$T/err"' \
    "ENOSPC: exit $rc, $(cat "$T/err")"
last=$(ls "$T"/full.step*.st 2>/dev/null | tail -1)
k=$([ -n "$last" ] && meta "$last" step)
check '[ -n "$k" ] && [ "$k" -ge 2 ] && [ "$k" -lt 40 ] && [ ! -e "$T/full.st" ]' "the last good file: '$last' step '$k'"
if [ -n "$k" ]; then
    check '[ "$(meta "$last" optimizer_updates)" = "$k" ]' "the last good file holds $k updates"
    "$R" train --resume "$last" --steps $((k + 2)) --threads 1 --quiet --save "$T/after.st" \
        || bad "resume after ENOSPC exited $?"
fi
check 'empty "$S"' "files left after ENOSPC: $(ls -A "$S")"

# a real full file system, where this test may make one (root, loop devices)
M="$T/mnt"
mkdir "$M"
if [ "$(id -u)" = 0 ] && truncate -s 4M "$T/fs.img" 2>/dev/null && mkfs.ext4 -q "$T/fs.img" 2>/dev/null &&
    mount -o loop "$T/fs.img" "$M" 2>/dev/null; then
    "$R" train --layers 2 --dim 64 --heads 4 --context 64 --batch 8 --threads 1 --quiet $FUSED --steps 2 \
        --scratch "$M" --page all 2>"$T/err"; rc=$?
    check '[ $rc -eq 1 ] && grep -q "No space left on device" "$T/err" && grep -q "$M" "$T/err" && grep -q "bytes" "$T/err"' \
        "a full loop-mounted file system: exit $rc, $(cat "$T/err")"
    check '[ -z "$(ls -A "$M" | grep -v lost+found)" ]' "files left on the full file system: $(ls -A "$M")"
    umount "$M"
else
    echo "skipped: a loop-mounted file system (needs root and loop devices); the injected ENOSPC above stands for it"
fi

# SIGINT: the paged state saved; resumed paged and unpaged, it continues exactly
"$R" train ${GPT% --quiet} $FUSED --steps 1000000 --eval-every 20 --scratch "$S" $BW --page all \
    --save "$T/int.st" >"$T/out" 2>"$T/err" &
pid=$!
i=0
while [ $i -lt 400 ] && ! grep -q "val loss" "$T/out" 2>/dev/null; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid; wait $pid; rc=$?
check '[ $rc -eq 130 ] && grep -q "SIGINT: stopped after step" "$T/err"' "SIGINT: exit $rc, $(cat "$T/err")"
check 'empty "$S"' "files left after SIGINT: $(ls -A "$S")"
k=$(meta "$T/int.st" step)
if [ -n "$k" ]; then
    "$R" train $GPT $FUSED --steps $((k + 3)) --save "$T/straight.st" || bad "straight run exited $?"
    "$R" train --resume "$T/int.st" --steps $((k + 3)) --threads 1 --quiet --save "$T/res_plain.st" ||
        bad "unpaged resume exited $?"
    "$R" train --resume "$T/int.st" --steps $((k + 3)) --threads 1 --quiet $FUSED --scratch "$S" \
        $BW --page all --save "$T/res_paged.st" || bad "paged resume exited $?"
    check '[ "$(sha "$T/res_plain.st")" = "$(sha "$T/straight.st")" ]' "SIGINT at $k, resumed without paging: differs"
    check '[ "$(sha "$T/res_paged.st")" = "$(sha "$T/straight.st")" ]' "SIGINT at $k, resumed paging: differs"
else
    bad "SIGINT: no step in the saved file"
fi

# A model whose training state (12.3 MiB of parameters, 24.7 MiB of AdamW
# moments) is larger than what a 40 MiB limit leaves the library: refused
# without --scratch, naming the least limit with and without it; trained
# under it with --scratch, peak RSS under the limit, the same file as an
# unconstrained run (RSS: not in the sanitizer build, whose shadow memory
# inflates it)
case "$BUILD" in *asan*) asan=1 ;; *) asan=0 ;; esac
SMALL="--layers 4 --dim 256 --heads 4 --context 32 --batch 4 --threads 1 --seed 3 --quiet $FUSED --steps 3"
"$R" train $SMALL --memory-limit 40MiB 2>"$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "the least --memory-limit that works is [0-9.]*MiB; with --scratch DIR (paging the training state to a disk) it is [0-9.]*MiB" "$T/err"' \
    "40 MiB without --scratch: exit $rc, $(cat "$T/err")"
if [ $asan -eq 0 ]; then
    "$R" train $SMALL --save "$T/small_plain.st" || bad "small plain run exited $?"
    "$R" train $SMALL --memory-limit 40MiB --scratch "$S" --save "$T/small_limit.st" --report "$T/small.json" ||
        bad "small run under 40 MiB exited $?"
    rss=$(json "$T/small.json" max_rss_bytes)
    check '[ -n "$rss" ] && [ "$rss" -le $((40 * 1048576)) ]' "peak RSS $rss over the 40 MiB limit"
    check '[ "$(json "$T/small.json" paged_moments)" -gt 0 ]' "nothing of the state paged under 40 MiB"
    check '[ "$(sha "$T/small_plain.st")" = "$(sha "$T/small_limit.st")" ]' "under 40 MiB with --scratch: the file differs"
    echo "peak RSS under a 40 MiB limit (training state 37 MiB): $((rss / 1024)) KiB"
else
    echo "skipped in the sanitizer build: the RSS check under a limit"
fi

# LoRA (its base weights frozen): a limit under the least without --scratch
# (53.5 MiB here) but over the least with it (46.4 MiB) is refused without,
# and with it pages frozen base weights (no fused optimizer needed: they
# are only read); the adapters, dropout on, are the same bytes as an
# unconstrained run's, and so is the whole file
LORA="--model llama --layers 4 --dim 384 --heads 6 --context 32 --batch 4 --dropout 0.1 --seed 5 --threads 1 --quiet
      --lora 8 --lora-dropout 0.1 --steps 3"
"$R" train $LORA --memory-limit 49MiB 2>"$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "with --scratch DIR (paging the training state to a disk) it is" "$T/err"' \
    "LoRA under 49 MiB without --scratch: exit $rc, $(cat "$T/err")"
"$R" train $LORA --save "$T/lora_plain.st" --save-adapters "$T/ad_plain" || bad "LoRA plain run exited $?"
"$R" train $LORA --memory-limit 49MiB --scratch "$S" --save "$T/lora_lim.st" --save-adapters "$T/ad_lim" \
    --report "$T/lora.json" || bad "LoRA run under 49 MiB with --scratch exited $?"
check '[ "$(json "$T/lora.json" paged_params)" -gt 0 ]' "LoRA under 49 MiB: no base weight paged"
check '[ "$(sha "$T/ad_plain/adapter_model.safetensors")" = "$(sha "$T/ad_lim/adapter_model.safetensors")" ]' \
    "LoRA under 49 MiB with --scratch: the adapters differ"
check '[ "$(sha "$T/lora_plain.st")" = "$(sha "$T/lora_lim.st")" ]' "LoRA under 49 MiB with --scratch: the file differs"
if [ $asan -eq 0 ]; then
    rss=$(json "$T/lora.json" max_rss_bytes)
    check '[ -n "$rss" ] && [ "$rss" -le $((49 * 1048576)) ]' "LoRA: peak RSS $rss over the 49 MiB limit"
fi
check 'empty "$S"' "files left after the LoRA runs: $(ls -A "$S")"

echo "test_paging.sh: $pass passed, $fail failed"
[ $fail -eq 0 ]
