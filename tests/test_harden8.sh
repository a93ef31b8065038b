#!/bin/sh
# test_harden8.sh: the eighth hardening round, `remat bench` as a careless
# user runs it (docs/RELIABILITY.md), each class tried on several members:
#  1. bench's own --scratch DIR and --scratch-bandwidth were passed to the
#     paged points' children unchecked: a folder that is not there, a file,
#     a folder on tmpfs, or a bandwidth of nan, -5, 0 made every '+page'
#     point "skipped" with the same refusal, and bench exited 0 after
#     running the rest. Both are now checked before the first point as the
#     children check them (rm_scratch_check, cli_parse_bandwidth): exit 2,
#     one line naming the flag, nothing measured.
#  2. --compare read a CSV by splitting every line at every comma: a field
#     in double quotes (Python's csv module, pandas and spreadsheets quote a
#     label holding a comma, "torch, bs=4") shifted the columns, and the row
#     was taken with its peak RSS as the step time (90000000 ms), without a
#     word. The file is now read as RFC 4180 says: quoted fields with commas,
#     "" and line breaks; a quote never closed is a malformed row.
# Every command runs under `timeout`: a hang is a failure (exit 124).
. "$(dirname "$0")/harden_lib.sh"
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1"
ONE="--steps 1 --rounds 1 --budgets 2 --strategies none"

# ---- 1. bench's --scratch and --scratch-bandwidth, checked before the first point ----
mkdir -p sd
: > afile
# a folder on tmpfs, where this machine has one
SHM=; [ -d /dev/shm ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && SHM=/dev/shm
for d in nothere afile $SHM; do
    run "$R" bench $TINY $ONE --scratch "$d"
    refused 2 "bench --scratch $d"
    check 'grep -q "error: --scratch: scratch directory" err && ! grep -q "skipped" out' \
        "bench --scratch $d: named before the first point: $(head -c 300 err) $(head -c 300 out)"
done
for bw in nan -5 0 abc 1e400 ''; do
    run "$R" bench $TINY $ONE --scratch sd --scratch-bandwidth "$bw"
    refused 2 "bench --scratch-bandwidth '$bw'"
    check 'grep -q "error: --scratch-bandwidth" err' "bench --scratch-bandwidth '$bw': $(head -c 300 err)"
done
# what the children take, bench takes: the paged points are measured
for bw in 1GB/s measure; do
    run "$R" bench $TINY $ONE --scratch sd --scratch-bandwidth "$bw"
    check '[ $rc -eq 0 ] && [ $(grep -c "+page  *[0-9]" out) -eq 2 ] && ! grep -q skipped out' \
        "bench --scratch sd --scratch-bandwidth $bw: exit $rc: $(cat out) $(tail -c 300 err)"
done
check '[ -z "$(ls -A sd)" ]' "bench's check leaves nothing in --scratch DIR: $(ls -A sd)"
# train's flag takes the same values as before (one parser)
run "$R" train $TINY --steps 1 --scratch sd --scratch-bandwidth -5 --memory-budget 50%
refused 2 "train --scratch-bandwidth -5"

# ---- 2. --compare read as CSV, quoted fields included ----
cols="config,strategy,budget_bytes,activation_bytes_planned,activation_bytes_measured,peak_rss_bytes,step_ms_median,step_ms_min,step_ms_max,overhead_measured,overhead_predicted"
# the chart's y values of the peer marks (the step times), and their labels
peer_marks() {
    python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
for g in root.iter("{http://www.w3.org/2000/svg}g"):
    t = g.find("{http://www.w3.org/2000/svg}text")
    if g.get("class") == "point" and t is not None and "peer" in (t.text or ""):
        print(t.text)
PY
}
cmp_run() {
    run "$R" bench $TINY --steps 1 --rounds 1 --budgets 0 --strategies none --svg c.svg --compare peer.csv
}
{ printf '%s,source,label\r\n' "$cols"
  printf 'x,"torch, bs=2",0,,200000,90000000,7.5,7.0,8.0,,,peer,"peer ""a"", bs=2"\r\n'
  printf 'x,"torch\nmulti",0,,,80000000,6.5,6.0,7.0,,,peer,peer-b\n\n'; } > peer.csv
cmp_run
check '[ $rc -eq 0 ] && ! grep -q malformed err' "bench --compare with quoted fields: exit $rc: $(tail -c 300 err)"
if command -v python3 >/dev/null; then
    marks=$(peer_marks c.svg | tr '\n' '|')
    check '[ "$marks" = "peer \"a\", bs=2|peer-b|" ]' "quoted labels read whole: '$marks'"
fi
# the step time is the step_ms_median column, not the peak RSS a shifted split read there
check '! grep -q "9e+07\|90000000" c.svg' "a peak RSS read as a step time: $(grep -o 'y="[^"]*"' c.svg | head -3)"
# a quote never closed: that row (the rest of the file) is malformed, said so
{ printf '%s,source,label\n' "$cols"
  printf 'x,peer:a,0,,,90000000,5.0,4.0,6.0,,,peer,peer-a\n'
  printf 'x,"peer:b,0,,,90000000,5.0,4.0,6.0,,,peer,peer-b\n'; } > peer.csv
cmp_run
check '[ $rc -eq 0 ] && grep -q "1 of 2 rows malformed" err' "an unclosed quote: exit $rc: $(tail -c 300 err)"
# the header may be quoted too
{ printf '"config","strategy","activation_bytes_measured","peak_rss_bytes","step_ms_median"\n'
  printf 'x,peer:q,,90000000,5.0\n'; } > peer.csv
cmp_run
check '[ $rc -eq 0 ] && ! grep -q malformed err' "a quoted header: exit $rc: $(tail -c 300 err)"

echo "test_harden8: $pass passed, $fail failed"
[ $fail -eq 0 ]
