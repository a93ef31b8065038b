#!/bin/sh
# test_examples.sh: the programs of examples/ run, and the example trainer
# stopped after 6 steps and resumed ends with the same training state, bit
# for bit, as a run of 12 steps that never stopped (under its memory budget);
# the fine-tuning example trains LoRA adapters on a Hugging Face folder under
# a memory limit, the same bits as remat train --init --lora.
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
# finetune: LoRA on a Hugging Face folder (tests/hf_tiny.py writes one: BF16,
# 2 layers, vocabulary 256) under a memory limit that leaves the activations
# too little to keep everything, so the plan recomputes. Its adapters are
# `remat train --init --lora`'s with the same settings, bit for bit (the
# command keeps everything: recomputation changes no bit), and the
# validation loss falls. GOMP_SPINCOUNT as remat sets it for itself (remat.h,
# "Threads"): idle threads that spin slow a shared machine down.
export GOMP_SPINCOUNT=10000
python3 "$(dirname "$0")/hf_tiny.py" "$T/hf" 7
"$E/finetune" "$T/hf" "$T/ad" 20 3.5MiB > "$T/ft" 2>&1
check '[ $? -eq 0 ] && grep -q "^saved the adapters" "$T/ft"' "finetune: $(tail -3 "$T/ft")"
over=$(sed -n 's/.*recomputing costs \([0-9]*\)% more FLOPs.*/\1/p' "$T/ft")
check '[ -n "$over" ] && [ "$over" -gt 0 ]' "finetune under 3.5MiB recomputes nothing: $(grep "^plan" "$T/ft")"
before=$(sed -n 's/^before: validation loss //p' "$T/ft"); after=$(sed -n 's/^after: validation loss //p' "$T/ft")
check 'awk -v b="$before" -v a="$after" "BEGIN { exit !(a > 0 && a < b - 0.05) }"' \
    "finetune: validation loss $before before, $after after"
left=$(sed -n 's/.*activations [0-9.]* of \([0-9.]*\) MiB left.*/\1/p' "$T/ft")
act=$(sed -n 's/^activations: \([0-9.]*\) MiB planned, \([0-9.]*\) MiB measured.*/\1 \2/p' "$T/ft")
check 'echo "$act $left" | awk "{ exit !(NF == 3 && \$2 <= \$1 && \$1 <= \$3) }"' \
    "finetune: activations (planned, measured) $act MiB, not within the $left MiB the limit leaves them"
check 'grep -q "\"r\":[[:space:]]*8" "$T/ad/adapter_config.json" && grep -q "\"peft_type\":[[:space:]]*\"LORA\"" "$T/ad/adapter_config.json"' \
    "finetune: adapter_config.json: $(cat "$T/ad/adapter_config.json")"
"$BUILD/remat" train --init "$T/hf" --lora 8 --lora-alpha 16 --lora-dropout 0.05 --lr 1e-3 --lr-schedule cosine \
    --warmup 5 --context 64 --batch 4 --steps 20 --save-adapters "$T/cli" --quiet > "$T/cli.out" 2>&1
check '[ $? -eq 0 ] && cmp -s "$T/ad/adapter_model.safetensors" "$T/cli/adapter_model.safetensors"' \
    "finetune's adapters differ from remat train --init --lora's: $(tail -2 "$T/cli.out")"
# what goes wrong is said in one line
"$E/finetune" "$T/hf" "$T/ad2" 5 1MiB > "$T/small" 2>&1
check '[ $? -eq 1 ] && grep -q "^finetune: .*the least limit that works is" "$T/small" && [ ! -e "$T/ad2" ]' \
    "finetune under 1MiB: $(cat "$T/small")"
"$E/finetune" "$T/nothing" "$T/ad3" > "$T/none" 2>&1
check '[ $? -eq 1 ] && [ "$(grep -c "^finetune: " "$T/none")" -eq 1 ]' "finetune without a folder: $(cat "$T/none")"
"$E/finetune" "$T/hf" > "$T/usage" 2>&1
check '[ $? -eq 2 ] && grep -q "^usage: " "$T/usage"' "finetune without arguments: $(cat "$T/usage")"
echo "test_examples: $pass passed, $fail failed"
[ $fail -eq 0 ]
