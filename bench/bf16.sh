#!/bin/sh
# bench/bf16.sh: issue 35's targets for --precision bf16 (docs/PERFORMANCE.md,
# "bf16 mixed precision"), as one command on any host:
#
#   sh bench/bf16.sh [OUT]          (a shared machine: /work/heavy sh bench/bf16.sh)
#
# It builds remat (make), then, with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# unset for every run of every side and THREADS (2) threads:
#  0. the host: lscpu's model name and flags, the bf16 path remat takes
#     (onednn, sgemm, avx512_bf16, portable) and why; test_bf16 and
#     test_bf16_train on it (every path against a double product, and the
#     guarantees); it stops if they fail;
#  1. bench/gemm_peak.c on the models' shapes: fp32 (cblas_sgemm) and bf16
#     on every path this host has: the GEMM peaks; bench/bf16_linear.c: a
#     linear layer's forward alone, bf16 against fp32 (OUT/bf16_linear.txt);
#  2. shape A (12 x 384, context 256, batch 8, vocab 256, built-in corpus)
#     and the GPT-2 shape (12 x 768, context 64, batch 4, vocab 50257,
#     random ids), REPS (3) rounds alternating remat fp32, remat bf16, remat
#     bf16 on the AVX2 path (AVX2=1: ONEDNN_MAX_CPU_ISA=AVX2, so oneDNN
#     refuses bf16 as on an AVX2 host and the sgemm path runs: forced, on
#     this processor; not on an AVX2 host, where it runs anyway and the
#     report applies the AVX2 targets to remat bf16) and PyTorch 2.x (TORCH_PYTHON) with bf16 autocast and
#     F.scaled_dot_product_attention (bench/bench_torch.py); each run 1 +
#     STEPS (5) steps, its median step; the median over rounds; and shape A
#     under one memory budget, half of fp32's store-all (remat fp32, bf16,
#     bf16 on the AVX2 path), where bf16 keeps more and recomputes less;
#  3. the exact counts (plan, no timing); then bench/bf16_pair.c: 10 pairs
#     of steps (forward and backward) of each shape, fp32 and bf16 in one
#     process, alternating (OUT/bf16_pair_A.txt, _B.txt);
#  4. LORA=1 (default): the SmolLM2-135M-shape LoRA fine-tune (a random bf16
#     folder, r 16 on the seven projections, batch 4, context 512): remat
#     --precision bf16 --memory-limit 1GiB against PEFT with bf16 autocast
#     and gradient checkpointing (bench/peft_lora.py), REPS rounds alternating.
# Prints one table, each target with its figure and met / MISSED; the raw
# JSON stays in OUT (default a new /tmp folder). Environment: THREADS REPS
# STEPS LORA AVX2 BUILD (build), TORCH_PYTHON (python with torch 2.x,
# transformers and peft; /opt/torch/.venv/bin/python, else
# /work/venv/torch2/bin/python). SMOKE=1: tiny shapes, one round of one
# step, to check the script itself (its figures mean nothing).
set -eu
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
BUILD=${BUILD:-build}
REMAT=$BUILD/remat
THREADS=${THREADS:-2} REPS=${REPS:-3} STEPS=${STEPS:-5} LORA=${LORA:-1} AVX2=${AVX2:-1}
TP=${TORCH_PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$TP" ] || TP=/work/venv/torch2/bin/python
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/remat_bf16.XXXXXX")}
mkdir -p "$OUT"
say() { echo "bf16: $*" >&2; }
make -s -j"$THREADS" "$REMAT" "$BUILD/tests/test_bf16" "$BUILD/tests/test_bf16_train" "$BUILD/bench/gemm_peak" \
    "$BUILD/bench/bf16_linear" "$BUILD/bench/bf16_pair" >&2
"$TP" -c 'import torch; assert int(torch.__version__.split(".")[0]) >= 2' || { say "$TP has no torch 2.x"; exit 1; }

# 0. the host, and the paths checked on it
lscpu | sed -n 's/^Model name: *//p' | head -1 >"$OUT/cpu.txt"
grep -o -w 'avx512_bf16\|amx_bf16\|avx512f\|avx2' /proc/cpuinfo | sort -u | tr '\n' ' ' >>"$OUT/cpu.txt"
"$BUILD/tests/test_bf16" >"$OUT/test_bf16.txt" 2>&1 || { cat "$OUT/test_bf16.txt"; say "test_bf16 FAILED here"; exit 1; }
"$BUILD/tests/test_bf16_train" >"$OUT/test_bf16_train.txt" 2>&1 ||
    { tail -20 "$OUT/test_bf16_train.txt"; say "test_bf16_train FAILED here"; exit 1; }
# an AVX2 host takes the sgemm path by itself: nothing to force (the report applies the AVX2 targets)
# and torch's bf16 autocast there is emulated (a minute a step for shape A on a Zen 3): one round, one step
ONAVX2=0
if grep -q '^bf16 kernel: sgemm' "$OUT/test_bf16.txt"; then AVX2=0 ONAVX2=1; say "no avx512_bf16 here: the sgemm path"; fi

# 1. GEMM peaks on the models' shapes
GS=""
A="--layers 12 --dim 384 --heads 6 --context 256 --batch 8 --vocab 256"
B="--layers 12 --dim 768 --heads 12 --context 64 --batch 4 --vocab 50257"
if [ "${SMOKE:-0}" = 1 ]; then
    A="--layers 4 --dim 128 --heads 4 --context 64 --batch 8 --vocab 256" B="--layers 2 --dim 64 --heads 4 --context 16 --batch 2 --vocab 50257"
    GS="128x192x64:NT" REPS=1 STEPS=1
fi
say "GEMM peaks"
# shellcheck disable=SC2086
"$BUILD/bench/gemm_peak" "$THREADS" $GS >"$OUT/gemm_fp32.json"
for p in onednn sgemm avx512_bf16 portable; do
    # shellcheck disable=SC2086
    "$BUILD/bench/gemm_peak" "$THREADS" "bf16-$p" $GS >"$OUT/gemm_bf16_$p.json" 2>/dev/null || rm -f "$OUT/gemm_bf16_$p.json"
done
# a linear layer's forward alone, bf16 (the host's path) against fp32, alternating
if [ "${SMOKE:-0}" = 1 ]; then lin="1 1"; else lin=""; fi
# shellcheck disable=SC2086
"$BUILD/bench/bf16_linear" "$THREADS" $lin >"$OUT/bf16_linear.txt"

# 2. the steps, alternating
"$TP" - "$OUT/tokens_v50257.bin" <<'EOF'
import struct, random, sys
random.seed(1)
n = 300000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
EOF
# 3. exact counts (plan, no timing); the budget of the H runs below
for p in fp32 bf16; do "$REMAT" plan $A --memory-budget 100% --precision "$p" >"$OUT/plan_all_$p.txt"; done
half=$(sed -n 's/.*(store-all \([0-9.]*\) MiB.*/\1/p' "$OUT/plan_all_fp32.txt" | awk '{ printf "%.0f", $1 * 1048576 / 2 }')
for p in fp32 bf16; do "$REMAT" plan $A --memory-budget "$half" --precision "$p" >"$OUT/plan_half_$p.txt"; done

remat() { # shape (A, B, or H: A at half of fp32's store-all) precision tag round [env...]
    s=$1 p=$2 tag=$3 i=$4
    shift 4
    case $s in A) sh=$A ;; H) sh="$A --memory-budget $half" ;; *) sh="$B --data $OUT/tokens_v50257.bin" ;; esac
    # shellcheck disable=SC2086
    env "$@" "$REMAT" train $sh --steps $((STEPS + 1)) --threads "$THREADS" --precision "$p" --quiet \
        --report "$OUT/remat_${s}_$tag.$i.json" >/dev/null
}
torch() { # shape round
    if [ "$1" = A ]; then sh=$A; else sh=$B; fi
    st=$STEPS
    if [ "$ONAVX2" = 1 ]; then
        [ "$2" = 0 ] || { cp "$OUT/torch_${1}_bf16.0.json" "$OUT/torch_${1}_bf16.$2.json"; return; }
        st=1
    fi
    # shellcheck disable=SC2086
    "$TP" bench/bench_torch.py $sh --threads "$THREADS" --warmup 1 --steps "$st" --autocast bf16 --sdpa \
        --out "$OUT/torch_${1}_bf16.$2.json" >/dev/null
}
i=0
while [ "$i" -lt "$REPS" ]; do
    for s in A B; do
        say "round $i, shape $s"
        remat "$s" fp32 fp32 "$i"
        remat "$s" bf16 bf16 "$i"
        if [ "$AVX2" = 1 ]; then remat "$s" bf16 avx2 "$i" ONEDNN_MAX_CPU_ISA=AVX2; fi
        torch "$s" "$i"
    done
    say "round $i, shape A at $half bytes"
    remat H fp32 fp32 "$i"
    remat H bf16 bf16 "$i"
    if [ "$AVX2" = 1 ]; then remat H bf16 avx2 "$i" ONEDNN_MAX_CPU_ISA=AVX2; fi
    i=$((i + 1))
done

# 3b. the two shapes again, fp32 and bf16 step by step in one process (steadier on a shared machine)
for s in A B; do
    if [ "${SMOKE:-0}" = 1 ]; then echo "(SMOKE: not run)" >"$OUT/bf16_pair_$s.txt"; continue; fi
    say "pairs of steps, shape $s"
    "$BUILD/bench/bf16_pair" "$THREADS" "$s" 10 >"$OUT/bf16_pair_$s.txt"
done

# 4. the LoRA fine-tune
if [ "$LORA" = 1 ] && [ "${SMOKE:-0}" != 1 ]; then
    "$TP" -c "
import sys; sys.path.insert(0, 'tests')
import hf_llama as H
H.write_random_folder('$OUT/smollm2', dict(layers=30, dim=576, heads=9, kv_heads=3, ffn=1536, vocab=49152, tie=True,
                      eps=1e-5, theta=10000.0), 1, 'BF16')"
    "$TP" -c "
import struct, random
random.seed(5)
n = 200000
with open('$OUT/tokens_v49152.bin', 'wb') as f:
    f.write(struct.pack('<3i', 20240520, 1, n) + bytes(1024 - 12))
    f.write(struct.pack('<%dH' % n, *[random.randrange(49152) for _ in range(n)]))"
    i=0
    while [ "$i" -lt "$REPS" ]; do
        say "LoRA round $i"
        "$REMAT" train --init "$OUT/smollm2" --data "$OUT/tokens_v49152.bin" --context 512 --batch 4 --lora 16 \
            --lora-alpha 32 --frozen-dtype bf16 --threads "$THREADS" --steps 4 --val-fraction 0 --dropout 0 \
            --grad-clip 0 --lr 1e-4 --quiet --precision bf16 --memory-limit 1GiB --report "$OUT/lora_remat.$i.json" >/dev/null
        # (not on an AVX2 host: PEFT's emulated bf16 takes minutes a step there, and the target is an
        # avx512_bf16 host's; remat's figure alone)
        [ "$ONAVX2" = 1 ] || "$TP" bench/peft_lora.py --model "$OUT/smollm2" --context 512 --batch 4 \
            --threads "$THREADS" --warmup 1 --steps 3 --autocast bf16 --checkpoint layers --out "$OUT/lora_peft.$i.json" >/dev/null
        i=$((i + 1))
    done
fi

"$TP" bench/bf16_report.py "$OUT" "$REPS" "$AVX2"
