#!/bin/sh
# bench/attention_ab.sh: the attention ops timed alone by bench/attention_op.c,
# in this tree and in git revision REV (default main), alternating, REPS
# rounds; medians of each side's per-round medians, and the ratio. Issue 21
# asked that grouped-query attention leave the fused causal path as fast as
# it was: llama's causal rm_attention_general (as many key/value heads as
# heads) and GPT's fused rm_attention(qkv), both in both trees. With KV=K
# (a divisor of H), this tree also times grouped-query attention with K
# key/value heads in the same rounds, against its own K = H op (the same
# FLOPs; the backward runs B*K work items instead of B*H).
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both sides. Wall
# time and the process's CPU time are both printed: on a loaded machine,
# with THREADS=1, the CPU time measures the work itself.
#
#   flock -x /work/notes/suite.lock sh bench/attention_ab.sh [REV]
#   B=8 T=256 H=6 HD=64 THREADS=2 RUNS=15 REPS=5 (the defaults: GPT/llama shape A)
#   B=4 T=512 H=9 HD=64 KV=3 (SmolLM2-135M's attention)
set -eu
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
REV=${1:-main}
B=${B:-8} T=${T:-256} H=${H:-6} HD=${HD:-64} N=${THREADS:-2} RUNS=${RUNS:-15} R=${REPS:-5} KV=${KV:-}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CC=${CC:-$(command -v mpicc || echo cc)}
LIBS="$(pkg-config --libs libcjson nettle 2>/dev/null || echo -lcjson -lnettle) -lm -ldl"
build() { # tree binary [flags]
    (cd "$1" && make -s -j2 build/libremat.a >/dev/null &&
        $CC -O2 -march=native -fopenmp ${3:-} -Iinclude -Isrc "$here/bench/attention_op.c" build/libremat.a $LIBS \
            -o "$2")
}
mkdir "$tmp/rev"
git -C "$here" archive "$REV" | tar -x -C "$tmp/rev"
build "$tmp/rev" "$tmp/before"
build "$here" "$tmp/after" -DRM_BENCH_GQA
i=0
while [ "$i" -lt "$R" ]; do
    for op in general fused; do
        "$tmp/before" "$B" "$T" "$H" "$HD" "$N" "$RUNS" $op >>"$tmp/before.$op.txt"
        "$tmp/after" "$B" "$T" "$H" "$HD" "$N" "$RUNS" $op >>"$tmp/after.$op.txt"
    done
    [ -z "$KV" ] || "$tmp/after" "$B" "$T" "$H" "$HD" "$N" "$RUNS" "$KV" >>"$tmp/after.gqa.txt"
    echo "round $i done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    i=$((i + 1))
done
python3 - "$tmp" "$REV" "$KV" <<'PY'
import os, re, statistics, sys
tmp, rev, kv = sys.argv[1], sys.argv[2], sys.argv[3]
def read(name):
    rows = [[float(x) for x in re.findall(r"median ([0-9.]+)", l)] for l in open("%s/%s.txt" % (tmp, name))]
    return [list(col) for col in zip(*rows)]  # wall forward, wall backward, cpu forward, cpu backward
m = statistics.median
what = ["forward  wall", "backward wall", "forward  cpu ", "backward cpu "]
def compare(label, b, a, bname, aname):
    for k in range(4):
        print("%s %s ms per round: %s %s | %s %s" % (label, what[k], bname, " ".join("%.1f" % x for x in b[k]),
                                                     aname, " ".join("%.1f" % x for x in a[k])))
        print("%s %s ms (median of rounds): %s %.2f  %s %.2f  ratio %.3f" % (label, what[k], bname, m(b[k]), aname,
                                                                           m(a[k]), m(a[k]) / m(b[k])))
for op in ("general", "fused"):
    compare(op, read("before." + op), read("after." + op), rev, "this tree")
if kv:
    compare("gqa K=%s" % kv, read("after.general"), read("after.gqa"), "K=H", "K=" + kv)
PY
