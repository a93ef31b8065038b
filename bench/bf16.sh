#!/bin/sh
# bench/bf16.sh: issue 29's targets for --precision bf16, as one command on a
# host whose processor has AVX512-BF16 (docs/PERFORMANCE.md, "bf16"):
#
#   TORCH_PYTHON=/opt/torch/.venv/bin/python sh bench/bf16.sh [OUT]
#
# (on a shared machine under flock -x /work/notes/suite.lock). It builds
# remat (make), then, with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset for
# every run of every side and THREADS (2) threads:
#  0. the host: lscpu's model name and bf16 flags; test_bf16 and
#     test_bf16_train on it (the AVX512-BF16 micro-kernel against a double
#     product, and the guarantees), and which kernel runs;
#  1. bench/gemm_peak.c in fp32 (cblas_sgemm) and bf16 (rm_gemm_bf16) on the
#     models' shapes: the bf16 GEMM peak;
#  2. shape A (12 x 384, context 256, batch 8, vocab 256, built-in corpus)
#     and the GPT-2 shape (12 x 768, context 64, batch 4, vocab 50257,
#     random ids), REPS (3) rounds alternating remat fp32, remat bf16 and
#     PyTorch 2.x (TORCH_PYTHON) with bf16 autocast and
#     F.scaled_dot_product_attention (bench/bench_torch.py --autocast bf16
#     --sdpa); each run 1 + STEPS (10) steps, its median step; the median
#     over rounds. Targets: shape A bf16 <= 0.6x remat fp32 and <= 0.85x
#     torch bf16; GPT-2 shape bf16 <= 0.7x remat fp32; model FLOP/s (as
#     bench/run.sh counts them) >= 0.8x the bf16 GEMM peak;
#  3. the exact counts (plan, no timing): store-all activation bytes bf16 /
#     fp32 <= 0.6, and at half of fp32's store-all the recomputed FLOPs bf16
#     / fp32 <= 0.3;
#  4. with LORA=1: the SmolLM2-135M-shape LoRA fine-tune (a random bf16
#     folder, r 16 on the seven projections, batch 4, context 512): remat
#     --precision bf16 --memory-limit 1GiB against PEFT with bf16 autocast
#     and gradient checkpointing (bench/peft_lora.py), REPS rounds
#     alternating; target remat <= 0.7x PEFT's step.
# Prints one table; the raw JSON stays in OUT (default a new /tmp folder).
# Environment: THREADS (2) REPS (3) STEPS (10) TORCH_PYTHON (python with
# torch 2.x; /opt/torch/.venv/bin/python, else /work/venv/torch2/bin/python)
# LORA (0) BUILD (build). SMOKE=1: tiny shapes, one round of one step,
# to check the script itself anywhere (its figures mean nothing).
set -eu
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
BUILD=${BUILD:-build}
REMAT=$BUILD/remat
THREADS=${THREADS:-2} REPS=${REPS:-3} STEPS=${STEPS:-10} LORA=${LORA:-0}
TP=${TORCH_PYTHON:-/opt/torch/.venv/bin/python}
[ -x "$TP" ] || TP=/work/venv/torch2/bin/python
OUT=${1:-$(mktemp -d "${TMPDIR:-/tmp}/remat_bf16.XXXXXX")}
mkdir -p "$OUT"
say() { echo "bf16: $*" >&2; }
make -s -j"$THREADS" "$REMAT" "$BUILD/tests/test_bf16" "$BUILD/tests/test_bf16_train" "$BUILD/bench/gemm_peak" >&2
"$TP" -c 'import torch; assert int(torch.__version__.split(".")[0]) >= 2' || { say "$TP has no torch 2.x"; exit 1; }

# 0. the host, and the kernel checked on it
lscpu | sed -n 's/^Model name: *//p' | head -1 >"$OUT/cpu.txt"
grep -o -w 'avx512_bf16\|amx_bf16\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ' >>"$OUT/cpu.txt"
"$BUILD/tests/test_bf16" >"$OUT/test_bf16.txt" 2>&1 || { cat "$OUT/test_bf16.txt"; say "test_bf16 FAILED on this host"; exit 1; }
BUILD=$BUILD "$BUILD/tests/test_bf16_train" >"$OUT/test_bf16_train.txt" 2>&1 ||
    { tail -20 "$OUT/test_bf16_train.txt"; say "test_bf16_train FAILED on this host"; exit 1; }

# 1. GEMM peaks on the models' shapes
GS=""
A="--layers 12 --dim 384 --heads 6 --context 256 --batch 8 --vocab 256"
B="--layers 12 --dim 768 --heads 12 --context 64 --batch 4 --vocab 50257"
if [ "${SMOKE:-0}" = 1 ]; then
    A="--layers 4 --dim 128 --heads 4 --context 64 --batch 8 --vocab 256" B="--layers 2 --dim 64 --heads 4 --context 16 --batch 2 --vocab 50257"
    GS="128x192x64:NT" REPS=1 STEPS=1
fi
"$BUILD/bench/gemm_peak" "$THREADS" $GS >"$OUT/gemm_fp32.json"
"$BUILD/bench/gemm_peak" "$THREADS" bf16 $GS >"$OUT/gemm_bf16.json"

# 2. the steps, alternating
"$TP" - "$OUT/tokens_v50257.bin" <<'EOF'
import struct, random, sys
random.seed(1)
n = 300000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<3i", 20240520, 1, n) + bytes(1024 - 12))
    f.write(struct.pack("<%dH" % n, *[random.randrange(50257) for _ in range(n)]))
EOF
remat() { # shape precision round
    if [ "$1" = A ]; then set -- "$@" $A; else set -- "$@" $B --data "$OUT/tokens_v50257.bin"; fi
    s=$1 p=$2 i=$3
    shift 3
    "$REMAT" train "$@" --steps $((STEPS + 1)) --threads "$THREADS" --precision "$p" --quiet \
        --report "$OUT/remat_${s}_$p.$i.json" >/dev/null
}
torch() { # shape round
    if [ "$1" = A ]; then sh=$A; else sh=$B; fi
    # shellcheck disable=SC2086
    "$TP" bench/bench_torch.py $sh --threads "$THREADS" --warmup 1 --steps "$STEPS" --autocast bf16 --sdpa \
        --out "$OUT/torch_${1}_bf16.$2.json" >/dev/null
}
i=0
while [ "$i" -lt "$REPS" ]; do
    for s in A B; do
        say "round $i, shape $s"
        remat "$s" fp32 "$i"
        remat "$s" bf16 "$i"
        torch "$s" "$i"
    done
    i=$((i + 1))
done

# 3. exact counts
for p in fp32 bf16; do "$REMAT" plan $A --memory-budget 100% --precision "$p" >"$OUT/plan_all_$p.txt"; done
half=$(sed -n 's/.*(store-all \([0-9.]*\) MiB.*/\1/p' "$OUT/plan_all_fp32.txt" | awk '{ printf "%.0f", $1 * 1048576 / 2 }')
for p in fp32 bf16; do "$REMAT" plan $A --memory-budget "$half" --precision "$p" >"$OUT/plan_half_$p.txt"; done

# 4. the LoRA fine-tune
if [ "$LORA" = 1 ]; then
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
        "$TP" bench/peft_lora.py --model "$OUT/smollm2" --context 512 --batch 4 --threads "$THREADS" --warmup 1 \
            --steps 3 --autocast bf16 --checkpoint layers --out "$OUT/lora_peft.$i.json" >/dev/null
        i=$((i + 1))
    done
fi

"$TP" - "$OUT" "$REPS" "$LORA" <<'EOF'
import glob, json, re, statistics, sys
out, reps, lora = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
med = statistics.median
J = lambda p: json.load(open(p))
print("host: %s" % open(out + "/cpu.txt").read().strip())
print("kernel: " + [l for l in open(out + "/test_bf16.txt") if l.startswith("bf16 kernel")][0].strip())
peak = {p: J("%s/gemm_%s.json" % (out, p))["peak_gflops"] for p in ("fp32", "bf16")}
print("GEMM peak (model shapes): fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s" % (peak["fp32"], peak["bf16"]))
shapes = {s: tuple(J("%s/torch_%s_bf16.0.json" % (out, s))["shape"][k] for k in ("layers", "dim", "context", "batch"))
          for s in ("A", "B")}
for s, (L, C, T, B) in shapes.items():
    step = {p: med([J("%s/remat_%s_%s.%d.json" % (out, s, p, i))["step_ms_median"] for i in range(reps)])
            for p in ("fp32", "bf16")}
    tb = med([J("%s/torch_%s_bf16.%d.json" % (out, s, i))["step_ms_median"] for i in range(reps)])
    n = J("%s/torch_%s_bf16.0.json" % (out, s))["params"] - T * C
    flops = 6 * n * B * T + 12 * L * C * T * B * T
    gf = flops / step["bf16"] / 1e6
    print("shape %s: remat fp32 %.0f ms, remat bf16 %.0f ms, torch bf16 autocast %.0f ms (medians of %d)" % (
        s, step["fp32"], step["bf16"], tb, reps, ))
    print("  bf16/fp32 %.3f (target <= %s), bf16/torch %.3f%s, model %.1f GFLOP/s = %.2f of the bf16 peak (>= 0.8)" % (
        step["bf16"] / step["fp32"], "0.6" if s == "A" else "0.7", step["bf16"] / tb,
        " (target <= 0.85)" if s == "A" else "", gf, gf / peak["bf16"]))
num = lambda f, pat: float(re.search(pat, open(f).read()).group(1))
sa = {p: num("%s/plan_all_%s.txt" % (out, p), r"store-all ([0-9.]+) MiB") for p in ("fp32", "bf16")}
rc = {p: num("%s/plan_half_%s.txt" % (out, p), r"recompute ([0-9.]+) =") for p in ("fp32", "bf16")}
print("exact: store-all bf16/fp32 %.3f (<= 0.6); recompute at half of fp32's store-all bf16/fp32 %.3f (<= 0.3)" % (
    sa["bf16"] / sa["fp32"], rc["bf16"] / rc["fp32"] if rc["fp32"] else 0))
if lora:
    r = med([J("%s/lora_remat.%d.json" % (out, i))["step_ms_steady"] for i in range(reps)])
    rss = max(J("%s/lora_remat.%d.json" % (out, i))["max_rss_bytes"] for i in range(reps))
    pf = med([J("%s/lora_peft.%d.json" % (out, i))["step_ms_median"] for i in range(reps)])
    prss = med([J("%s/lora_peft.%d.json" % (out, i))["peak_rss_bytes"] for i in range(reps)])
    print("LoRA SmolLM2 shape: remat bf16 --memory-limit 1GiB %.0f ms (peak RSS %.0f MiB), PEFT bf16 checkpointed "
          "%.0f ms (%.0f MiB): %.3f (target <= 0.7)" % (r, rss / 2**20, pf, prss / 2**20, r / pf))
print("raw results: " + out)
EOF
