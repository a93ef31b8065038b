#!/bin/sh
# bench/run.sh: remat against PyTorch, same models, same thread count.
#
#   sh bench/run.sh            (or `make bench`; `make` must have built remat)
#
# Two shapes (SHAPES="A B" by default):
#   A  GPT, --layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8
#      (21.5M parameters, 2048 tokens a step; remat trains on its built-in corpus)
#   B  GPT-2 124M, --layers 12 --dim 768 --heads 12 --context 64 --vocab 50257
#      --batch 4 (256 tokens a step; random token ids in an llm.c token file)
# Both sides: fp32, AdamW (0.9, 0.95, eps 1e-8, weight decay 0.1 on 2-D
# weights), gradient clipping 1.0, no dropout, no recomputation. The PyTorch
# side is bench/bench_torch.py (eager nanoGPT-style model, the same layout).
#
# For each shape the runs alternate: remat, torch, remat, torch, ... (REPS
# each), so that slow drifts of the machine hit both alike. A remat run is
# `remat train` for WARMUP+STEPS steps (its report's step_ms_median is the
# median over all of them: the warmup steps are in it, which moves a median
# by at most WARMUP places); a torch run is WARMUP untimed steps and STEPS
# timed ones. Before each run the script waits (up to QUIET_WAIT seconds)
# for the machine to be idle, and it records how many cores other processes
# kept busy during the run ("others" in the table). A run is clean when
# others <= cores - THREADS; the table warns about shapes with unclean runs.
#
# Printed at the end, per shape: the median over runs of each side's median
# step time, and the ratio remat/torch; peak RSS (getrusage maxrss; torch's
# includes ~230 MB of Python and torch libraries, shown apart); model
# FLOP/s and their share of the measured cblas_sgemm peak.
#   model FLOPs per step = 6 * (N - T*C) * B*T  +  12 * L * C * T * B*T
# (N parameters minus the position table, i.e. the matrix-multiply weights
# with the tied head counted once; 2 FLOPs per multiply-add, forward once and
# backward twice; the second term is the attention scores and their use,
# QK^T and PV, computed over all T x T pairs as both programs do.) The sgemm
# peak is bench/gemm_peak.c, built with the Makefile's OpenBLAS flags, run
# on the model's own matrix shapes at the same thread count: the best of
# those shapes for each model.
#
# Environment (defaults in brackets):
#   THREADS [all cores]  threads for both sides (remat --threads; torch
#                        set_num_threads and OPENBLAS_NUM_THREADS)
#   REPS [3] WARMUP [1] STEPS [10] SHAPES ["A B"] QUIET_WAIT [120 seconds]
#   OUT [a new /tmp/remat_bench.XXXXXX]  where the raw JSON results go
#   BUILD [build]  REMAT [$BUILD/remat]  PYTHON [/usr/bin/python3, with torch]
#   TABLE_ONLY [0]       1: run nothing, print the table of the results in OUT
#   BENCH_UNSET_OPENBLAS_ENV [0]  1: unset OPENBLAS_CORETYPE and
#                        OPENBLAS_L2_SIZE for every run of both sides (and for
#                        the sgemm peak); by default they are left as they are.
# Takes about 12 minutes with the defaults on 2 cores.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
cd "$root"
BUILD=${BUILD:-build}
REMAT=${REMAT:-$BUILD/remat}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
REPS=${REPS:-3}
WARMUP=${WARMUP:-1}
STEPS=${STEPS:-10}
SHAPES=${SHAPES:-A B}
QUIET_WAIT=${QUIET_WAIT:-120}
OUT=${OUT:-}
if [ -z "$OUT" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/remat_bench.XXXXXX"); fi
mkdir -p "$OUT"
if [ "${BENCH_UNSET_OPENBLAS_ENV:-0}" = 1 ]; then
    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
fi

say() { echo "bench: $*" >&2; }
die() { echo "bench: error: $*" >&2; exit 1; }

[ -x "$REMAT" ] || die "$REMAT not found: run make first (or set REMAT)"
"$PYTHON" -c 'import torch' >/dev/null 2>&1 || die "$PYTHON cannot import torch (set PYTHON to an interpreter with PyTorch)"
whole() { # whole NAME VALUE MIN
    case $2 in '' | *[!0-9]*) die "$1 must be a whole number, got '$2'" ;; esac
    [ "$2" -ge "$3" ] || die "$1 must be at least $3, got $2"
}
whole THREADS "$THREADS" 1
whole REPS "$REPS" 1
whole WARMUP "$WARMUP" 0
whole STEPS "$STEPS" 1
whole QUIET_WAIT "$QUIET_WAIT" 0

[ "${TABLE_ONLY:-0}" = 1 ] || say "results in $OUT; threads $THREADS, $REPS runs per side and shape, $WARMUP warmup + $STEPS timed steps"
[ "${TABLE_ONLY:-0}" = 1 ] || say "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE-<unset>} OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE-<unset>}"

# ---- the run wrapper (bench/measure.py): waits for an idle machine, runs, measures

measure() { # measure OUT_JSON LABEL CMD...
    m_out=$1 m_label=$2
    shift 2
    "$PYTHON" bench/measure.py "$m_out" "$QUIET_WAIT" "$m_label" -- "$@" || {
        say "$m_label failed; its output:"
        "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_tail"])' "$m_out" >&2 || true
        exit 1
    }
}

if [ "${TABLE_ONLY:-0}" != 1 ]; then
git rev-parse --short HEAD >"$OUT/remat_rev.txt" 2>/dev/null && ! git diff --quiet HEAD -- src cli include 2>/dev/null &&
    echo "(+ uncommitted changes in src, cli or include)" >>"$OUT/remat_rev.txt" || true
# ---- the sgemm peak ----------------------------------------------------------
CC=${CC:-cc}
ma=$($CC -print-multiarch 2>/dev/null || true)
pcdir=/usr/lib/$ma/openblas-openmp/pkgconfig
if [ -n "$ma" ] && [ -f "$pcdir/openblas.pc" ]; then # as the Makefile: prefer the OpenMP build
    PKG_CONFIG_PATH=$pcdir
    export PKG_CONFIG_PATH
fi
if pkg-config --exists openblas 2>/dev/null; then
    make -s build/bench/gemm_peak >/dev/null && cp build/bench/gemm_peak "$OUT/gemm_peak" # links libremat (bf16)
    # shellcheck disable=SC2016
    measure "$OUT/gemm_peak.run.json" "sgemm peak" sh -c '"$1" "$2" > "$3"' sh "$OUT/gemm_peak" "$THREADS" "$OUT/gemm_peak.json"
else
    say "no OpenBLAS (pkg-config openblas): no sgemm peak; the FLOP/s column stays without a percentage"
fi

# ---- data for shape B: random ids < 50257 in llm.c's token format --------------
case " $SHAPES " in *" B "*)
    "$PYTHON" - "$OUT/tokens_v50257.bin" <<'EOF'
import array, random, struct, sys
n = 1 << 17
rng = random.Random(20240520)
tokens = array.array("H", (rng.randrange(50257) for _ in range(n)))
if sys.byteorder != "little":
    tokens.byteswap()
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))  # magic, version, count
    f.write(tokens.tobytes())
EOF
    ;;
esac

# ---- the runs ------------------------------------------------------------------
total=$((WARMUP + STEPS))
for s in $SHAPES; do
    case $s in
    A) set -- --layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8; data= ;;
    B) set -- --layers 12 --dim 768 --heads 12 --context 64 --vocab 50257 --batch 4; data=$OUT/tokens_v50257.bin ;;
    *) die "unknown shape '$s' (A or B)" ;;
    esac
    i=1
    while [ "$i" -le "$REPS" ]; do
        if [ -n "$data" ]; then
            measure "$OUT/${s}_remat_$i.run.json" "$s remat $i/$REPS" "$REMAT" train "$@" --data "$data" \
                --steps "$total" --threads "$THREADS" --val-fraction 0 --quiet --report "$OUT/${s}_remat_$i.json"
        else
            measure "$OUT/${s}_remat_$i.run.json" "$s remat $i/$REPS" "$REMAT" train "$@" \
                --steps "$total" --threads "$THREADS" --val-fraction 0 --quiet --report "$OUT/${s}_remat_$i.json"
        fi
        measure "$OUT/${s}_torch_$i.run.json" "$s torch $i/$REPS" "$PYTHON" bench/bench_torch.py "$@" \
            --threads "$THREADS" --warmup "$WARMUP" --steps "$STEPS" --out "$OUT/${s}_torch_$i.json"
        i=$((i + 1))
    done
done

fi # TABLE_ONLY

# ---- the table -------------------------------------------------------------------
"$PYTHON" - "$OUT" "$THREADS" "$REPS" "$WARMUP" "$STEPS" "$SHAPES" <<'EOF'
import json, os, statistics, sys

out, threads, reps, warmup, steps, shapes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]), int(sys.argv[5]), sys.argv[6].split()
SHAPE = {"A": dict(L=12, C=384, H=6, T=256, V=256, B=8, name="GPT 12x384, T 256, V 256, B 8"),
         "B": dict(L=12, C=768, H=12, T=64, V=50257, B=4, name="GPT-2 124M, T 64, V 50257, B 4")}

def load(p):
    with open(p) as f:
        return json.load(f)

peak = {}
gp = os.path.join(out, "gemm_peak.json")
if os.path.exists(gp):
    g = load(gp)
    for s in SHAPE:
        vals = [x["gflops"] for x in g["shapes"] if x["what"].startswith(s + ":")]
        peak[s] = max(vals) if vals else g["peak_gflops"]

MiB = 1048576.0
summary = {"threads": threads, "reps": reps, "warmup": warmup, "steps": steps,
           "openblas_env": {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")},
           "sgemm_peak_gflops": peak, "shapes": {}}
def runs(s):  # the complete remat/torch pairs of a shape in OUT
    n = 0
    while all(os.path.exists(os.path.join(out, "%s_%s_%d%s" % (s, side, n + 1, ext)))
              for side in ("remat", "torch") for ext in (".json", ".run.json")):
        n += 1
    return n

shapes = [s for s in shapes if runs(s) > 0]
if not shapes:
    sys.exit("bench: no results in %s" % out)
first = load(os.path.join(out, "%s_torch_1.json" % shapes[0]))
threads, warmup, steps = first["threads"], first["warmup"], first["steps"]
summary.update(threads=threads, warmup=warmup, steps=steps, reps=None)
print()
print("remat vs PyTorch %s: %d threads each, %s alternating runs per side, %d warmup + %d timed steps" %
      (first["torch_version"], threads, "/".join(str(runs(s)) for s in shapes), warmup, steps))
rev = os.path.join(out, "remat_rev.txt")
if os.path.exists(rev):
    with open(rev) as f:
        print("remat at commit " + " ".join(f.read().split()))
    with open(rev) as f:
        summary["remat_rev"] = " ".join(f.read().split())
print("FLOPs/step = 6*(N - T*C)*B*T + 12*L*C*T*B*T; others = cores kept busy by other processes during a run")
for s in shapes:
    c = SHAPE[s]
    reps = runs(s)
    L, C, T, V, B = c["L"], c["C"], c["T"], c["V"], c["B"]
    n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    flops = 6 * (n - T * C) * B * T + 12 * L * C * T * B * T
    r = [load(os.path.join(out, "%s_remat_%d.json" % (s, i))) for i in range(1, reps + 1)]
    t = [load(os.path.join(out, "%s_torch_%d.json" % (s, i))) for i in range(1, reps + 1)]
    rr = [load(os.path.join(out, "%s_remat_%d.run.json" % (s, i))) for i in range(1, reps + 1)]
    tr = [load(os.path.join(out, "%s_torch_%d.run.json" % (s, i))) for i in range(1, reps + 1)]
    if t[0]["params"] != n or r[0]["param_bytes"] != 4 * n:
        print("warning: parameter counts differ: formula %d, torch %d, remat %d" %
              (n, t[0]["params"], r[0]["param_bytes"] // 4))
    rm = statistics.median(x["step_ms_median"] for x in r)
    tm = statistics.median(x["step_ms_median"] for x in t)
    rrss = statistics.median(x["max_rss_bytes"] for x in r)
    trss = statistics.median(x["peak_rss_bytes"] for x in t)
    tbase = statistics.median(x["base_rss_bytes"] for x in t)
    rg, tg = flops / (rm / 1e3) / 1e9, flops / (tm / 1e3) / 1e9
    pk = peak.get(s)
    oth_r = max(x["others_cores"] or 0 for x in rr)
    oth_t = max(x["others_cores"] or 0 for x in tr)
    print()
    print("shape %s: %s; %.1fM params, %d tokens/step, %.1f GFLOP/step" %
          (s, c["name"], n / 1e6, B * T, flops / 1e9))
    print("  %-28s %14s %14s %12s" % ("", "remat", "torch", "remat/torch"))
    print("  %-28s %14.1f %14.1f %12.2f" % ("step ms, median of runs", rm, tm, rm / tm))
    spare = (os.cpu_count() or 1) - threads  # cores others may use without slowing us down
    clean_r = [x["step_ms_median"] for x, m in zip(r, rr) if (m["others_cores"] or 0) <= spare + 0.1]
    clean_t = [x["step_ms_median"] for x, m in zip(t, tr) if (m["others_cores"] or 0) <= spare + 0.1]
    if clean_r and clean_t and (len(clean_r) < reps or len(clean_t) < reps):
        cr, ct = statistics.median(clean_r), statistics.median(clean_t)
        print("  %-28s %14.1f %14.1f %12.2f" % ("  median of clean runs", cr, ct, cr / ct))
    for i in range(reps):
        print("  %-28s %14s %14s" % ("  run %d (others, cores)" % (i + 1),
                                     "%.0f (%.2f)" % (r[i]["step_ms_median"], rr[i]["others_cores"] or 0),
                                     "%.0f (%.2f)" % (t[i]["step_ms_median"], tr[i]["others_cores"] or 0)))
    print("  %-28s %14.0f %14.0f %12.2f" % ("peak RSS MiB", rrss / MiB, trss / MiB, rrss / trss))
    print("  %-28s %14s %14.0f %12.2f" % ("  torch minus its base", "", (trss - tbase) / MiB,
                                          rrss / (trss - tbase)))
    print("  %-28s %14.1f %14.1f" % ("model GFLOP/s", rg, tg))
    if not r[0].get("blas", True):
        print("  note: this remat was built without OpenBLAS (portable GEMM); the peak is OpenBLAS's")
    if pk:
        print("  %-28s %13.1f%% %13.1f%%" % ("  of sgemm peak %.1f GFLOP/s" % pk, 100 * rg / pk, 100 * tg / pk))
    if max(oth_r, oth_t) > spare + 0.1:
        print("  warning: other processes kept up to %.2f cores busy during some runs (%d cores, %d"
              " threads each): prefer the median of clean runs, or rerun on an idle machine" %
              (max(oth_r, oth_t), os.cpu_count() or 1, threads))
    summary["shapes"][s] = {
        "config": c, "runs": reps, "params": n, "flops_per_step": flops,
        "remat_step_ms_median": rm, "torch_step_ms_median": tm, "ratio": rm / tm,
        "remat_step_ms_runs": [x["step_ms_median"] for x in r], "torch_step_ms_runs": [x["step_ms_median"] for x in t],
        "remat_peak_rss_bytes": rrss, "torch_peak_rss_bytes": trss, "torch_base_rss_bytes": tbase,
        "remat_gflops": rg, "torch_gflops": tg, "sgemm_peak_gflops": pk,
        "remat_pct_of_peak": 100 * rg / pk if pk else None, "torch_pct_of_peak": 100 * tg / pk if pk else None,
        "others_cores_max": {"remat": oth_r, "torch": oth_t},
        "clean_runs": {"remat": len(clean_r), "torch": len(clean_t)},
        "step_ms_median_of_clean_runs": {"remat": statistics.median(clean_r) if clean_r else None,
                                         "torch": statistics.median(clean_t) if clean_t else None}}
with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
print()
print("raw results: %s (summary.json, *_remat_*.json, *_torch_*.json, gemm_peak.json)" % out)
EOF
