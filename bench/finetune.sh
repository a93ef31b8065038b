#!/bin/sh
# bench/finetune.sh: what freezing and LoRA save in one training step of
# the same llama: a full fine-tune, the first half of the layers and the
# embeddings frozen (--freeze), and LoRA r RANK on all seven projections
# with everything else frozen (--lora). REPS runs of each, alternating
# (full, freeze, lora, full, ...); medians of step time and peak RSS, and
# rm_plan's FLOPs per step (exact, not timed). Not a test: issue 21's
# target is LoRA's step <= 0.75x the FLOPs of a full fine-tune's.
#
#   sh bench/finetune.sh          (`make` must have built remat)
#   LAYERS=8 DIM=384 HEADS=6 CONTEXT=256 BATCH=4 RANK=16 THREADS=2 STEPS=8 REPS=3 (the defaults)
#
# All three: fp32, AdamW, no dropout, no recomputation, the built-in corpus;
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset. step_ms_median is over the
# run's steps (its report). The load average at each run is printed: on a
# shared machine quote medians and ratios, and say so.
set -eu
cd "$(dirname "$0")/.."
. bench/lib.sh
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
L=${LAYERS:-8} C=${DIM:-384} H=${HEADS:-6} T=${CONTEXT:-256} B=${BATCH:-4} RANK=${RANK:-16}
N=${THREADS:-2} S=${STEPS:-8} R=${REPS:-3}
half=$((L / 2 - 1))
FROZEN="model.embed_tokens"
i=0
while [ "$i" -le "$half" ]; do FROZEN="$FROZEN,model.layers.$i"; i=$((i + 1)); done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
MODEL="--model llama --layers $L --dim $C --heads $H --context $T --batch $B --threads $N --steps $S --dropout 0 --quiet"
i=0
while [ "$i" -lt "$R" ]; do
    for kind in full freeze lora; do
        case $kind in
        full) extra="" ;;
        freeze) extra="--freeze $FROZEN" ;;
        lora) extra="--lora $RANK --lora-alpha $((2 * RANK))" ;;
        esac
        # shellcheck disable=SC2086
        "$REMAT" train $MODEL $extra --report "$out/$kind.$i.json"
        echo "finetune: $kind run $i done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    done
    i=$((i + 1))
done
"$PYTHON" - "$out" "$R" <<'PY'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
rows = {}
for kind in ("full", "freeze", "lora"):
    r = [json.load(open("%s/%s.%d.json" % (out, kind, i))) for i in range(reps)]
    rows[kind] = dict(ms=statistics.median(x["step_ms_median"] for x in r),
                      rss=statistics.median(x["max_rss_bytes"] for x in r) / 2**20,
                      gflop=(r[0]["forward_flops"] + r[0]["backward_flops"] + r[0]["recompute_flops"]) / 1e9,
                      train=r[0]["trainable_params"], params=r[0]["params"],
                      state=(r[0]["grad_bytes"] + r[0]["optimizer_bytes"]) / 2**20)
f = rows["full"]
print("%-7s %12s %10s %10s %14s %10s %10s" % ("", "trainable", "GFLOP", "x full", "grads+moments", "step ms", "peak RSS"))
for k, v in rows.items():
    print("%-7s %12d %10.2f %10.3f %11.1f MiB %10.1f %6.0f MiB" %
          (k, v["train"], v["gflop"], v["gflop"] / f["gflop"], v["state"], v["ms"], v["rss"]))
print("step time x full: freeze %.3f, lora %.3f; peak RSS x full: freeze %.3f, lora %.3f" %
      (rows["freeze"]["ms"] / f["ms"], rows["lora"]["ms"] / f["ms"], rows["freeze"]["rss"] / f["rss"],
       rows["lora"]["rss"] / f["rss"]))
PY
