#!/bin/sh
# mpi_scaling.sh: data-parallel scaling on one machine (docs/SCALING.md):
# P=1 and P=2 ranks, one thread each, on the GPT shape A of
# docs/PERFORMANCE.md (global batch 8: 8 rows at P=1, 4 per rank at P=2),
# and P=2 with --shard-optimizer and with --no-overlap. Prints tokens/s,
# scaling efficiency (tokens/s at P=2 over twice P=1), the per-rank bytes
# of parameters, gradients, optimizer state and activations, and the time
# a step waited for its gradients after the backward.
# STEPS (default 4; the first step is in the median too) and SHAPE override.
# Needs remat built with MPI (make) and mpirun.
set -eu
R=${R:-build/remat}
STEPS=${STEPS:-4}
SHAPE=${SHAPE:-"--layers 12 --dim 384 --heads 6 --context 256 --vocab 256 --batch 8"}
MPI="mpirun --allow-run-as-root --oversubscribe --mca btl self,vader"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1"; }

run() { # NAME P FLAGS
    $MPI -np "$2" "$R" train $SHAPE --threads 1 --steps "$STEPS" --val-fraction 0 --quiet $3 --report "$out/$1.json" >/dev/null
}
run p1 1 ""
run p2 2 ""
run p2z 2 "--shard-optimizer"
run p2b 2 "--no-overlap"

printf "%-24s %9s %9s %8s %8s %8s %8s %8s\n" run tok/s ms/step params grads optim act comm_ms
for n in p1 p2 p2z p2b; do
    f=$out/$n.json
    case $n in p1) name="P=1";; p2) name="P=2";; p2z) name="P=2 --shard-optimizer";; *) name="P=2 --no-overlap";; esac
    awk -v n="$name" -v t="$(field "$f" tokens_per_s)" -v ms="$(field "$f" step_ms_median)" \
        -v p="$(field "$f" param_bytes)" -v g="$(field "$f" grad_bytes)" -v o="$(field "$f" optimizer_bytes)" \
        -v a="$(field "$f" activation_bytes_measured)" -v c="$(field "$f" comm_wait_ms)" \
        'BEGIN { m = 1048576; printf "%-24s %9.0f %9.1f %8.1f %8.1f %8.1f %8.1f %8.1f\n", n, t, ms, p/m, g/m, o/m, a/m, c }'
done
echo "(bytes per rank in MiB; comm_ms: the mean wait per step for the gradients after the backward)"
awk -v a="$(field "$out/p1.json" tokens_per_s)" -v b="$(field "$out/p2.json" tokens_per_s)" \
    'BEGIN { printf "scaling efficiency at P=2: %.2f (tokens/s at P=2 over twice P=1)\n", b / (2 * a) }'
