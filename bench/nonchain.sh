#!/bin/sh
# bench/nonchain.sh: memory budgets on networks that are not chains
# (issue 12's targets, docs/RECOMPUTE.md "Any graph").
#
#   sh bench/nonchain.sh          (`make` must have built remat)
#
# Models (the shapes of issue 12):
#   encdec  --model encdec --enc-layers 6 --dec-layers 6 --dim 384 --heads 6 --context 128 --batch 8
#   uvit    --model uvit --layers 12 --dim 384 --heads 6 --context 256 --batch 8
# Configs: store-all (`none`), `--memory-budget 50%` and `25%`. Runs
# alternate config by config over REPS rounds; each run reports the median
# of its steps. Printed per model and config, medians over the rounds: the
# step time and its ratio to none, the measured recompute share (the
# executor's recompute ms over forward + backward ms: the targets are
# <= 10% at 50% and <= 25% at 25%), the planner's predicted share, and the
# measured activation high-water mark against store-all's.
# Environment: THREADS [all cores] REPS [3] STEPS [5] OUT [mktemp]
#   MODELS ["encdec uvit"] CONFIGS ["none 50% 25%"]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
REPS=${REPS:-3}
STEPS=${STEPS:-5}
MODELS=${MODELS:-"encdec uvit"}
CONFIGS=${CONFIGS:-"none 50% 25%"}
OUT=${OUT:-$(mktemp -d /tmp/remat_nonchain.XXXXXX)}
mkdir -p "$OUT"
shape() {
    case $1 in
    encdec) echo "--model encdec --enc-layers 6 --dec-layers 6 --dim 384 --heads 6 --context 128 --batch 8" ;;
    uvit) echo "--model uvit --layers 12 --dim 384 --heads 6 --context 256 --batch 8" ;;
    *) echo "bench/nonchain.sh: unknown model $1 (encdec or uvit)" >&2; exit 2 ;;
    esac
}
for r in $(seq 1 "$REPS"); do
    for m in $MODELS; do
        for c in $CONFIGS; do
            case $c in none) flag="--checkpoint none" ;; *) flag="--memory-budget $c" ;; esac
            n=${m}_$(echo "$c" | tr -d '%')_$r
            # shellcheck disable=SC2046
            "$REMAT" train $(shape "$m") --threads "$THREADS" --steps "$STEPS" --quiet $flag \
                --report "$OUT/$n.json" >/dev/null
            echo "round $r $m $c: $(field "$OUT/$n.json" step_ms_median) ms" >&2
        done
    done
done
"$PYTHON" - "$OUT" "$REPS" "$MODELS" "$CONFIGS" <<'PY'
import json, statistics, sys
out, reps, models, confs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split()
def runs(m, c):
    return [json.load(open(f"{out}/{m}_{c.replace('%', '')}_{r}.json")) for r in range(1, reps + 1)]
def med(rs, key):
    return statistics.median(float(x[key]) for x in rs)
print("%-7s %-5s %10s %8s %9s %9s %10s %8s" % ("model", "conf", "step ms", "x none", "meas ovh", "pred ovh", "act MiB", "x none"))
for m in models:
    base = runs(m, "none")
    t0, a0 = med(base, "step_ms_median"), med(base, "activation_bytes_measured")
    for c in confs:
        rs = runs(m, c)
        t, a = med(rs, "step_ms_median"), med(rs, "activation_bytes_measured")
        print("%-7s %-5s %10.1f %8.3f %8.1f%% %8.1f%% %10.1f %8.3f" % (m, c, t, t / t0,
              100 * med(rs, "measured_overhead"), 100 * med(rs, "predicted_overhead"), a / 2**20, a / a0))
print("raw results:", out)
PY
