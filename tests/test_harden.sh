#!/bin/sh
# test_harden.sh: issue 10 through the remat command: nothing hangs on a
# FIFO or device (class 6), budgets at the edges get a message (class 9),
# no error line is empty and a sweep with no feasible point fails (class 11).
# Every command runs under `timeout`, so a hang is a failure, not a stuck suite.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"
TO="timeout 20"
# run CMD...: runs it, keeps its exit status in $rc and its stderr in $T/err
run() { $TO "$@" >"$T/out" 2>"$T/err"; rc=$?; }
# refused WHAT: exit 1 or 2 (not a hang, not a crash), one non-empty error line
refused() {
    check '[ $rc -eq 1 ] || [ $rc -eq 2 ]' "$1: exit $rc (124 = hung)"
    check 'grep -q "error: ." "$T/err" && ! grep -q "'"'"': *$" "$T/err"' "$1: no useful message: $(cat "$T/err")"
}
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --steps 2 --quiet"

# class 6: every reader refuses a FIFO and a device without blocking
mkfifo "$T/fifo"
"$R" train $TINY --save "$T/good.safetensors" || bad "training the tiny model"
for args in "train $TINY --data $T/fifo" "train $TINY --resume $T/fifo" "train $TINY --init $T/fifo" \
    "inspect $T/fifo" "sample --load $T/fifo --tokens 2" "plan --chain $T/fifo --memory-budget 100" \
    "train $TINY --data /dev/zero" "inspect /dev/null" "sample --load /dev/zero --tokens 2" "train $TINY --data $T"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused "remat $args"
    check 'grep -q "regular file\|directory" "$T/err"' "remat $args: says what the file is: $(cat "$T/err")"
done

# class 9: budgets at the edges
for b in 1e19 nan inf 1e30 -1 0 "" 1e30%; do
    run "$R" plan $TINY --memory-budget "$b"
    refused "plan --memory-budget '$b'"
    check '! grep -q "budget -" "$T/err"' "plan --memory-budget '$b': a negative figure: $(cat "$T/err")"
    run "$R" train $TINY --memory-budget "$b"
    refused "train --memory-budget '$b'"
done
run "$R" plan $TINY --memory-budget 1e18
check '[ $rc -eq 0 ]' "plan --memory-budget 1e18 (more than store-all) should plan store-all: $(cat "$T/err")"

# class 8/11 through the chain planner: huge sizes, NaN budgets, infeasible sweeps
printf '{"stages":[{"uf":1,"ub":1,"a":9e18,"ab":9e18},{"uf":1,"ub":1,"a":9e18,"ab":9e18}]}' > "$T/huge.json"
run "$R" plan --chain "$T/huge.json" --memory-budget 1e30
refused "plan --chain (9e18-byte stages) --memory-budget 1e30"
run "$R" plan --chain "$T/huge.json" --sweep
refused "plan --chain (9e18-byte stages) --sweep"
printf '{"stages":[{"uf":1,"ub":1,"a":100,"ab":100},{"uf":1,"ub":1,"a":100,"ab":100}]}' > "$T/small.json"
for b in nan -5 1e30x; do
    run "$R" plan --chain "$T/small.json" --memory-budget "$b"
    check '[ $rc -eq 2 ]' "plan --chain --memory-budget '$b': exit $rc, want 2"
done
run "$R" plan --chain "$T/small.json" --memory-budget 1e30
check '[ $rc -eq 0 ] && grep -q "feasible: yes" "$T/out"' "plan --chain --memory-budget 1e30: $(cat "$T/err")"

# class 12: an address-space limit too small for OpenBLAS's start-up buffers
# (128 MiB per thread) hung before main; now BLAS loads only when it fits.
# Skipped under ASan, whose shadow memory needs terabytes of address space.
case "$BUILD" in *asan*) echo "skipping the ulimit -v checks under ASan" ;; *)
    ( ulimit -v 300000 && $TO "$R" --version ) >"$T/out" 2>&1
    check '[ $? -eq 0 ] && grep -q "^remat " "$T/out"' "ulimit -v 300000; remat --version: $(cat "$T/out")"
    ( ulimit -v 300000 && $TO "$R" plan $TINY --memory-budget 100% ) >"$T/out" 2>&1
    check '[ $? -eq 0 ]' "ulimit -v 300000; remat plan: $(tail -1 "$T/out")"
    ( ulimit -v 600000 && $TO "$R" train $TINY --save "$T/lim.safetensors" ) >"$T/out" 2>&1
    check '[ $? -eq 0 ] && [ -s "$T/lim.safetensors" ]' "ulimit -v 600000; remat train: $(tail -1 "$T/out")" ;;
esac

echo "test_harden_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
