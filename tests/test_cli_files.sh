#!/bin/sh
# test_cli_files.sh: issue 22 through the remat command, the classes about
# files:
#  2. no output replaces another output or an input, compared by canonical
#     names whether or not the files exist, in every subcommand (exit 2,
#     nothing written);
#  9. no writer blocks on a FIFO or writes a device (rm_out), no reader
#     blocks (rm_read_file);
# 13. outputs are checked before the work (a folder, /dev/full, a name too
#     long for its temporary file, a missing or garbage --compare);
# 14. exit statuses: plan --sweep to /dev/full, bench with no point measured;
#  5. bench and signals: SIGINT/SIGTERM to bench stops its child, removes
#     its temporaries, writes the points measured so far and exits 130/143;
#     a child never writes the user's ./remat-interrupted.safetensors.
# Every command runs under `timeout`: a hang is a failure (exit 124).
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
TO="timeout 30"
cd "$T" || exit 1
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --steps 2 --threads 1 --quiet"
BT="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --steps 1 --budgets 1 --rounds 1 --strategies none"
awk 'BEGIN { for (i = 0; i < 200; i++) printf "line %d: some text to train on, %d\n", i, i * 7 % 13 }' > data.txt
cp data.txt data.orig
"$R" train $TINY --save init.st >/dev/null 2>&1 || bad "training the tiny model"
cp init.st init.orig
printf '{"stages":[{"uf":1,"ub":1,"a":100,"ab":100},{"uf":1,"ub":1,"a":100,"ab":100}]}' > chain.json
cp chain.json chain.orig
mkdir -p sub adir
mkfifo fifo
ln -s init.st link.st
# run CMD...: exit status in $rc, stdout in out, stderr in err
run() { $TO "$@" >out 2>err; rc=$?; }
# refused WANT WHAT: exit WANT, one error line, no work done (no step, no point)
refused() {
    want=$1 # check evals its first argument, where $1 is its own
    check '[ $rc -eq $want ] && [ $(grep -c "error: ." err) -eq 1 ]' "$2: exit $rc (want $want): $(head -c 400 err)"
    check '! grep -q "^step\|done:\|bench: 1/\|saved" out err' "$2: worked before refusing: $(head -c 200 out)"
}

# class 2: two files that are one, whether or not they exist (exit 2)
for args in "--save X --report X" "--save X --trace X" "--report X --trace ./X" "--save X --report sub/../X" \
    "--save $T/X --report X" "--report link.st --init init.st" "--save data.txt --data data.txt" \
    "--report ./data.txt --data data.txt" "--trace init.st --init init.st" "--save sub/../init.st --init init.st" \
    "--save m.st --save-every 1 --report m.step000002.st" "--save m.st --save-every 1 --data m.step000001.st" \
    "--report remat-interrupted.safetensors" "--data remat-interrupted.safetensors"; do
    rm -f X m.st
    # shellcheck disable=SC2086
    run "$R" train $TINY $args
    refused 2 "train $args"
    check '[ ! -e X ] && [ ! -e m.st ] && cmp -s data.txt data.orig && cmp -s init.st init.orig' "train $args wrote a file"
done
ln init.st hard.st
run "$R" train $TINY --init init.st --report hard.st
refused 2 "train --init init.st --report (a hard link to it)"
# --resume F --save F continues in place: allowed
cp init.st res.st
run "$R" train --resume res.st --save res.st --steps 3 --quiet --threads 1
check '[ $rc -eq 0 ]' "train --resume F --save F: exit $rc $(cat err)"
for args in "--chain chain.json --sweep --csv chain.json" "--chain chain.json --sweep --csv ./sub/../chain.json" \
    "--layers 1 --dim 16 --heads 2 --context 8 --sweep --csv Y --svg Y"; do
    # shellcheck disable=SC2086
    run "$R" plan $args
    refused 2 "plan $args"
    check 'cmp -s chain.json chain.orig && [ ! -e Y ]' "plan $args wrote a file"
done
for args in "--data data.txt --csv data.txt" "--data data.txt --svg sub/../data.txt" "--csv Z --svg Z" \
    "--compare init.st --svg init.st" "--init init.st --csv ./init.st"; do
    # shellcheck disable=SC2086
    run "$R" bench $BT $args
    refused 2 "bench $args"
    check 'cmp -s data.txt data.orig && cmp -s init.st init.orig && [ ! -e Z ]' "bench $args wrote a file"
done

# the fine-tuning outputs (--save-adapters DIR, export --out/--adapters):
# the same table, checked before the work
LORA="--model llama --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --quiet --lora 2"
"$R" train $LORA --steps 1 --save lora.st >/dev/null 2>&1 || bad "training a LoRA model"
cp lora.st lora.orig
echo x > afile
for args in "train $LORA --steps 1 --save-adapters ad --save ad/adapter_model.safetensors" \
    "train $LORA --steps 1 --save-adapters ad --report ad/adapter_config.json" \
    "export --load lora.st --merge-lora --out lora.st" "export --load lora.st --merge-lora --out ./lora.st" \
    "export --load lora.st --adapters ad --merge-lora --out ad/adapter_model.safetensors"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused 2 "$args"
    check 'cmp -s lora.st lora.orig && [ ! -e ad ]' "$args wrote a file"
done
for args in "train $LORA --steps 1000000 --save-adapters afile" "export --load lora.st --adapters afile" \
    "export --load lora.st --merge-lora --out fifo" "export --load fifo --merge-lora --out m.st"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused 1 "$args"
done
run "$R" export --load lora.st --lr 1 --merge-lora --out m.st
refused 2 "export --lr"

# classes 9 and 13: a FIFO, a device, a folder or a name too long as an
# output is refused before the work, and nothing blocks
long=$(awk 'BEGIN { for (i = 0; i < 249; i++) printf "a" }')
for out in fifo /dev/full adir "$long.csv"; do
    for args in "plan --layers 1 --dim 16 --heads 2 --context 8 --sweep --csv $out" \
        "plan --layers 1 --dim 16 --heads 2 --context 8 --sweep --svg $out" "plan --chain chain.json --sweep --csv $out" \
        "bench $BT --csv $out" "bench $BT --svg $out" "train $TINY --report $out" "train $TINY --trace $out" \
        "train $TINY --save $out"; do
        # shellcheck disable=SC2086
        run "$R" $args
        refused 1 "$(echo "$args" | cut -c1-60)... ($out)"
    done
done
check '[ -p fifo ] && [ -d adir ] && [ -z "$(ls adir)" ]' "a FIFO or a folder was replaced or written into"
# an input that is not there or not a regular file: refused before the first point
for d in fifo adir nope.txt /dev/zero; do
    run "$R" bench $BT --data $d
    refused 1 "bench --data $d"
done
run "$R" train $TINY --save m.st --save-every 1 --steps 100000 --save "$(awk 'BEGIN { for (i = 0; i < 240; i++) printf "b" }').st"
refused 1 "--save NAME whose step files' names are too long"
# --compare: missing, a FIFO, garbage, no usable row: refused before the first point
printf 'strategy,step_ms_median,peak_rss_bytes\nx,abc,1\ny,1e30,1e30\n' > norow.csv
printf 'hello\nworld\n' > garbage.csv
for c in nope.csv fifo garbage.csv norow.csv adir; do
    run "$R" bench $BT --svg c.svg --compare $c
    refused 1 "bench --compare $c"
done

# class 14: exit statuses
run "$R" plan --chain chain.json --sweep
check '[ $rc -eq 0 ]' "plan --chain --sweep to stdout: exit $rc"
$TO "$R" plan --chain chain.json --sweep >/dev/full 2>err; rc=$?
check '[ $rc -eq 1 ] && grep -q "stdout" err' "plan --chain --sweep >/dev/full: exit $rc $(cat err)"
$TO "$R" plan --layers 1 --dim 16 --heads 2 --context 8 --sweep >/dev/full 2>err; rc=$?
check '[ $rc -eq 1 ]' "plan --sweep >/dev/full: exit $rc $(cat err)"
run "$R" bench --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --steps 1 --budgets 0 --rounds 1 \
    --strategies none,sqrt --memory-limit 1MiB --csv never.csv
check '[ $rc -eq 1 ] && grep -q "no point was measured.*memory-limit" err && [ ! -e never.csv ]' \
    "bench with every point failing: exit $rc $(grep -v '^bench:' err)"
# a model no child could build is refused before the first point (test_probe.sh has more)
run "$R" bench --layers 1 --dim 30 --heads 4 --context 8 --batch 2 --threads 1 --steps 1 --budgets 0 --rounds 1 \
    --strategies none,sqrt --csv never.csv
check '[ $rc -eq 2 ] && grep -q "not a multiple of --heads" err && ! grep -q "bench: 1/" err && [ ! -e never.csv ]' \
    "bench of a model that does not build: exit $rc $(grep -v '^bench:' err)"

# class 5: a signal to bench stops its child, removes the temporaries,
# writes what was measured and exits 130/143; the user's interrupt file
# and working folder are never touched by a child
mkdir -p tmp work
echo precious > work/remat-interrupted.safetensors
SLOW="--layers 1 --dim 32 --heads 2 --context 16 --batch 2 --threads 1 --steps 400 --budgets 2 --rounds 3 --strategies none,sqrt"
for sig in INT TERM; do
    want=$([ $sig = INT ] && echo 130 || echo 143)
    rm -f work/b.csv work/progress.txt # (the wait below must not read the last run's)
    (cd work && TMPDIR="$T/tmp" exec $TO "$R" bench $SLOW --csv b.csv >table.txt 2>progress.txt) &
    pid=$!
    i=0; while [ $i -lt 300 ] && ! grep -q "bench: 2/" work/progress.txt 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    bench=$(pgrep -P $pid | head -1) # timeout's child (named "exe": remat runs itself again, waitpolicy.c)
    child=$(pgrep -P "$bench" | head -1)
    kill -$sig "$bench"
    kill -$sig "$bench" 2>/dev/null # twice, as timeout and a process group's kill deliver it: one request
    wait $pid; rc=$?
    check '[ $rc -eq $want ]' "SIGTERM/INT to bench: exit $rc, want $want: $(tail -2 work/progress.txt)"
    check '[ -z "$child" ] || ! kill -0 "$child" 2>/dev/null' "bench left its child $child running"
    check '[ -z "$(ls tmp)" ]' "bench left temporaries: $(ls tmp)"
    check '[ -f work/b.csv ] && [ $(wc -l < work/b.csv) -ge 3 ]' "SIG$sig: the CSV of the points measured: $(cat work/b.csv work/table.txt 2>&1; tail -3 work/progress.txt)"
    check 'grep -q "stopped after" work/progress.txt' "SIG$sig: no message: $(tail -2 work/progress.txt)"
done
# a signal to the child itself: it may save its state, but not among the user's files
rm -f work/b.csv work/progress.txt
(cd work && TMPDIR="$T/tmp" exec $TO "$R" bench $SLOW >table.txt 2>progress.txt) &
pid=$!
i=0; while [ $i -lt 300 ] && ! grep -q "bench: 1/" work/progress.txt 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
bench=$(pgrep -P $pid | head -1)
child=$(pgrep -P "$bench" | head -1)
[ -n "$child" ] && kill -INT "$child"
sleep 1
kill -TERM "$bench" 2>/dev/null
wait $pid
check '[ "$(cat work/remat-interrupted.safetensors)" = precious ] && [ -z "$(ls tmp)" ]' \
    "a child wrote the user's files or left temporaries: $(ls work tmp)"
check '[ "$(ls work | sort | tr "\n" " ")" = "progress.txt remat-interrupted.safetensors table.txt " ]' \
    "files appeared in the user's folder: $(ls work)"

# remat train: a signal delivered twice at once (timeout -s TERM, a kill of
# the process group) is one request: the state is saved; asked again a
# second later, during the save, it dies at once and the old file stays
"$R" train $TINY --save t.st >/dev/null 2>&1 && cp t.st t.orig
sha() { sha256sum "$1" | cut -d' ' -f1; }
"$R" train --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --steps 1000000 --save t.st \
    --save-every 20 --keep 1 >/dev/null 2>err &
pid=$!
i=0; while [ $i -lt 300 ] && ! ls t.step*.st >/dev/null 2>&1; do sleep 0.05; i=$((i + 1)); done
kill -TERM $pid; kill -TERM $pid 2>/dev/null
wait $pid; rc=$?
check '[ $rc -eq 143 ] && grep -q "saved t.st" err && [ "$(sha t.st)" != "$(sha t.orig)" ]' \
    "SIGTERM delivered twice at once to train: exit $rc: $(cat err)"
# SIGHUP (a closed terminal) and SIGUSR1 (a batch system's warning) stop and save too
# (a suite started under nohup inherits SIGHUP ignored, and remat keeps it
# ignored, as nohup asks: the run is given the default disposition here)
dflt=""; env --default-signal=HUP true 2>/dev/null && dflt="env --default-signal=HUP"
for sig in HUP USR1; do
    want=$([ $sig = HUP ] && echo 129 || echo 138)
    rm -f t.step*.st  # (the step files of the run before: another run's, which a new one refuses to replace)
    $dflt "$R" train --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --steps 1000000 --save t.st \
        --save-every 20 --keep 1 >/dev/null 2>err &
    pid=$!
    i=0; while [ $i -lt 300 ] && ! ls t.step*.st >/dev/null 2>&1; do sleep 0.05; i=$((i + 1)); done
    kill -$sig $pid
    wait $pid; rc=$?
    check '[ $rc -eq $want ] && grep -q "SIG$sig: stopped after step .*; saved t.st" err' \
        "SIG$sig to train: exit $rc: $(cat err)"
done
cp t.orig t.st
rm -f t.step*.st
REMAT_TEST_SLOW_SAVE_MS=4000 "$R" train --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 \
    --steps 1000000 --save t.st --save-every 20 >/dev/null 2>err &
pid=$!
# a save under way: its temporary file is there (held 4 s before the rename)
i=0; while [ $i -lt 300 ] && ! ls -a | grep -q '^\.t\.step.*\.tmp\.'; do sleep 0.05; i=$((i + 1)); done
kill -INT $pid; sleep 1.5; kill -INT $pid 2>/dev/null
wait $pid; rc=$?
check '[ $rc -eq 130 ] && ! grep -q "saved t.st" err && [ "$(sha t.st)" = "$(sha t.orig)" ]' \
    "SIGINT again during the save: exit $rc, the old file kept: $(cat err)"

echo "test_cli_files: $pass passed, $fail failed"
[ $fail -eq 0 ]
