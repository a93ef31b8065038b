#!/bin/sh
# bench/budget_vs_segments.sh: is the budget planner at least as fast as the
# best uniform segmentation at the same memory?
#
#   sh bench/budget_vs_segments.sh            (GPT shape A of docs/PERFORMANCE.md)
#   MODEL="--model mlp --widths 512,4096,512,4096,256,2048,128,8192,128 --context 256 --batch 128" \
#       sh bench/budget_vs_segments.sh        (the heterogeneous MLP)
#
# For each fixed strategy S in CONFIGS, one run measures S's activation
# high-water mark M(S); then, REPS rounds, alternating, S and
# `--memory-budget M(S)` run back to back. Printed per S: M(S), the median
# step time of each, their ratio (planner / S; below 1 means the planner is
# faster), and each side's recompute share (recompute ms / fwd + bwd ms).
# Environment: THREADS [all cores] REPS [3] STEPS [6] OUT [mktemp]
#   CONFIGS ["segments:2 segments:3 segments:4 blocks"]
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
REPS=${REPS:-3}
STEPS=${STEPS:-6}
MODEL=${MODEL:-"--layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8"}
CONFIGS=${CONFIGS:-"segments:2 segments:3 segments:4 blocks"}
OUT=${OUT:-$(mktemp -d /tmp/remat_bvs.XXXXXX)}
mkdir -p "$OUT"
run() { # name flags...
    name=$1
    shift
    "$REMAT" train $MODEL --threads "$THREADS" --steps "$STEPS" --quiet "$@" --report "$OUT/$name.json" >/dev/null
}
for c in $CONFIGS; do
    n=$(echo "$c" | tr ':' '_')
    run "${n}_probe" --checkpoint "$c"
    field "$OUT/${n}_probe.json" activation_bytes_measured > "$OUT/${n}_bytes"
done
for r in $(seq 1 "$REPS"); do
    for c in $CONFIGS; do
        n=$(echo "$c" | tr ':' '_')
        run "${n}_$r" --checkpoint "$c"
        run "${n}_budget_$r" --memory-budget "$(cat "$OUT/${n}_bytes")"
        echo "round $r $c: $(field "$OUT/${n}_$r.json" step_ms_median) vs budget $(field "$OUT/${n}_budget_$r.json" step_ms_median) ms" >&2
    done
done
"$PYTHON" - "$OUT" "$REPS" "$CONFIGS" <<'PY'
import json, statistics, sys
out, reps, confs = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
def med(name, key):
    return statistics.median(json.load(open(f"{out}/{name}_{r}.json"))[key] for r in range(1, reps + 1))
def share(name):
    return med(name, "measured_overhead") * 100
print("%-12s %10s %11s %11s %8s %9s %9s" % ("config", "MiB", "config ms", "budget ms", "ratio", "cfg ovh", "bud ovh"))
for c in confs:
    n = c.replace(":", "_")
    b = int(open(f"{out}/{n}_bytes").read())
    t, tb = med(n, "step_ms_median"), med(n + "_budget", "step_ms_median")
    print("%-12s %10.1f %11.1f %11.1f %8.3f %8.1f%% %8.1f%%" % (c, b / 2**20, t, tb, tb / t, share(n), share(n + "_budget")))
print("raw results:", out)
PY
