#!/bin/sh
# bench/hf_finetune.sh: issue 21's fine-tuning targets. A LoRA fine-tune of
# a Hugging Face LlamaForCausalLM folder (random weights in bf16, written by
# tests/hf_llama.py: nothing is downloaded) with `remat train --init DIR
# --lora R` (frozen base kept in bf16, --frozen-dtype), against the same
# fine-tune in PyTorch (bench/lora_torch.py: LoRA by hand, fp32 base,
# without and with per-layer checkpointing), alternating remat and the
# PyTorch runs REPS times; medians and ratios.
#
#   flock -x /work/notes/suite.lock sh bench/hf_finetune.sh smollm2
#       the SmolLM2-135M shape: 30 layers, dim 576, 9 heads, 3 kv heads,
#       ffn 1536, vocab 49152, tied; context 512, batch 4, LoRA r 16 on the
#       seven projections. remat runs twice a round: storing every
#       activation, and under --memory-limit LIMIT (default 1GiB), which
#       plans recomputation. Targets: peak RSS <= 0.45x PyTorch's (its best
#       checkpoint setting, the lower of the two), step time <= 0.6x
#       PyTorch's (the faster of the two); the ratios are printed for each
#       remat run.
#   flock -x /work/notes/suite.lock sh bench/hf_finetune.sh tinyllama
#       the TinyLlama-1.1B shape: 22 layers, dim 2048, 32 heads, 4 kv heads,
#       ffn 5632, vocab 32000; context 512, batch 1; remat under
#       --memory-limit 3GiB (LIMIT): its peak RSS must stay under it.
#       PyTorch is not run (its fp32 base alone is 4.4 GB) unless
#       TORCH="layers" (or "layers none") names its settings.
#   sh bench/hf_finetune.sh tiny
#       a 2-layer model in seconds: checks that the script runs (no target).
#
# Environment: REPS (3), STEPS (3) timed steps per run, THREADS (2),
# REMAT_FLAGS (extra flags for remat), LIMIT (smollm2: 1GiB, tinyllama:
# 3GiB), KEEP=DIR (keep the folder and token file there). OPENBLAS_CORETYPE
# and OPENBLAS_L2_SIZE are unset for both sides. Step time: the median over
# the STEPS steps after the first, on both sides (remat's report:
# step_ms_steady). Peak RSS: getrusage maxrss of each process (PyTorch's
# includes ~230 MB of Python and torch libraries, base_rss_bytes). Timings
# on a shared machine are noisy: each run waits up to QUIET_WAIT (120) s for
# no other process to run (bench/measure.py) and its "others" (the cores
# other processes kept busy meanwhile) is printed; with THREADS = the
# cores, a run with others above ~0.1 was slowed by them.
set -eu
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/.."
. bench/lib.sh
shape=${1:-smollm2}
R=${REPS:-3} W=1 S=${STEPS:-3} QUIET_WAIT=${QUIET_WAIT:-120}
case "$shape" in
smollm2) L=30 C=576 H=9 K=3 F=1536 V=49152 TIE=1 T=512 B=4 ;;
tinyllama) L=22 C=2048 H=32 K=4 F=5632 V=32000 TIE=0 T=512 B=1 ;;
tiny) L=2 C=64 H=4 K=2 F=128 V=300 TIE=1 T=32 B=2 ;;
*) echo "usage: hf_finetune.sh smollm2|tinyllama|tiny" >&2; exit 2 ;;
esac
dir=${KEEP:-$(mktemp -d)}
[ -n "${KEEP:-}" ] || trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir"
if ! [ -f "$dir/$shape/config.json" ]; then
    "$PYTHON" -c "
import sys; sys.path.insert(0, '$here/../tests')
import hf_llama as H
cfg = dict(layers=$L, dim=$C, heads=$H, kv_heads=$K, ffn=$F, vocab=$V, tie=bool($TIE), eps=1e-5, theta=10000.0)
H.write_random_folder('$dir/$shape', cfg, 1, 'BF16')
"
fi
# random token ids, uint16 below 65536 or uint32 above (llm.c headers)
"$PYTHON" -c "
import struct, random
random.seed(5)
n = 200000
wide = $V > 65535
with open('$dir/tokens.bin', 'wb') as f:
    f.write(struct.pack('<3i', 20240801 if wide else 20240520, 7 if wide else 1, n) + bytes(1024 - 12))
    f.write(struct.pack('<%d%s' % (n, 'I' if wide else 'H'), *[random.randrange($V) for _ in range(n)]))
"
measure() { # OUT_JSON LABEL CMD...: bench/measure.py waits for an idle machine, runs CMD, records "others"
    m_out=$1 m_label=$2
    shift 2
    "$PYTHON" bench/measure.py "$m_out" "$QUIET_WAIT" "$m_label" -- "$@" || {
        "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_tail"])' "$m_out" >&2 || true
        echo "hf_finetune: $m_label failed" >&2
        exit 1
    }
}
remat_run() { # i tag [flags]
    out="$dir/remat_$2.$1.json" run="$dir/run_remat_$2.$1.json" label="remat $2 $1"
    shift 2
    # shellcheck disable=SC2086
    measure "$run" "$label" "$REMAT" train --init "$dir/$shape" --data "$dir/tokens.bin" --context "$T" --batch "$B" --lora 16 \
        --lora-alpha 32 --frozen-dtype bf16 --threads "$THREADS" --steps $((W + S)) --val-fraction 0 \
        --dropout 0 --grad-clip 0 --lr 1e-4 --quiet --report "$out" "$@" ${REMAT_FLAGS:-}
}
torch_run() { # i checkpoint
    measure "$dir/run_torch_$2.$1.json" "torch $2 $1" "$PYTHON" "$here/lora_torch.py" --layers "$L" --dim "$C" --heads "$H" --kv-heads "$K" --ffn-dim "$F" \
        --vocab "$V" $([ "$TIE" = 1 ] && echo --tie) --context "$T" --batch "$B" --threads "$THREADS" \
        --warmup "$W" --steps "$S" --checkpoint "$2" --out "$dir/torch_$2.$1.json"
}
case "$shape" in
smollm2) LIMIT=${LIMIT:-1GiB} TAGS="all limit" CKS=${TORCH:-layers none} ;;
tiny) LIMIT=${LIMIT:-64MiB} TAGS="all limit" CKS=${TORCH:-layers none} ;;
tinyllama) LIMIT=${LIMIT:-3GiB} TAGS="limit" CKS=${TORCH:-} ;;
esac
rm -f "$dir"/remat_*.json "$dir"/torch_*.json "$dir"/run_*.json
i=0
while [ "$i" -lt "$R" ]; do
    for tag in $TAGS; do
        if [ "$tag" = all ]; then remat_run "$i" all; else remat_run "$i" limit --memory-limit "$LIMIT"; fi
    done
    for ck in $CKS; do
        torch_run "$i" "$ck"
    done
    i=$((i + 1))
done
"$PYTHON" - "$dir" "$R" "$shape" "$LIMIT" "$TAGS" "$CKS" <<'PY'
import json, statistics, sys
d, reps, shape, limit, tags, cks = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split(), sys.argv[6].split()
med = statistics.median
units = {"GiB": 2**30, "MiB": 2**20}
lim = float(limit[:-3]) * units[limit[-3:]]
def others(name):
    return json.load(open("%s/run_%s.json" % (d, name)))["others_cores"] or 0.0
def oth(names):
    return " ".join("%.2f" % others(n) for n in names)
remat = {}
for tag in tags:
    r = [json.load(open("%s/remat_%s.%d.json" % (d, tag, i))) for i in range(reps)]
    rs, rr = [x["step_ms_steady"] for x in r], [x["max_rss_bytes"] for x in r]
    remat[tag] = (med(rs), med(rr))
    what = "store-all" if tag == "all" else "--memory-limit " + limit
    print("%s: remat %s: step ms %s (median %.0f; first steps %s), peak RSS MiB %s (median %.1f), %d threads" % (
        shape, what, " ".join("%.0f" % v for v in rs), med(rs), " ".join("%.0f" % x["step_ms_first"] for x in r),
        " ".join("%.1f" % (v / 2**20) for v in rr), med(rr) / 2**20, r[0]["threads"]))
    print("  others (cores busy with other processes during each run): %s" % oth(
        ["remat_%s.%d" % (tag, i) for i in range(reps)]))
    print("  params %.1f MiB, activations %.1f MiB planned, grads %.1f MiB, optimizer %.1f MiB, strategy %s, "
          "recompute %.1f GFLOP, overhead measured %.1f%%; %s" % (
              r[0]["param_bytes"] / 2**20, r[0]["activation_bytes_planned"] / 2**20, r[0]["grad_bytes"] / 2**20,
              r[0]["optimizer_bytes"] / 2**20, r[0]["checkpoint"], r[0]["recompute_flops"] / 1e9,
              100 * r[0]["measured_overhead"], r[0].get("frozen", "")))
    if tag == "limit":
        print("  peak RSS %.1f MiB (largest %.1f) against --memory-limit %s (%.1f MiB): %s" % (
            med(rr) / 2**20, max(rr) / 2**20, limit, lim / 2**20, "under" if max(rr) <= lim else "OVER"))
if not cks:
    sys.exit(0)
t = {ck: [json.load(open("%s/torch_%s.%d.json" % (d, ck, i))) for i in range(reps)] for ck in cks}
for ck, runs in t.items():
    print("torch --checkpoint %-6s step ms %s (median %.0f), peak RSS MiB %s (median %.1f; base %.1f)" % (
        ck, " ".join("%.0f" % x["step_ms_median"] for x in runs), med([x["step_ms_median"] for x in runs]),
        " ".join("%.1f" % (x["peak_rss_bytes"] / 2**20) for x in runs),
        med([x["peak_rss_bytes"] for x in runs]) / 2**20, med([x["base_rss_bytes"] for x in runs]) / 2**20))
    print("  others: %s" % oth(["torch_%s.%d" % (ck, i) for i in range(reps)]))
best_rss = min(med([x["peak_rss_bytes"] for x in runs]) for runs in t.values())
best_ms = min(med([x["step_ms_median"] for x in runs]) for runs in t.values())
for tag, (ms, rss) in remat.items():
    print("ratios (remat %s): peak RSS remat/torch(best) %.3f (target <= 0.45), step time remat/torch(fastest) "
          "%.3f (target <= 0.6)" % ("store-all" if tag == "all" else "--memory-limit " + limit, rss / best_rss,
                                    ms / best_ms))
PY
