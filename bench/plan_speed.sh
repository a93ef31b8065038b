#!/bin/sh
# bench/plan_speed.sh: how long planning takes (issue 12's targets), the
# median of RUNS runs each (5; the 1,000-layer GPT: 3):
#   chain    a chain of 100 stages from a file, 500 memory slots  (< 1 s)
#   graph    a random graph of 2,000 nodes (a chain with skips of up to 20,
#            a third of the nodes reading an earlier one), remat plan --graph
#            with a budget of half of store-all                   (< 1 s)
#   gpt256   remat plan --layers 256 --dim 8 --heads 1 --context 8
#            --batch 1 --memory-budget 50%                        (< 2 s)
#   gpt1000  the same with 1,000 layers                           (< 10 s)
# Each also prints what the plan costs, so a faster planner cannot hide a
# worse plan. REMAT=path times another build; REMAT_BEFORE=path times a
# second one alternately with the first (medians side by side; machine
# load is noise either way, ratios from alternated runs are fairer).
# ONLY="graph gpt256" runs a subset.
set -eu
cd "$(dirname "$0")/.."
REMAT=${REMAT:-build/remat}
BEFORE=${REMAT_BEFORE:-}
ONLY=${ONLY:-chain graph gpt256 gpt1000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
awk 'BEGIN { srand(7); printf "{\"stages\": ["; total = 0
    for (i = 0; i < 99; i++) { ab = 3000 + int(rand() * 20000); total += ab
        printf "{\"uf\": %d, \"ub\": %d, \"a\": %d, \"ab\": %d},", 1 + int(rand() * 10), 2 + int(rand() * 20), 1000 + int(rand() * 5000), ab }
    printf "{\"uf\": 0, \"ub\": 0, \"a\": 1000, \"ab\": 0}]}\n"; print int(total / 3) > "/dev/stderr" }' > "$T/chain.json" 2> "$T/budget"
awk -v n=2000 'BEGIN { srand(3); printf "{\"nodes\": ["
    for (i = 0; i < n; i++) { f = 1 + int(rand() * 10)
        printf "%s{\"forward_time\": %d, \"backward_time\": %d, \"output_bytes\": %d%s}", i ? ", " : "", f, 2 * f,
            64 * (1 + int(rand() * 8)), rand() < 0.3 ? ", \"backward_reads_output\": true" : "" }
    printf "], \"edges\": ["
    for (i = 1; i < n; i++) { printf "%s{\"producer\": %d, \"consumer\": %d}", (i > 1 ? ", " : ""), i - 1, i
        if (i > 21 && rand() < 0.3) printf ", {\"producer\": %d, \"consumer\": %d}", i - 2 - int(rand() * 20), i }
    printf "]}\n" }' > "$T/graph.json"

# cmd NAME BIN: the command line of a case
cmd() {
    case "$1" in
    chain) echo "$2 plan --chain $T/chain.json --memory-budget $(cat "$T/budget") --json" ;;
    graph) echo "$2 plan --graph $T/graph.json --memory-budget 300000" ;;
    gpt256) echo "$2 plan --layers 256 --dim 8 --heads 1 --context 8 --batch 1 --memory-budget 50%" ;;
    gpt1000) echo "$2 plan --layers 1000 --dim 8 --heads 1 --context 8 --batch 1 --memory-budget 50%" ;;
    esac
}

# what the plan costs, from the command's output
quality() {
    case "$1" in
    chain) sed -n 's/.*"time":\([0-9.e+]*\).*/predicted time \1/p' "$2" ;;
    graph) grep -E '^(total time|peak_bytes)' "$2" | tr '\n' ' ' ;;
    *) sed -n 's/.*activations \([0-9.]* MiB planned\), predicted overhead \([0-9.]*%\).*/\1, overhead \2/p' "$2" ;;
    esac
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

for name in $ONLY; do
    runs=5
    [ "$name" = gpt1000 ] && runs=3
    : > "$T/new.t"; : > "$T/old.t"
    for i in $(seq "$runs"); do
        for which in new old; do
            bin=$REMAT
            [ "$which" = old ] && { [ -n "$BEFORE" ] || continue; bin=$BEFORE; }
            s=$(date +%s.%N)
            $(cmd "$name" "$bin") > "$T/$which.out" 2>&1 || true
            e=$(date +%s.%N)
            echo "$e - $s" | bc >> "$T/$which.t"
        done
    done
    printf '%-8s %s s (median of %d)  %s\n' "$name" "$(median < "$T/new.t")" "$runs" "$(quality "$name" "$T/new.out")"
    [ -n "$BEFORE" ] && printf '%-8s %s s before        %s\n' "" "$(median < "$T/old.t")" "$(quality "$name" "$T/old.out")"
done
