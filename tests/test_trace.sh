#!/bin/sh
# test_trace.sh: `remat train --trace` end to end: the file is valid JSON
# (parsed by python3's json) with forward, recompute, backward and optimizer
# events, and its counter's maximum equals activation_bytes_measured of the
# same run's --report; --trace-step picks the step; a step outside the run
# is a usage error.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "test_trace: python3 missing, skipped; 0 passed, 0 failed"; exit 0; }

GPT="--layers 3 --dim 32 --heads 4 --context 16 --batch 4 --steps 4 --seed 2 --quiet"
# prints: categories present, counter max, strategy, model, step
summary() {
    python3 - "$1" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
cats = sorted({e["cat"] for e in ev if e["ph"] == "X"})
peak = max(e["args"]["bytes"] for e in ev if e["ph"] == "C")
m = d["otherData"]
print(",".join(cats), peak, m["strategy"], m["model"].split()[0], m["step"])
PY
}
for s in blocks sqrt selective; do
    "$R" train $GPT --checkpoint $s --trace "$T/t_$s.json" --report "$T/r_$s.json" || bad "train --trace $s exited $?"
    out=$(summary "$T/t_$s.json")
    check '[ "$(echo "$out" | cut -d" " -f1)" = "backward,forward,optimizer,recompute" ]' "$s: categories: $out"
    check '[ "$(echo "$out" | cut -d" " -f2)" = "$(field "$T/r_$s.json" activation_bytes_measured)" ]' \
        "$s: counter max $out != report's activation_bytes_measured $(field "$T/r_$s.json" activation_bytes_measured)"
    check '[ "$(echo "$out" | cut -d" " -f3-5)" = "$s gpt 1" ]' "$s: metadata (strategy model step) $out"
done
"$R" train $GPT --memory-budget 50% --trace "$T/b.json" --trace-step 4 --report "$T/b.rep" || bad "budget trace exited $?"
out=$(summary "$T/b.json")
check '[ "$(echo "$out" | cut -d" " -f2)" = "$(field "$T/b.rep" activation_bytes_measured)" ] && [ "$(echo "$out" | cut -d" " -f5)" = 3 ]' \
    "budget 50%, --trace-step 4: $out"
"$R" train $GPT --trace "$T/x.json" --trace-step 5 2> "$T/err"; rc=$?
check '[ $rc -eq 2 ] && grep -q "past --steps" "$T/err" && [ ! -e "$T/x.json" ]' "--trace-step past the run: exit $rc $(cat "$T/err")"
"$R" train $GPT --steps 1 --trace "$T/one.json" || bad "one-step trace exited $?"
check '[ "$(summary "$T/one.json" | cut -d" " -f5)" = 0 ]' "--steps 1 traces the only step"

echo "test_trace_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
