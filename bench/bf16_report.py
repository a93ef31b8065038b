#!/usr/bin/env python3
"""bf16_report.py OUT REPS AVX2: bench/bf16.sh's table, from the JSON it left
in OUT: the host, the GEMM peaks, each shape's medians over the alternating
rounds and their ratios, each of issue 35's targets with its figure and
met / MISSED, the exact counts and the LoRA comparison."""
import glob
import json
import os
import re
import statistics
import sys

out, reps, avx2 = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
med = statistics.median
J = lambda p: json.load(open(p))
targets = []


def target(what, value, limit, above=False):
    ok = value >= limit if above else value <= limit
    targets.append("  %-64s %8.3f  %s %.2f  %s" % (what, value, ">=" if above else "<=", limit, "met" if ok else "MISSED"))


print("host: %s" % open(out + "/cpu.txt").read().strip())
print([l for l in open(out + "/test_bf16.txt") if l.startswith("bf16 kernel")][0].strip())
g32 = J(out + "/gemm_fp32.json")
print("OpenBLAS: %s" % g32["openblas_config"])
peaks = {"fp32 (cblas_sgemm)": g32["peak_gflops"]}
for f in sorted(glob.glob(out + "/gemm_bf16_*.json")):
    peaks["bf16 " + J(f)["kernel"]] = J(f)["peak_gflops"]
print("GEMM peak, the models' shapes (bench/gemm_peak, GFLOP/s): " +
      ", ".join("%s %.1f" % kv for kv in peaks.items()))
path = J(glob.glob(out + "/remat_A_bf16.0.json")[0])["bf16_kernel"]
bf16_peak = peaks.get("bf16 " + path, 0.0)
# an AVX2 host (no avx512_bf16: remat takes the sgemm path by itself): the AVX2 target, bf16 <= fp32, on
# every shape; the avx512_bf16 host's targets do not apply and are printed as figures only
on_avx2 = path == "sgemm"
if on_avx2:
    print("this host has no avx512_bf16 (oneDNN refuses bf16 here): the AVX2 targets apply; for the avx512_bf16 "
          "targets run `sh bench/bf16.sh` on a host with avx512_bf16 or AMX")
else:
    target("bf16 GEMM peak / sgemm peak (%s)" % path, bf16_peak / g32["peak_gflops"], 1.8, above=True)

tags = ["fp32", "bf16"] + (["avx2"] if avx2 else [])
for s in ("A", "B"):
    tj = J("%s/torch_%s_bf16.0.json" % (out, s))
    L, C, T, B = (tj["shape"][k] for k in ("layers", "dim", "context", "batch"))
    step = {t: med([J("%s/remat_%s_%s.%d.json" % (out, s, t, i))["step_ms_median"] for i in range(reps)])
            for t in tags}
    runs = {t: [round(J("%s/remat_%s_%s.%d.json" % (out, s, t, i))["step_ms_median"]) for i in range(reps)]
            for t in tags}
    tb = med([J("%s/torch_%s_bf16.%d.json" % (out, s, i))["step_ms_median"] for i in range(reps)])
    n = tj["params"] - T * C
    flops = 6 * n * B * T + 12 * L * C * T * B * T
    name = "shape A" if s == "A" else "GPT-2 shape"
    print("%s (%.1f GFLOP a step), medians of %d rounds, ms (rounds):" % (name, flops / 1e9, reps))
    for t in tags:
        label = {"fp32": "remat fp32", "bf16": "remat bf16 (%s)" % path,
                 "avx2": "remat bf16, AVX2 path forced (ONEDNN_MAX_CPU_ISA=AVX2: sgemm)"}[t]
        print("  %-62s %8.0f  %s  %.1f GFLOP/s" % (label, step[t], runs[t], flops / step[t] / 1e6))
    print("  %-62s %8.0f  %s" % ("torch %s bf16 autocast (SDPA)" % tj.get("torch_version", ""), tb,
                                   [round(J("%s/torch_%s_bf16.%d.json" % (out, s, i))["step_ms_median"])
                                    for i in range(reps)]))
    gf = flops / step["bf16"] / 1e6
    if on_avx2:
        target("%s, AVX2 host (sgemm path): bf16 / fp32" % name, step["bf16"] / step["fp32"], 1.0)
        print("  bf16 / torch bf16 autocast %.3f; model FLOP/s %.1f = %.2f of the fp32 sgemm peak" % (
            step["bf16"] / tb, gf, gf / g32["peak_gflops"]))
        continue
    target("%s: bf16 / fp32" % name, step["bf16"] / step["fp32"], 0.6 if s == "A" else 0.7)
    if s == "A":
        target("shape A: bf16 / torch bf16 autocast", step["bf16"] / tb, 0.85)
    target("%s: model FLOP/s / bf16 GEMM peak (%.1f / %.1f)" % (name, gf, bf16_peak), gf / bf16_peak, 0.8, above=True)
    if avx2:
        target("%s, AVX2 path forced: bf16 / fp32" % name, step["avx2"] / step["fp32"], 1.0)

print("shape A at half of fp32's store-all (one --memory-budget in bytes), medians, ms (rounds):")
hs = {t: med([J("%s/remat_H_%s.%d.json" % (out, t, i))["step_ms_median"] for i in range(reps)]) for t in tags}
for t in tags:
    print("  %-62s %8.0f  %s" % ({"fp32": "remat fp32", "bf16": "remat bf16 (%s)" % path, "avx2":
                                  "remat bf16, AVX2 path forced"}[t], hs[t],
                                 [round(J("%s/remat_H_%s.%d.json" % (out, t, i))["step_ms_median"]) for i in range(reps)]))
if avx2:
    target("shape A at half of fp32's store-all, AVX2 path forced: bf16 / fp32", hs["avx2"] / hs["fp32"], 1.0)
if on_avx2:
    target("shape A at half of fp32's store-all, AVX2 host (sgemm path): bf16 / fp32", hs["bf16"] / hs["fp32"], 1.0)
num = lambda f, pat: float(re.search(pat, open(f).read()).group(1))
sa = {p: num("%s/plan_all_%s.txt" % (out, p), r"store-all ([0-9.]+) MiB") for p in ("fp32", "bf16")}
rc = {p: num("%s/plan_half_%s.txt" % (out, p), r"recompute ([0-9.]+) =") for p in ("fp32", "bf16")}
print("exact: store-all bf16/fp32 %.3f (<= 0.6); recompute at half of fp32's store-all bf16/fp32 %.3f (<= 0.3)" % (
    sa["bf16"] / sa["fp32"], rc["bf16"] / rc["fp32"] if rc["fp32"] else 0))
if os.path.exists(out + "/lora_remat.0.json"):
    r = med([J("%s/lora_remat.%d.json" % (out, i))["step_ms_steady"] for i in range(reps)])
    rss = max(J("%s/lora_remat.%d.json" % (out, i))["max_rss_bytes"] for i in range(reps))
    if on_avx2:  # no PEFT run (bf16.sh): its bf16 is emulated here
        print("LoRA SmolLM2 shape: remat bf16 --memory-limit 1GiB %.0f ms (peak RSS %.0f MiB); PEFT not run on "
              "an AVX2 host (the <= 0.7 target is an avx512_bf16 host's)" % (r, rss / 2**20))
    else:
        pf = med([J("%s/lora_peft.%d.json" % (out, i))["step_ms_median"] for i in range(reps)])
        prss = med([J("%s/lora_peft.%d.json" % (out, i))["peak_rss_bytes"] for i in range(reps)])
        print("LoRA SmolLM2 shape: remat bf16 --memory-limit 1GiB %.0f ms (peak RSS %.0f MiB), PEFT bf16 "
              "checkpointed %.0f ms (%.0f MiB)" % (r, rss / 2**20, pf, prss / 2**20))
        target("SmolLM2 LoRA under 1 GiB: remat bf16 / PEFT bf16 checkpointed", r / pf, 0.7)
print("targets (issue 35):")
print("\n".join(targets))
print("raw results: " + out)
