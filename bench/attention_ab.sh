#!/bin/sh
# bench/attention_ab.sh: llama's attention op (rm_attention_general, causal,
# as many key/value heads as heads) timed alone by bench/attention_op.c, in
# this tree and in git revision REV (default main), alternating, REPS
# rounds; medians of each side's per-round medians, and the ratio. Issue 21
# asked that grouped-query attention leave the K = H path as fast as it
# was. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset for both sides.
# Wall time and the process's CPU time are both printed: on a loaded
# machine, with THREADS=1, the CPU time measures the work itself.
#
#   flock -x /work/notes/suite.lock sh bench/attention_ab.sh [REV]
#   B=8 T=256 H=6 HD=64 THREADS=2 RUNS=15 REPS=5 (the defaults: GPT/llama shape A)
set -eu
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
REV=${1:-main}
B=${B:-8} T=${T:-256} H=${H:-6} HD=${HD:-64} N=${THREADS:-2} RUNS=${RUNS:-15} R=${REPS:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CC=${CC:-$(command -v mpicc || echo cc)}
LIBS="$(pkg-config --libs libcjson nettle 2>/dev/null || echo -lcjson -lnettle) -lm -ldl"
build() { # tree -> binary
    (cd "$1" && make -s -j2 build/libremat.a >/dev/null &&
        $CC -O2 -march=native -fopenmp -Iinclude -Isrc "$here/bench/attention_op.c" build/libremat.a $LIBS -o "$2")
}
mkdir "$tmp/rev"
git -C "$here" archive "$REV" | tar -x -C "$tmp/rev"
build "$tmp/rev" "$tmp/before"
build "$here" "$tmp/after"
i=0
while [ "$i" -lt "$R" ]; do
    "$tmp/before" "$B" "$T" "$H" "$HD" "$N" "$RUNS" >>"$tmp/before.txt"
    "$tmp/after" "$B" "$T" "$H" "$HD" "$N" "$RUNS" >>"$tmp/after.txt"
    echo "round $i done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
    i=$((i + 1))
done
python3 - "$tmp" "$REV" <<'PY'
import re, statistics, sys
tmp, rev = sys.argv[1], sys.argv[2]
def read(side):
    rows = [[float(x) for x in re.findall(r"median ([0-9.]+)", l)] for l in open("%s/%s.txt" % (tmp, side))]
    return [list(col) for col in zip(*rows)]  # wall forward, wall backward, cpu forward, cpu backward
b, a = read("before"), read("after")
m = statistics.median
for k, what in enumerate(["forward  wall", "backward wall", "forward  cpu ", "backward cpu "]):
    print("%s ms per round: %s %s | this tree %s" % (what, rev, " ".join("%.1f" % x for x in b[k]),
                                                   " ".join("%.1f" % x for x in a[k])))
    print("%s ms (median of rounds): %s %.2f  this tree %.2f  ratio %.3f" % (what, rev, m(b[k]), m(a[k]),
                                                                          m(a[k]) / m(b[k])))
PY
