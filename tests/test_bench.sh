#!/bin/sh
# test_bench.sh: `remat bench` end to end on a tiny model: it finishes in
# seconds; its CSV has the documented columns and one row per point; its SVG
# is well-formed XML (parsed by python3's xml.etree) with one labelled mark
# per measured point plus one per --compare row; peers without activation
# bytes are labelled as placed by peak RSS; `remat plan --sweep --svg` too;
# flags bench sets itself are refused.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"

TINY="--layers 2 --dim 16 --heads 2 --context 8 --batch 2 --threads 1"
start=$(date +%s)
"$R" bench $TINY --steps 2 --budgets 3 --rounds 1 --strategies none,blocks,revolve:2 \
    --csv "$T/b.csv" --svg "$T/b.svg" > "$T/table.txt" 2> "$T/progress.txt"
rc=$?
secs=$(( $(date +%s) - start ))
check '[ $rc -eq 0 ]' "remat bench exited $rc: $(tail -3 "$T/progress.txt")"
check '[ $secs -le 60 ]' "remat bench on a tiny model took ${secs}s"
cols="config,strategy,budget_bytes,activation_bytes_planned,activation_bytes_measured,peak_rss_bytes,step_ms_median,step_ms_min,step_ms_max,overhead_measured,overhead_predicted"
check 'head -1 "$T/b.csv" | grep -q "^$cols"' "CSV header: $(head -1 "$T/b.csv")"
check '[ $(wc -l < "$T/b.csv") -eq 7 ]' "CSV rows: $(wc -l < "$T/b.csv") lines for 3 strategies + 3 budgets"
check 'grep -q "^gpt L2 C16 H2 T8 V256 B2,none,0," "$T/b.csv"' "a none row with the config"
check 'grep -q "budget 100%" "$T/table.txt" && grep -q "revolve:2" "$T/table.txt"' "table: $(cat "$T/table.txt")"
check 'grep -q "ETA" "$T/progress.txt"' "progress with ETA on stderr"
# planned == measured, both > 0, for each row; peak RSS above the activations
check 'awk -F, "NR > 1 && (\$4 != \$5 || \$5 <= 0 || \$6 <= \$5) { bad = 1 } END { exit bad }" "$T/b.csv"' \
    "planned/measured/RSS columns: $(cat "$T/b.csv")"

# a peer CSV: one row with activation bytes, one placed by peak RSS
printf '%s,source,label\n' "$cols" > "$T/peer.csv"
printf 'x,peer:a,0,,200000,90000000,5.0,4.0,6.0,,,peer,peer-a\n' >> "$T/peer.csv"
printf 'x,peer:b,0,,,90000000,7.0,6.0,8.0,,,peer,peer-b\n' >> "$T/peer.csv"
"$R" bench $TINY --steps 1 --budgets 2 --rounds 1 --strategies none --svg "$T/c.svg" --compare "$T/peer.csv" \
    --x act > /dev/null 2>&1 || bad "bench --compare --x act exited $?"
# with --compare the default x axis is peak RSS for every point (--x rss)
"$R" bench $TINY --steps 1 --budgets 0 --rounds 1 --strategies none --svg "$T/r.svg" --compare "$T/peer.csv" \
    > /dev/null 2>&1 || bad "bench --compare exited $?"
if command -v python3 >/dev/null; then
    marks() {
        python3 - "$1" <<'PY'
import sys, xml.etree.ElementTree as ET
ns = {"s": "http://www.w3.org/2000/svg"}
root = ET.parse(sys.argv[1]).getroot()
labels = []
for g in root.iter("{http://www.w3.org/2000/svg}g"):
    if g.get("class") == "point":
        t = g.find("s:text", ns)
        mark = [c for c in g if c.tag.split("}")[1] in ("circle", "rect", "path")]
        if t is not None and t.text and mark:
            labels.append(t.text)
print(len(labels), "|".join(labels))
PY
    }
    out=$(marks "$T/b.svg")
    check '[ "${out%% *}" = 6 ]' "b.svg: 6 labelled marks wanted, got $out"
    out=$(marks "$T/c.svg")
    check '[ "${out%% *}" = 5 ] && echo "$out" | grep -q "peer-b \[RSS\]" && ! echo "$out" | grep -q "peer-a \[RSS\]"' \
        "c.svg: 3 remat + 2 peer marks, peer-b by RSS: $out"
    check 'grep -q "peak RSS" "$T/c.svg" && grep -q "gpt L2 C16" "$T/c.svg"' "the chart names the axes and the model"
    out=$(marks "$T/r.svg")
    check '[ "${out%% *}" = 3 ] && ! echo "$out" | grep -q "RSS\]" && grep -q "Step time against peak RSS" "$T/r.svg"' \
        "r.svg (--compare, default --x rss): 1 remat + 2 peer marks, all by peak RSS: $out"
    "$R" plan $TINY --sweep --csv "$T/sweep.csv" --svg "$T/sweep.svg"
    out=$(marks "$T/sweep.svg")
    check '[ "${out%% *}" = $(($(wc -l < "$T/sweep.csv") - 1)) ]' "plan --sweep --svg: $out vs $(cat "$T/sweep.csv")"
else
    echo "test_bench: python3 missing: SVG parsing skipped"
fi

"$R" bench --help > "$T/help.txt"; rc=$?
check '[ $rc -eq 0 ] && grep -q -- "--budgets" "$T/help.txt" && grep -q -- "--layers" "$T/help.txt"' "bench --help: exit $rc"
"$R" bench $TINY --checkpoint blocks 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "sets --checkpoint itself" "$T/err"' "bench --checkpoint: exit $rc $(cat "$T/err")"
"$R" bench $TINY --rounds 0 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ]' "bench --rounds 0: exit $rc"
"$R" bench $TINY --steps 1 --budgets 0 --strategies none --svg "$T/d.svg" --compare "$T/nope.csv" 2> "$T/err"; rc=$?
check '[ $rc -eq 1 ] && grep -q "nope.csv" "$T/err"' "missing --compare file: exit $rc $(cat "$T/err")"

echo "test_bench: $pass passed, $fail failed"
[ $fail -eq 0 ]
