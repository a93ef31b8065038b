#!/bin/sh
# bench/recompute.sh: what recomputation costs, remat against PyTorch.
#
#   sh bench/recompute.sh        (`make` must have built remat)
#
# Shape: GPT --layers 12 --dim 384 --heads 6 --context 256 --vocab 256
# --batch 8, fp32, AdamW, no dropout, the same thread count on both sides.
# remat configs: none, blocks, selective, segments:K, sqrt, and budgets of
# 50% and 25% of store-all's activation arena (--memory-budget). PyTorch
# configs (bench/bench_torch.py): none, checkpoint() around every block,
# checkpoint_sequential with round(sqrt(12)) = 3 segments.
# Runs alternate config by config, REPS rounds; each run reports the median
# step time of its steps. Printed per config: the median over rounds of the
# step time, its ratio to the same side's `none`, and activation memory
# (remat: activation_bytes_measured / none's; PyTorch: peak RSS above none's
# is the closest figure it offers, shown as MiB).
# Environment: THREADS [all cores] REPS [3] STEPS [6] CONFIGS [all]
#   OUT [/tmp/remat_recompute.XXXXXX]  PYTHON [/usr/bin/python3]
# Takes about 15 minutes on 2 cores.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
REMAT=${REMAT:-$BUILD/remat}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
REPS=${REPS:-3}
STEPS=${STEPS:-6}
OUT=${OUT:-$(mktemp -d /tmp/remat_recompute.XXXXXX)}
mkdir -p "$OUT"
SHAPE="--layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8"
REMAT_CONFIGS=${CONFIGS:-"none blocks selective segments:2 segments:3 segments:4 sqrt budget:50% budget:25%"}
TORCH_CONFIGS=${TORCH_CONFIGS:-"none block sequential"}
have_torch=0
"$PYTHON" -c "import torch" 2>/dev/null && have_torch=1

for r in $(seq 1 "$REPS"); do
    for c in $REMAT_CONFIGS; do
        case $c in
        budget:*) flag="--memory-budget ${c#budget:}" ;;
        *) flag="--checkpoint $c" ;;
        esac
        name=$(echo "$c" | tr ':%' '__')
        "$REMAT" train $SHAPE --threads "$THREADS" --steps "$STEPS" --quiet $flag \
            --report "$OUT/remat_${name}_$r.json" >/dev/null
        echo "round $r remat $c: $(sed -n 's/.*"step_ms_median": \([0-9.]*\).*/\1/p' "$OUT/remat_${name}_$r.json") ms" >&2
    done
    if [ $have_torch = 1 ]; then
        for c in $TORCH_CONFIGS; do
            "$PYTHON" bench/bench_torch.py $SHAPE --threads "$THREADS" --warmup 1 --steps "$STEPS" \
                --checkpoint "$c" --segments 3 --out "$OUT/torch_${c}_$r.json" >/dev/null
            echo "round $r torch $c done" >&2
        done
    fi
done

"$PYTHON" - "$OUT" "$REPS" "$REMAT_CONFIGS" "$TORCH_CONFIGS" "$have_torch" <<'PY'
import json, statistics, sys
out, reps, rconf, tconf, have_torch = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4].split(), sys.argv[5] == "1"
def load(p):
    with open(p) as f: return json.load(f)
def med(side, c, key):
    name = c.replace(":", "_").replace("%", "_")
    return statistics.median(load(f"{out}/{side}_{name}_{r}.json")[key] for r in range(1, reps + 1))
print("remat (median of %d rounds)" % reps)
print("%-14s %10s %8s %14s %8s %10s %10s" % ("config", "step ms", "x none", "activ. MiB", "x none", "pred ovh", "meas ovh"))
base_t, base_m = med("remat", "none", "step_ms_median"), med("remat", "none", "activation_bytes_measured")
for c in rconf:
    t, m = med("remat", c, "step_ms_median"), med("remat", c, "activation_bytes_measured")
    po, mo = med("remat", c, "predicted_overhead"), med("remat", c, "measured_overhead")
    print("%-14s %10.1f %8.3f %14.1f %8.3f %9.1f%% %9.1f%%" % (c, t, t / base_t, m / 2**20, m / base_m, 100 * po, 100 * mo))
if have_torch:
    print("\nPyTorch %s (median of %d rounds)" % ("eager", reps))
    print("%-14s %10s %8s %16s" % ("config", "step ms", "x none", "peak RSS MiB"))
    bt = med("torch", "none", "step_ms_median")
    for c in tconf:
        t, rss = med("torch", c, "step_ms_median"), med("torch", c, "peak_rss_bytes")
        print("%-14s %10.1f %8.3f %16.1f" % (c, t, t / bt, rss / 2**20))
print("\nraw results:", out)
PY
