#!/bin/sh
# bench/limit_levels.sh: what --memory-limit costs (issue 15).
#
#   sh bench/limit_levels.sh          (`make` must have built remat)
#
# One unconstrained run (no limit, store-all) measures the peak RSS P. Then
# REPS rounds alternate: no limit, --memory-limit at each of FRACTIONS x P.
# Printed per level, medians over the rounds: the limit, the highest peak
# RSS of any run under it (max_rss_bytes, getrusage) and whether it stayed
# under, the step time and its ratio to the unconstrained step, and the
# recompute share (recompute ms / forward + backward ms, measured). A level
# remat refuses (the training state alone does not fit) prints its message.
# Environment: THREADS [all cores] REPS [3] STEPS [5] OUT [mktemp]
#   SHAPE [GPT shape A of docs/PERFORMANCE.md] FRACTIONS ["1.0 0.8 0.6"]
#   PYTHON [/usr/bin/python3]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
REPS=${REPS:-3}
STEPS=${STEPS:-5}
SHAPE=${SHAPE:-"--layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8"}
FRACTIONS=${FRACTIONS:-"1.0 0.8 0.6"}
OUT=${OUT:-$(mktemp -d /tmp/remat_limit_levels.XXXXXX)}
mkdir -p "$OUT"
echo "limit_levels: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-<unset>}, $THREADS threads, results in $OUT" >&2
train() { # name flags...: a refused run leaves its message in name.err
    n=$1
    shift
    "$REMAT" train $SHAPE --threads "$THREADS" --steps "$STEPS" --val-fraction 0 --quiet \
        --report "$OUT/$n.json" "$@" >/dev/null 2>"$OUT/$n.err" || [ -n "${MAY_FAIL-}" ]
}
train probe
P=$(field "$OUT/probe.json" max_rss_bytes)
for f in $FRACTIONS; do awk -v p="$P" -v f="$f" 'BEGIN { printf "%d\n", p * f }' > "$OUT/limit_$f"; done
for r in $(seq 1 "$REPS"); do
    train "none_$r"
    line="round $r: none $(field "$OUT/none_$r.json" step_ms_median) ms"
    for f in $FRACTIONS; do
        MAY_FAIL=1 train "limit_${f}_$r" --memory-limit "$(cat "$OUT/limit_$f")"
        [ -s "$OUT/limit_${f}_$r.json" ] && ms="$(field "$OUT/limit_${f}_$r.json" step_ms_median) ms" || ms=refused
        line="$line, ${f}x $ms"
    done
    echo "$line" >&2
done
"$PYTHON" - "$OUT" "$REPS" "$P" $FRACTIONS <<'PY'
import json, statistics, sys
out, reps, peak, fracs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
M = 2**20
def runs(name):
    return [json.load(open(f"{out}/{name}_{r}.json")) for r in range(1, reps + 1)]
def med(rs, key):
    return statistics.median(float(x[key]) for x in rs)
base = med(runs("none"), "step_ms_median")
print(f"unconstrained peak RSS {peak / M:.1f} MiB, step {base:.1f} ms")
print(f"{'limit':>6} {'MiB':>8} {'peak MiB':>9} {'under':>6} {'step ms':>8} {'x none':>7} {'recompute':>9}")
for f in fracs:
    limit = int(open(f"{out}/limit_{f}").read())
    try:
        rs = runs(f"limit_{f}")
    except (OSError, ValueError):
        err = open(f"{out}/limit_{f}_1.err").read().strip().splitlines()
        print(f"{f + 'x':>6} {limit / M:8.1f}  refused: {err[-1] if err else '(no message)'}")
        continue
    top = max(float(x["max_rss_bytes"]) for x in rs)
    step = med(rs, "step_ms_median")
    print(f"{f + 'x':>6} {limit / M:8.1f} {top / M:9.1f} {'yes' if top <= limit else 'NO':>6} {step:8.1f}"
          f" {step / base:7.3f} {100 * med(rs, 'measured_overhead'):8.1f}%")
print("raw results:", out)
PY
