#!/bin/sh
# Runs every test program and script given (and tests/test_*.sh), sums their
# "N passed, N failed" lines and prints the total as the last line.
BUILD=${BUILD:-build}
export BUILD
total_pass=0; total_fail=0; broken=0
log=$(mktemp)
for t in "$@" tests/test_*.sh; do
    [ -e "$t" ] || continue
    start=$(date +%s)
    case "$t" in *.sh) sh "$t" >"$log" 2>&1 ;; *) "$t" >"$log" 2>&1 ;; esac
    rc=$?
    end=$(date +%s)
    line=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
    # the counts wherever they stand on the line (it may start with them)
    p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+'); f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+')
    [ -n "$line" ] || { p=0; f=0; }
    if [ $rc -ne 0 ] && [ "$f" = 0 ]; then f=1; broken=1; fi
    total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
    if [ "$f" != 0 ] || [ $rc -ne 0 ]; then
        echo "== $t FAILED (exit $rc, $((end-start))s)"; tail -40 "$log"
    else
        echo "== $t: $p passed ($((end-start))s)"
    fi
done
rm -f "$log"
echo "$total_pass passed, $total_fail failed"
[ $total_fail -eq 0 ]
