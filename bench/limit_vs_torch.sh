#!/bin/sh
# bench/limit_vs_torch.sh: remat under PyTorch's own memory (issue 15).
#
#   sh bench/limit_vs_torch.sh        (`make` must have built remat)
#
# The peers: PyTorch 1.13 with checkpoint() around every block, both forms
# (bench/bench_torch.py --checkpoint block, with and without --reentrant:
# use_reentrant=True is 1.13's default and the faster of the two here).
# Each peer's peak RSS, measured in a first round, is given to remat as
# `--memory-limit` (the whole process's peak RSS), and remat plans the
# recomputation that fits it. Then REPS rounds alternate: peer, remat under
# that peer's RSS, the other peer, remat under its RSS. Printed per peer,
# medians over the rounds: its step and peak RSS, remat's step and peak RSS
# under the limit, and remat's step over the peer's (the target is <= 0.5
# against the better peer) and whether remat stayed under the limit.
# Shape: GPT shape A of docs/PERFORMANCE.md; fp32, AdamW, clipping 1.0, no
# dropout; the same threads on both sides.
# Environment: THREADS [all cores] REPS [3] STEPS [5] OUT [mktemp]
#   SHAPE [shape A] PYTHON [/usr/bin/python3]
#   BENCH_UNSET_OPENBLAS_ENV [0]  1: unset OPENBLAS_CORETYPE and
#       OPENBLAS_L2_SIZE for both sides alike
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
REPS=${REPS:-3}
STEPS=${STEPS:-5}
SHAPE=${SHAPE:-"--layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8"}
OUT=${OUT:-$(mktemp -d /tmp/remat_limit_torch.XXXXXX)}
mkdir -p "$OUT"
[ "${BENCH_UNSET_OPENBLAS_ENV:-0}" = 1 ] && unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
echo "limit_vs_torch: OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-<unset>}, $THREADS threads, results in $OUT" >&2
torch() { # name flags...
    n=$1
    shift
    "$PYTHON" bench/bench_torch.py $SHAPE --threads "$THREADS" --warmup 1 --steps "$STEPS" \
        --checkpoint block "$@" --out "$OUT/$n.json" >/dev/null
}
remat() { # name limit
    "$REMAT" train $SHAPE --threads "$THREADS" --steps "$STEPS" --val-fraction 0 --quiet \
        --memory-limit "$2" --report "$OUT/$1.json" >/dev/null
}
for r in $(seq 1 "$REPS"); do
    torch "reentrant_$r" --reentrant
    [ -f "$OUT/limit_reentrant" ] || field "$OUT/reentrant_1.json" peak_rss_bytes > "$OUT/limit_reentrant"
    remat "remat_reentrant_$r" "$(cat "$OUT/limit_reentrant")"
    torch "nonreentrant_$r"
    [ -f "$OUT/limit_nonreentrant" ] || field "$OUT/nonreentrant_1.json" peak_rss_bytes > "$OUT/limit_nonreentrant"
    remat "remat_nonreentrant_$r" "$(cat "$OUT/limit_nonreentrant")"
    echo "round $r: torch reentrant $(field "$OUT/reentrant_$r.json" step_ms_median) ms," \
        "remat $(field "$OUT/remat_reentrant_$r.json" step_ms_median) ms;" \
        "torch non-reentrant $(field "$OUT/nonreentrant_$r.json" step_ms_median) ms," \
        "remat $(field "$OUT/remat_nonreentrant_$r.json" step_ms_median) ms" >&2
done
"$PYTHON" - "$OUT" "$REPS" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def med(name, key):
    return statistics.median(float(json.load(open(f"{out}/{name}_{r}.json"))[key]) for r in range(1, reps + 1))
def mx(name, key):
    return max(float(json.load(open(f"{out}/{name}_{r}.json"))[key]) for r in range(1, reps + 1))
M = 2**20
rows = []
for peer, label in (("reentrant", "checkpoint per block, use_reentrant=True"),
                    ("nonreentrant", "checkpoint per block, use_reentrant=False")):
    limit = int(open(f"{out}/limit_{peer}").read())
    tp, rp = med(peer, "step_ms_median"), med(peer, "peak_rss_bytes")
    tr, rr = med("remat_" + peer, "step_ms_median"), mx("remat_" + peer, "max_rss_bytes")
    rows.append((tp, peer))
    print(f"peer: torch {label}")
    print(f"  torch  step {tp:8.1f} ms   peak RSS {rp / M:7.1f} MiB")
    print(f"  remat  step {tr:8.1f} ms   peak RSS {rr / M:7.1f} MiB (max of runs) under --memory-limit {limit / M:.1f} MiB:"
          f" {'under' if rr <= limit else 'OVER'}")
    print(f"  remat/torch step: {tr / tp:.3f} (target <= 0.5 against the better peer)"
          f"   recompute share {100 * med('remat_' + peer, 'measured_overhead'):.1f}%")
print("better peer (faster step):", min(rows)[1])
print("raw results:", out)
PY
