#!/bin/sh
# test_cli_lists.sh: issue 22, class 3: every comma-separated list of the
# command line (--widths, --adam-betas, bench's --strategies) is split once,
# by cli_parse_list, with bounds: an empty item, too many items or a bad one
# is a usage error (exit 2) with one line, before any work; never a crash
# (bench's old parser overflowed a heap buffer on "none,,none", ",,," or
# more than 64 entries).
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
cd "$T" || exit 1
TO="timeout 60"
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1"
many=$(awk 'BEGIN { for (i = 1; i <= 70; i++) printf "%ssegments:%d", (i > 1 ? "," : ""), i }')
nones=$(awk 'BEGIN { for (i = 1; i <= 70; i++) printf "%snone", (i > 1 ? "," : "") }')
# usage WHAT CMD...: exit 2, one line naming the flag, nothing run
usage() {
    what=$1; shift
    $TO "$@" >"$T/out" 2>"$T/err"; rc=$?
    check '[ $rc -eq 2 ] && [ $(wc -l < "$T/err") -eq 1 ] && grep -q "error: .*$flag" "$T/err"' \
        "$what: exit $rc (2 wanted, one line naming $flag): $(head -c 300 "$T/err")"
    check '! grep -q "done\|^none \|bench: 1/" "$T/out" "$T/err"' "$what: ran before refusing"
}
flag=--strategies
for s in "none,,none" ",,," "," "" "none," ",none" "$many" "$nones" "none,none" "bogus" "segments:0" "none,sqrt,x"; do
    usage "bench --strategies '$(echo "$s" | cut -c1-30)'" "$R" bench $TINY --steps 1 --budgets 2 --rounds 1 --strategies "$s"
done
flag=--widths
for w in "" "," "32," ",32" "32,,32" "x" "32,-1" "32,0" "$(awk 'BEGIN { for (i = 0; i < 300; i++) printf "8," }')8"; do
    usage "--widths '$(echo "$w" | cut -c1-30)'" "$R" train --model mlp --widths "$w" --steps 1 --quiet
    usage "plan --widths '$(echo "$w" | cut -c1-30)'" "$R" plan --model mlp --widths "$w"
done
flag=--adam-betas
for b in "" "0.9" "0.9," ",0.9" "0.9,,0.95" "0.9,0.95,0.1" "1,0.9" "0.9,x"; do
    usage "--adam-betas '$b'" "$R" train $TINY --adam-betas "$b" --steps 1 --quiet
done
# the lists that are fine still work
$TO "$R" bench $TINY --steps 1 --budgets 0 --rounds 1 --strategies none,segments:2 >"$T/out" 2>"$T/err"; rc=$?
check '[ $rc -eq 0 ] && grep -q "^segments:2 " "$T/out"' "bench --strategies none,segments:2: exit $rc $(tail -2 "$T/err")"
$TO "$R" train --model mlp --widths 16,8 --context 8 --adam-betas 0.8,0.9 --steps 1 --quiet >"$T/out" 2>"$T/err"; rc=$?
check '[ $rc -eq 0 ]' "--widths 16,8 --adam-betas 0.8,0.9: exit $rc $(cat "$T/err")"

echo "test_cli_lists: $pass passed, $fail failed"
[ $fail -eq 0 ]
