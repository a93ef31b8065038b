#!/bin/sh
# test_examples.sh: the programs of examples/ run, and the example trainer
# stopped after 6 steps and resumed ends with the same training state, bit
# for bit, as a run of 12 steps that never stopped (under its memory budget).
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
E=$BUILD/examples
"$E/plan_chain" > "$T/plan" 2>&1
check '[ $? -eq 0 ] && grep -q "\"feasible\": *true" "$T/plan" && grep -q "Fck 0\|Fall 0\|Fn 0" "$T/plan"' \
    "plan_chain: $(head -3 "$T/plan")"
check '[ $(grep -c "^[0-9]*,[0-9.]*,[0-9.]*,[0-9]*$" "$T/plan") -ge 3 ]' "plan_chain: no trade-off table: $(cat "$T/plan")"

"$E/train" "$T/whole.st" 12 > "$T/a" 2>&1
check '[ $? -eq 0 ] && grep -q "saved .* at step 12" "$T/a"' "train 12 steps: $(tail -3 "$T/a")"
"$E/train" "$T/split.st" 12 6 > "$T/b" 2>&1
check '[ $? -eq 0 ] && grep -q "saved .* at step 6" "$T/b"' "train to 6: $(tail -3 "$T/b")"
"$E/train" "$T/split.st" 12 > "$T/c" 2>&1
check '[ $? -eq 0 ] && grep -q "resuming .* at step 6" "$T/c" && grep -q "saved .* at step 12" "$T/c"' \
    "resume to 12: $(tail -3 "$T/c")"
sum() { sha256sum "$1" | cut -d' ' -f1; }
check '[ "$(sum "$T/whole.st")" = "$(sum "$T/split.st")" ]' "stopped and resumed != uninterrupted"
check '[ "$(grep "validation loss" "$T/a")" = "$(grep "validation loss" "$T/c")" ]' "validation losses differ"
"$E/train" "$T/nope/x.st" 2 > "$T/d" 2>&1
check '[ $? -eq 1 ] && grep -q "^train: " "$T/d"' "unwritable state: exit $?: $(cat "$T/d")"
echo "test_examples: $pass passed, $fail failed"
[ $fail -eq 0 ]
