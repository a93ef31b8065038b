#!/bin/sh
# bench/paging.sh: issue 20's targets, training beyond RAM with --scratch.
#
#   flock -x /work/notes/suite.lock sh bench/paging.sh        (`make` first)
#
# Each target alternates its runs over REPS rounds and quotes medians and
# ratios (step_ms_median of each run's --report; peak RSS = the report's
# max_rss_bytes, getrusage). OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are
# unset for every run (said on the first line). Fused optimizer throughout:
# the training state is paged through the fused updates.
#
#   B   GPT-2 124M (--layers 12 --dim 768 --heads 12 --context 64 --batch 4
#       --vocab 50257): the least --memory-limit without --scratch (from its
#       refusal at 15 MiB), then LIMIT_B = 0.5x that with --scratch, against
#       the unconstrained fused step. Target: peak RSS under the limit, step
#       <= 1.6x the unconstrained one.
#   A   shape A (--layers 12 --dim 384 --heads 6 --context 256 --batch 8):
#       store-all's peak RSS P, then --memory-limit 0.4 P with --scratch and
#       without (the best recompute-only plan at that limit, if any fits),
#       against store-all. Target: <= 1.10x store-all, and faster than the
#       recompute-only plan.
#   M   GPT-2 medium (--layers 24 --dim 1024 --heads 16 --context 256
#       --batch 4 --vocab 50257) under --memory-limit "$LIMIT_M" with --scratch,
#       against the unconstrained fused step; and resume: STEPS_M steps in
#       one go against half, --resume, half, both under the limit (the two
#       files compared byte for byte). Target: <= 1.25x, resume exact.
#
# Environment: TARGETS ["B A M"] REPS [3] STEPS [4] STEPS_M [3] THREADS
#   [all cores] SCRATCH [a folder under build/] OUT [mktemp] PYTHON;
#   SHAPE_B, SHAPE_A, SHAPE_M, LIMIT_M [2GiB] (smaller shapes: a smoke test)
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
TARGETS=${TARGETS:-"B A M"}
REPS=${REPS:-3}
STEPS=${STEPS:-4}
STEPS_M=${STEPS_M:-3}
OUT=${OUT:-$(mktemp -d /tmp/remat_paging.XXXXXX)}
SCRATCH=${SCRATCH:-$(pwd)/build/bench_scratch}
mkdir -p "$OUT" "$SCRATCH"
echo "paging: OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, $THREADS threads, scratch $SCRATCH, results in $OUT" >&2
FUSED="--fuse-optimizer --grad-clip 0"

"$PYTHON" - "$OUT/tokens_v50257.bin" <<'EOF'
import array, random, struct, sys
n = 1 << 17
rng = random.Random(20240520)
tokens = array.array("H", (rng.randrange(50257) for _ in range(n)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(tokens.tobytes())
EOF
SHAPE_B=${SHAPE_B:-"--layers 12 --dim 768 --heads 12 --context 64 --batch 4 --vocab 50257"}" --data $OUT/tokens_v50257.bin"
SHAPE_A=${SHAPE_A:-"--layers 12 --dim 384 --heads 6 --context 256 --batch 8"}
SHAPE_M=${SHAPE_M:-"--layers 24 --dim 1024 --heads 16 --context 256 --batch 4 --vocab 50257"}" --data $OUT/tokens_v50257.bin"
LIMIT_M=${LIMIT_M:-2GiB}

run() { # name steps flags...: a refused run leaves its message in name.err
    n=$1 s=$2
    shift 2
    "$REMAT" train --threads "$THREADS" --steps "$s" --val-fraction 0 --quiet $FUSED --report "$OUT/$n.json" "$@" \
        >"$OUT/$n.out" 2>"$OUT/$n.err" || [ -n "${MAY_FAIL-}" ]
}
# The least --memory-limit the CLI names when it refuses 1 MiB (without --scratch).
least_limit() {
    n=$1
    shift
    MAY_FAIL=1 run "$n" 1 "$@" --memory-limit 15MiB
    sed -n 's/.*the least --memory-limit that works is \([0-9.]*\)MiB.*/\1/p' "$OUT/$n.err" | head -1
}
mib_of() { awk -v m="$1" -v f="$2" 'BEGIN { printf "%dMiB\n", m * f }'; }

case " $TARGETS " in *" B "*)
    LB=$(least_limit least_B $SHAPE_B)
    LIMIT_B=$(mib_of "$LB" 0.5)
    echo "B: least --memory-limit without --scratch $LB MiB; paging at $LIMIT_B" >&2
    for r in $(seq 1 "$REPS"); do
        run "B_none_$r" "$STEPS" $SHAPE_B
        run "B_paged_$r" "$STEPS" $SHAPE_B --memory-limit "$LIMIT_B" --scratch "$SCRATCH"
        echo "B round $r: none $(field "$OUT/B_none_$r.json" step_ms_median) ms, paged $(field "$OUT/B_paged_$r.json" step_ms_median) ms" >&2
    done
    echo "$LB $LIMIT_B" > "$OUT/B_limits"
    ;;
esac

case " $TARGETS " in *" A "*)
    run A_probe "$STEPS" $SHAPE_A
    P=$(field "$OUT/A_probe.json" max_rss_bytes)
    LIMIT_A=$(awk -v p="$P" 'BEGIN { printf "%d\n", p * 0.4 }')
    echo "A: store-all peak RSS $P bytes; limit $LIMIT_A" >&2
    for r in $(seq 1 "$REPS"); do
        run "A_none_$r" "$STEPS" $SHAPE_A
        run "A_paged_$r" "$STEPS" $SHAPE_A --memory-limit "$LIMIT_A" --scratch "$SCRATCH"
        MAY_FAIL=1 run "A_recompute_$r" "$STEPS" $SHAPE_A --memory-limit "$LIMIT_A"
        rc=$([ -s "$OUT/A_recompute_$r.json" ] && echo "$(field "$OUT/A_recompute_$r.json" step_ms_median) ms" || echo refused)
        echo "A round $r: none $(field "$OUT/A_none_$r.json" step_ms_median) ms, paged $(field "$OUT/A_paged_$r.json" step_ms_median) ms, recompute-only $rc" >&2
    done
    echo "$P $LIMIT_A" > "$OUT/A_limits"
    ;;
esac

case " $TARGETS " in *" M "*)
    for r in $(seq 1 "$REPS"); do
        run "M_none_$r" "$STEPS_M" $SHAPE_M
        run "M_paged_$r" "$STEPS_M" $SHAPE_M --memory-limit "$LIMIT_M" --scratch "$SCRATCH"
        echo "M round $r: none $(field "$OUT/M_none_$r.json" step_ms_median) ms, paged $(field "$OUT/M_paged_$r.json" step_ms_median) ms" >&2
    done
    H=$((STEPS_M / 2 > 0 ? STEPS_M / 2 : 1))
    run M_full "$STEPS_M" $SHAPE_M --memory-limit "$LIMIT_M" --scratch "$SCRATCH" --save "$OUT/M_full.st"
    run M_half "$H" $SHAPE_M --memory-limit "$LIMIT_M" --scratch "$SCRATCH" --save "$OUT/M_half.st"
    "$REMAT" train --resume "$OUT/M_half.st" --steps "$STEPS_M" --threads "$THREADS" --quiet $FUSED --memory-limit "$LIMIT_M" \
        --scratch "$SCRATCH" --report "$OUT/M_resumed.json" --save "$OUT/M_resumed.st" >"$OUT/M_resumed.out" 2>"$OUT/M_resumed.err"
    [ "$(sha256sum < "$OUT/M_full.st")" = "$(sha256sum < "$OUT/M_resumed.st")" ] && echo same > "$OUT/M_resume" || echo differ > "$OUT/M_resume"
    rm -f "$OUT"/M_*.st
    echo "$LIMIT_M $("$PYTHON" -c 'import sys; u = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}; s = sys.argv[1]
print(int(float(s[:-3]) * u[s[-3:]]) if s[-3:] in u else int(s))' "$LIMIT_M")" > "$OUT/M_limits"
    ;;
esac

"$PYTHON" - "$OUT" "$REPS" "$TARGETS" <<'PY'
import json, os, statistics, sys
out, reps, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
M = 2**20
def load(name):
    p = f"{out}/{name}.json"
    return json.load(open(p)) if os.path.exists(p) and os.path.getsize(p) else None
def col(name, key):
    rs = [load(f"{name}_{r}") for r in range(1, reps + 1)]
    xs = [float(x[key]) for x in rs if x]
    return xs
def med(name, key="step_ms_median"):
    xs = col(name, key)
    return statistics.median(xs) if xs else float("nan")
def worst_rss(name):
    xs = col(name, "max_rss_bytes")
    return max(xs) if xs else float("nan")
def predicted(name, key="step_ms_predicted"):
    # the report's step_ms_predicted: the plan's step (the paging timeline's
    # rm_step, every instruction at its profiled time, and the waits) plus the
    # time outside rm_step as measured; step_ms_predicted_waits: the measured
    # step with only the recomputation and the waits replaced by predictions
    xs = [float(x[key]) for x in (load(f"{name}_{r}") for r in range(1, reps + 1)) if x and x.get(key) is not None]
    return statistics.median(xs) if xs else float("nan")
def io(name):
    x = load(f"{name}_1")
    return x and (x.get("io_ms"), x.get("io_wait_ms"), x.get("paged_out_bytes", 0) / M, x.get("paged_in_bytes", 0) / M,
                  x.get("paged_values"), x.get("paged_moments"), x.get("paged_params"))
def line(label, name, base, limit=None):
    ms = med(name)
    rss = worst_rss(name)
    pr, pw = predicted(name), predicted(name, "step_ms_predicted_waits")
    under = "" if limit is None else (" under" if rss <= limit else " OVER")
    print(f"  {label:28s} {ms:9.1f} ms  x{ms / base:5.3f}  peak RSS {rss / M:8.1f} MiB{under}"
          + (f"  predicted {pr:9.1f} ms ({100 * (pr / ms - 1):+.1f}%; waits only {100 * (pw / ms - 1):+.1f}%)"
             if pr == pr and "paged" in name else ""))
    i = io(name) if "paged" in name else None
    if i:
        print(f"  {'':28s} I/O {i[0]:.0f} ms, waited {i[1]:.0f} ms a step; {i[2]:.0f} MiB out, {i[3]:.0f} MiB in; "
              f"paged: {i[4]} activations, moments of {i[5]}, {i[6]} parameters")
if "B" in targets and os.path.exists(f"{out}/B_limits"):
    lb, lim = open(f"{out}/B_limits").read().split()
    limit = float(lim.rstrip("MiB")) * M
    base = med("B_none")
    print(f"B  GPT-2 124M: least --memory-limit without --scratch {lb} MiB; --memory-limit {lim} with --scratch")
    line("unconstrained (fused)", "B_none", base)
    line(f"--memory-limit {lim} --scratch", "B_paged", base, limit)
    print(f"   target: step <= 1.6x: {'met' if med('B_paged') / base <= 1.6 else 'MISSED'}")
if "A" in targets and os.path.exists(f"{out}/A_limits"):
    p, lim = open(f"{out}/A_limits").read().split()
    limit = float(lim)
    base = med("A_none")
    print(f"A  shape A: store-all peak RSS {float(p) / M:.1f} MiB; --memory-limit {limit / M:.1f} MiB (0.4x)")
    line("store-all (fused)", "A_none", base)
    line("limit with --scratch", "A_paged", base, limit)
    if col("A_recompute", "step_ms_median"):
        line("limit, recompute only", "A_recompute", base, limit)
        faster = med("A_paged") < med("A_recompute")
    else:
        print("  limit, recompute only: refused (nothing fits without --scratch)")
        faster = True
    print(f"   targets: step <= 1.10x store-all: {'met' if med('A_paged') / base <= 1.10 else 'MISSED'}; "
          f"faster than recompute only: {'met' if faster else 'MISSED'}")
if "M" in targets:
    base = med("M_none")
    lim, lim_bytes = open(f"{out}/M_limits").read().split()
    print(f"M  GPT-2 medium: --memory-limit {lim} with --scratch")
    line("unconstrained (fused)", "M_none", base)
    line(f"--memory-limit {lim} --scratch", "M_paged", base, float(lim_bytes))
    res = open(f"{out}/M_resume").read().strip() if os.path.exists(f"{out}/M_resume") else "not run"
    r = load("M_resumed")
    if r:
        print(f"  resumed run (--resume, under the limit): peak RSS {r['max_rss_bytes'] / M:.1f} MiB")
    print(f"   targets: step <= 1.25x: {'met' if med('M_paged') / base <= 1.25 else 'MISSED'}; resume: files {res}")
PY
