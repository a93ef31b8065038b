#!/bin/sh
# bench/plan_speed.sh: how long the budget planner takes on a chain of 100
# stages with 500 memory slots (the target is under a second), median of 5.
set -eu
cd "$(dirname "$0")/.."
REMAT=${REMAT:-build/remat}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
awk 'BEGIN { srand(7); printf "{\"stages\": ["; total = 0
    for (i = 0; i < 99; i++) { ab = 3000 + int(rand() * 20000); total += ab
        printf "{\"uf\": %d, \"ub\": %d, \"a\": %d, \"ab\": %d},", 1 + int(rand() * 10), 2 + int(rand() * 20), 1000 + int(rand() * 5000), ab }
    printf "{\"uf\": 0, \"ub\": 0, \"a\": 1000, \"ab\": 0}]}\n"; print int(total / 3) > "/dev/stderr" }' > "$T/chain.json" 2> "$T/budget"
budget=$(cat "$T/budget")
for i in 1 2 3 4 5; do
    s=$(date +%s.%N); "$REMAT" plan --chain "$T/chain.json" --memory-budget "$budget" --json > /dev/null; e=$(date +%s.%N)
    echo "$e - $s" | bc
done | sort -n | sed -n 3p | sed 's/^/planning 100 stages x 500 slots, median of 5 (s): /'
