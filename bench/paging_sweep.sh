#!/bin/sh
# bench/paging_sweep.sh: the budget sweep with paged points (issue 20), and
# how close the plan's predicted step time is to the measured one.
#
#   flock -x /work/notes/suite.lock sh bench/paging_sweep.sh     (`make` first)
#
# POINTS budgets from the least feasible (remat plan --sweep's range) to
# store-all, spaced geometrically; at each, a run with --memory-budget B alone (recompute only)
# and one with --scratch too (keep, recompute or page), alternating over
# REPS rounds. Printed per budget: the medians, and for the paged run its
# predicted step (the report's step_ms_predicted: the plan's rm_step, every
# instruction at its time from the profiling step and the waits the paging
# timeline simulates, plus the time outside rm_step as measured) against its
# measured median; and, for comparison, step_ms_predicted_waits (the measured
# step with only the recomputation and the waits replaced by the plan's
# predictions). Target: within 15% at every paged point. OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE are unset.
# Environment: SHAPE [shape A] POINTS [6] REPS [2] STEPS [4] THREADS
#   SCRATCH [build/bench_scratch] OUT [mktemp] PYTHON
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
SHAPE=${SHAPE:-"--layers 12 --dim 384 --heads 6 --context 256 --batch 8"}
POINTS=${POINTS:-6}
REPS=${REPS:-2}
STEPS=${STEPS:-4}
OUT=${OUT:-$(mktemp -d /tmp/remat_paging_sweep.XXXXXX)}
SCRATCH=${SCRATCH:-$(pwd)/build/bench_scratch}
mkdir -p "$OUT" "$SCRATCH"
echo "paging_sweep: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, $THREADS threads, results in $OUT" >&2
"$REMAT" plan $SHAPE --sweep --csv "$OUT/sweep.csv" >/dev/null
lo=$(sed -n 2p "$OUT/sweep.csv" | cut -d, -f1)
hi=$(tail -1 "$OUT/sweep.csv" | cut -d, -f1)
# spaced geometrically: paging pays where recomputation is dear, near the least
budgets=$(awk -v lo="$lo" -v hi="$hi" -v n="$POINTS" 'BEGIN { for (i = 0; i < n; i++) printf "%d ", lo * (hi / lo) ^ (i / (n - 1)) }')
echo "budgets: $budgets" >&2
for r in $(seq 1 "$REPS"); do
    for b in $budgets; do
        for kind in plain paged; do
            extra=""
            [ $kind = paged ] && extra="--scratch $SCRATCH"
            "$REMAT" train $SHAPE --threads "$THREADS" --steps "$STEPS" --val-fraction 0 --quiet --memory-budget "$b" \
                $extra --report "$OUT/${kind}_${b}_$r.json" >/dev/null 2>"$OUT/${kind}_${b}_$r.err"
        done
        echo "round $r budget $b: plain $(field "$OUT/plain_${b}_$r.json" step_ms_median) ms, paged $(field "$OUT/paged_${b}_$r.json" step_ms_median) ms" >&2
    done
done
"$PYTHON" - "$OUT" "$REPS" $budgets <<'PY'
import json, statistics, sys
out, reps, budgets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
M = 2**20
def runs(kind, b):
    return [json.load(open(f"{out}/{kind}_{b}_{r}.json")) for r in range(1, reps + 1)]
print(f"{'budget MiB':>10} {'recompute ms':>12} {'paged ms':>9} {'ratio':>6} {'paged MiB out':>13} {'predicted ms':>12} "
      f"{'pred/meas':>9} {'waits only':>10}")
worst = 0
for b in budgets:
    p, q = runs("plain", b), runs("paged", b)
    mp = statistics.median(x["step_ms_median"] for x in p)
    mq = statistics.median(x["step_ms_median"] for x in q)
    out_mib = q[0].get("paged_out_bytes", 0) / M
    if out_mib > 0:
        pred = statistics.median(x["step_ms_predicted"] for x in q)
        waits = statistics.median(x["step_ms_predicted_waits"] for x in q)
        err, err_w = pred / mq - 1, waits / mq - 1
        worst = max(worst, abs(err))
        print(f"{int(b) / M:10.1f} {mp:12.1f} {mq:9.1f} {mq / mp:6.3f} {out_mib:13.1f} {pred:12.1f} {100 * err:+8.1f}% "
              f"{100 * err_w:+9.1f}%")
    else:
        print(f"{int(b) / M:10.1f} {mp:12.1f} {mq:9.1f} {mq / mp:6.3f} {out_mib:13.1f}  (nothing paged)")
print(f"predicted step within 15% of measured at every paged point: {'met' if worst <= 0.15 else 'MISSED'} "
      f"(worst {100 * worst:.1f}%)")
PY
