#!/bin/sh
# bench/llama.sh: `remat train --model llama` against the same model in
# PyTorch (bench/bench_torch.py --model llama), same shape and threads, REPS
# runs each side alternating (remat, torch, remat, ...), medians and ratios.
# Not a test: issue 11's target is step time <= 0.5x PyTorch's and peak RSS
# <= 0.6x.
#
#   sh bench/llama.sh             (`make` must have built remat)
#   LAYERS=12 DIM=384 HEADS=6 CONTEXT=256 BATCH=8 THREADS=2 WARMUP=2 STEPS=10 REPS=3 (the defaults)
#
# Both sides: fp32, AdamW (0.9, 0.95, eps 1e-8, decay 0.1 on 2-D weights),
# clipping 1.0, no dropout, no recomputation. remat trains on its built-in
# corpus, torch on random ids (the data does not change the arithmetic).
# remat's step_ms_median is over all WARMUP+STEPS steps (its report); torch's
# over the STEPS timed ones. Peak RSS: getrusage maxrss of each process;
# torch's includes ~230 MB of Python and torch libraries (base_rss_bytes).
# The load average at each run is printed: timings on a shared machine are
# noisy, say so when quoting them.
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
L=${LAYERS:-12} C=${DIM:-384} H=${HEADS:-6} T=${CONTEXT:-256} B=${BATCH:-8}
N=${THREADS:-2} W=${WARMUP:-2} S=${STEPS:-10}
R=${REPS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
i=0
while [ "$i" -lt "$R" ]; do
    "$BUILD/remat" train --model llama --layers "$L" --dim "$C" --heads "$H" --context "$T" --batch "$B" \
        --threads "$N" --steps $((W + S)) --dropout 0 --quiet --report "$out/remat.$i.json"
    echo "llama: remat run $i done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    "$PYTHON" "$(dirname "$0")/bench_torch.py" --model llama --layers "$L" --dim "$C" --heads "$H" --context "$T" \
        --batch "$B" --threads "$N" --warmup "$W" --steps "$S" --out "$out/torch.$i.json" >/dev/null
    echo "llama: torch run $i done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    i=$((i + 1))
done
"$PYTHON" - "$out" "$R" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
r = [json.load(open("%s/remat.%d.json" % (out, i))) for i in range(reps)]
t = [json.load(open("%s/torch.%d.json" % (out, i))) for i in range(reps)]
med = lambda xs: statistics.median(xs)
rs, ts = [x["step_ms_median"] for x in r], [x["step_ms_median"] for x in t]
rr, tr = med([x["max_rss_bytes"] for x in r]), med([x["peak_rss_bytes"] for x in t])
print("llama %s, %d threads, %d runs each side" % (t[0]["shape"], r[0]["threads"], reps))
print("step ms, per run: remat %s  torch %s" % (" ".join("%.1f" % v for v in rs), " ".join("%.1f" % v for v in ts)))
print("step ms (median): remat %.1f  torch %.1f  ratio %.2f (target <= 0.5)" % (med(rs), med(ts), med(rs) / med(ts)))
print("peak RSS MiB:     remat %.1f  torch %.1f  ratio %.2f (target <= 0.6); torch without its libraries %.1f"
      % (rr / 2**20, tr / 2**20, rr / tr, (tr - med([x["base_rss_bytes"] for x in t])) / 2**20))
PY
