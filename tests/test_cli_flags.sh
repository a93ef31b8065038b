#!/bin/sh
# test_cli_flags.sh: issue 22 through the remat command, the classes about
# flags and messages:
# 14. --memory-budget 0.5 (a bare number below one byte) is refused,
#     suggesting 50%;
# 17. a message says what is wrong and what would work: --memory-limit never
#     suggests a percentage it refuses, the size limit is stated as 2^60,
#     --quiet=1 is "takes no value" (not an unknown flag), a chain of 100001
#     stages is called too long, a flag where a value belongs is named;
# 18. no flag is silently ignored: a flag a command does not use is refused
#     (exit 2), or, for the training settings on plan, warned about; the
#     combinations that used to be dropped (--layers resuming an encdec,
#     plan --graph with --sweep or model flags, sample --prompt with
#     --source, JSON with trailing bytes) are refused.
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
TO="timeout 30"
cd "$T" || exit 1
TINY="--layers 1 --dim 16 --heads 2 --context 8 --batch 2 --steps 1 --threads 1 --quiet"
run() { $TO "$@" >out 2>err; rc=$?; }
# usage WHAT GREP CMD...: exit 2, one error line matching GREP, nothing done
usage() {
    what=$1 pattern=$2; shift 2
    run "$@"
    check '[ $rc -eq 2 ] && [ $(grep -c "error: ." err) -eq 1 ] && grep -q -- "$pattern" err' \
        "$what: exit $rc (want 2, '$pattern'): $(head -c 300 err)"
    check '! grep -q "^step\|done:\|saved" out err' "$what: ran before refusing"
}
"$R" train $TINY --save gpt.st >/dev/null 2>&1 || bad "training a gpt"
"$R" train --model encdec --enc-layers 1 --dec-layers 1 --dim 16 --heads 2 --context 8 --batch 2 --steps 1 \
    --threads 1 --quiet --save ed.st >/dev/null 2>&1 || bad "training an encdec"
printf '{"stages":[{"uf":1,"ub":1,"a":100,"ab":100},{"uf":1,"ub":1,"a":100,"ab":100}]}' > chain.json
printf '{"nodes":[{"forward_time":1,"backward_time":1,"output_bytes":10}]}' > graph.json

# class 14: a bare number below 1 is ambiguous
for b in 0.5 0.25 .9; do
    usage "train --memory-budget $b" "%" "$R" train $TINY --memory-budget $b
    usage "plan --memory-budget $b" "%" "$R" plan $TINY --memory-budget $b
done
run "$R" plan --layers 1 --dim 16 --heads 2 --context 8 --memory-budget 0.5
check 'grep -q "50%" err' "--memory-budget 0.5 does not suggest 50%: $(cat err)"
usage "--memory-budget 0.5B" "less than one byte" "$R" plan $TINY --memory-budget 0.5B

# class 17: messages
suggests_percent() { sed "s/: '[^']*' is not/ is not/" err | grep -q "[0-9]%"; } # the echo of the value aside
for l in abc 0.5 50% 2e18; do
    usage "--memory-limit $l" "memory-limit" "$R" train $TINY --memory-limit $l
    check '! suggests_percent' "--memory-limit $l suggests a percentage, which it refuses: $(cat err)"
done
usage "--memory-budget 2e18" "2^60" "$R" plan $TINY --memory-budget 2e18
check '! grep -q "2^63" err' "the size limit is 2^60, not 2^63: $(cat err)"
usage "--quiet=1" "takes no value" "$R" train $TINY --quiet=1
check '! grep -q "unknown flag" err' "--quiet=1 called an unknown flag: $(cat err)"
usage "plan --sweep=1" "takes no value" "$R" plan $TINY --sweep=1
usage "--save --report r.json" "next argument is the flag --report" "$R" train $TINY --save --report r.json
awk 'BEGIN { printf "{\"stages\":["; for (i = 0; i < 100001; i++) printf "%s{\"uf\":1,\"ub\":1,\"a\":1,\"ab\":1}", (i ? "," : ""); print "]}" }' > long.json
run "$R" plan --chain long.json --memory-budget 10
check '[ $rc -eq 1 ] && grep -q "100001 stages" err && ! grep -q "at least one" err' "100001 stages: exit $rc $(cat err)"
usage "--batch 6 --micro-batches 4" "--batch 4 or 8" "$R" train $TINY --batch 6 --micro-batches 4
usage "--memory-budget 150%" "at most 100%" "$R" plan $TINY --memory-budget 150%
usage "--dim 30 --heads 4" "multiple of heads" "$R" train --dim 30 --heads 4 --steps 1 --quiet
usage "plan --chain --memory-budget 50%" "not '50%'" "$R" plan --chain chain.json --memory-budget 50%
run "$R" plan --layers 1 --dim 16 --heads 2 --context 8 --memory-budget 1KB
check '[ $rc -eq 1 ] && grep -q "at least [0-9.]*MiB" err && ! grep -q "rm_options" err' \
    "an infeasible budget names the least that works, in the CLI's words: $(cat err)"

# class 18: flags a command does not use
for args in "train $TINY --prompt hi" "train $TINY --load gpt.st" "train $TINY --tokens 3" \
    "bench $TINY --source x" "plan $TINY --save x.st" "plan $TINY --report r.json" "plan $TINY --init gpt.st" \
    "plan $TINY --temperature 1" "sample --load gpt.st --layers 2" "sample --load gpt.st --save x.st" \
    "sample --load gpt.st --lr 1" "sample --load gpt.st --memory-budget 50%" "sample --load gpt.st --data x"; do
    # shellcheck disable=SC2086
    usage "$args" "appl" "$R" $args
    check '[ ! -e x.st ] && [ ! -e r.json ]' "$args wrote a file"
done
# combinations that used to be dropped
usage "--resume (an encdec) --layers 3" "--layers does not apply" "$R" train --resume ed.st --layers 3 --steps 2
usage "--resume (a gpt) --enc-layers 2" "--enc-layers" "$R" train --resume gpt.st --enc-layers 2 --steps 2
usage "--resume (a gpt) --ffn-dim 64" "--ffn-dim" "$R" train --resume gpt.st --ffn-dim 64 --steps 2
usage "plan --graph --sweep" "--sweep" "$R" plan --graph graph.json --sweep
usage "plan --graph --layers 2" "--layers does not apply" "$R" plan --graph graph.json --layers 2
usage "plan --chain --dim 32" "--dim does not apply" "$R" plan --chain chain.json --memory-budget 300 --dim 32
usage "plan --json (a model)" "--json" "$R" plan $TINY --json
usage "plan --csv without --sweep" "add --sweep" "$R" plan $TINY --csv t.csv
usage "plan --sweep --memory-budget" "drop --memory-budget" "$R" plan $TINY --sweep --memory-budget 50%
usage "sample --source --prompt" "--prompt" "$R" sample --load ed.st --source abc --prompt x
usage "--trace-step without --trace" "add --trace" "$R" train $TINY --trace-step 1
usage "bench --compare without --svg" "add --svg" "$R" bench $TINY --compare x.csv
usage "bench --keep" "appl" "$R" bench $TINY --keep 2
usage "encdec --micro-batches 2" "micro-batches" "$R" train --model encdec --context 8 --batch 2 --micro-batches 2
# JSON with trailing bytes: refused, not read up to the end of the object
printf '{"stages":[{"uf":1,"ub":1,"a":100,"ab":100}]} junk' > junk.json
printf '{"nodes":[{"forward_time":1,"backward_time":1,"output_bytes":10}]}{}' > gjunk.json
run "$R" plan --chain junk.json --memory-budget 300
check '[ $rc -eq 1 ] && grep -q "after the JSON" err' "chain JSON with trailing junk: exit $rc $(cat err)"
run "$R" plan --graph gjunk.json
check '[ $rc -eq 1 ] && grep -q "after the JSON" err' "graph JSON with trailing junk: exit $rc $(cat err)"
printf '{"stages":[{"uf":1,"ub":1,"a":100,"ab":100}]}\n \n' > ws.json
run "$R" plan --chain ws.json --memory-budget 300
check '[ $rc -eq 0 ]' "chain JSON with trailing white space: exit $rc $(cat err)"
# training settings on plan: planned as they are, with a warning each
run "$R" plan --layers 1 --dim 16 --heads 2 --context 8 --memory-budget 100% --steps 3 --lr 0.1
check '[ $rc -eq 0 ] && [ $(grep -c "warning: .*does not apply to remat plan" err) -eq 2 ]' \
    "plan with --steps and --lr: exit $rc $(cat err)"
run "$R" train $TINY --shard-optimizer
check '[ $rc -eq 0 ] && grep -q "warning: --shard-optimizer" err' "--shard-optimizer on one process: exit $rc $(cat err)"

echo "test_cli_flags: $pass passed, $fail failed"
[ $fail -eq 0 ]
