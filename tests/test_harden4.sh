#!/bin/sh
# test_harden4.sh: the command-line classes of the fourth hardening round
# (issue 36), each tried on several members:
#  6. no output goes inside a model folder given as input (--init DIR,
#     export's --base-model DIR), nor into a folder holding its files (a
#     Hugging Face cache's blobs/), by any name (.., a linked folder, a
#     link to one of its files): every output flag of train, eval, bench,
#     export, and the interrupt file; exit 2, the folder unchanged.
#     --allow-output-in-model-folder lets a new file be written there, never
#     one that exists (eval --report DIR/generation_config.json and train
#     --report DIR/tokenizer.json replaced them and exited 0). The same
#     where the folder's weights are given alone (--init DIR/model.safetensors:
#     --report DIR/config.json replaced the folder's config and exited 0).
#  7. a message comparing two sizes prints their bytes where "%.2f MiB"
#     prints both alike ("0.03 MiB is below the minimum feasible 0.03 MiB").
# Every command runs under `timeout`: a hang is a failure (exit 124).
. "$(dirname "$0")/harden_lib.sh"
# the state of a folder: every name, link target and byte
state() { (cd "$1" && find . | LC_ALL=C sort | while read -r f; do
    if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; elif [ -f "$f" ]; then echo "$f $(cksum < "$f")"; else echo "$f/"; fi
    done); }

# ---- 6. a model folder: m/ (plain), hub/ (a Hugging Face cache) ---------------
"$R" train $LLAMA --lora 2 --steps 1 --save lora.st >/dev/null 2>&1 || bad "training the LoRA llama"
"$R" export --load lora.st --merge-lora --out merged.st >/dev/null 2>&1 || bad "export --merge-lora"
mkdir -p m hub/blobs hub/snapshots/rev sub
echo "$LLAMA_CONFIG" > m/config.json
cp merged.st m/model.safetensors
echo '{"bos_token_id": 1}' > m/generation_config.json
echo '{"version": "1.0"}' > m/tokenizer.json
cp m/config.json hub/blobs/c1 && cp merged.st hub/blobs/w1 && cp m/tokenizer.json hub/blobs/t1
ln -s ../../blobs/c1 hub/snapshots/rev/config.json
ln -s ../../blobs/w1 hub/snapshots/rev/model.safetensors
ln -s ../../blobs/t1 hub/snapshots/rev/tokenizer.json
ln -s m mlink
ln -s m/tokenizer.json tok-link
S=hub/snapshots/rev
m0=$(state m); h0=$(state hub); b0=$(state hub/blobs)
run "$R" eval --init m $HF --data data.txt --report report.json
check '[ $rc -eq 0 ] && [ -s report.json ]' "eval of the folder, its report elsewhere: exit $rc $(cat err)"
for args in "eval --init m $HF --data data.txt --report m/generation_config.json" \
    "train --init m $HF --steps 1 --report m/tokenizer.json" \
    "train --init m $HF --steps 1 --report m/run.json" "train --init m $HF --steps 1 --save m/run.st" \
    "train --init m $HF --steps 1 --trace m/trace.json" "train --init m $HF --steps 2 --save m/r.st --save-every 1" \
    "train --init m $HF --steps 1 --lora 2 --save-adapters m/peft" \
    "train --init m $HF --steps 1 --lora 2 --save-adapters m" \
    "eval --init m/ $HF --data data.txt --report m/../m/x.json" \
    "eval --init m $HF --data data.txt --report sub/../m/x.json" \
    "eval --init mlink $HF --data data.txt --report m/x.json" \
    "eval --init m $HF --data data.txt --report mlink/x.json" \
    "eval --init m $HF --data data.txt --report tok-link" \
    "bench --init m $HF --steps 1 --budgets 0 --rounds 1 --strategies none --csv m/b.csv" \
    "bench --init m $HF --steps 1 --budgets 0 --rounds 1 --strategies none --svg mlink/b.svg" \
    "export --load lora.st --adapters m/peft --base-model m" \
    "export --load lora.st --merge-lora --out mlink/merged.st --adapters peft --base-model m" \
    "eval --init $S $HF --data data.txt --report $S/x.json" \
    "eval --init $S $HF --data data.txt --report $S/tokenizer.json" \
    "train --init $S $HF --steps 1 --report hub/blobs/new.json" \
    "train --init $S/ $HF --steps 1 --save $S/../../blobs/x.st" \
    "eval --init m $HF --data data.txt --report m/new.json --allow-output-in-model-folder --report m/tokenizer.json" \
    "train --init m $HF --steps 1 --report m/generation_config.json --allow-output-in-model-folder" \
    "train $LLAMA --init m/model.safetensors --steps 1 --report m/config.json" \
    "train $LLAMA --init m/model.safetensors --steps 1 --report m/new.json" \
    "train $LLAMA --init $S/model.safetensors --steps 1 --report $S/tokenizer.json" \
    "bench $LLAMA --init m/model.safetensors --steps 1 --budgets 0 --rounds 1 --strategies none --csv m/tokenizer.json"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused 2 "$args"
    check '[ "$(state m)" = "$m0" ] && [ "$(state hub)" = "$h0" ] && grep -q "model folder\\|would replace" err' \
        "$args: the folder changed, or the reason is not said: $(cat err)"
done
# the messages: what is wrong (a file that exists is replaced; a new one is inside), what to do
run "$R" train --init m $HF --steps 1 --report m/tokenizer.json
check 'grep -q "would replace that file; give a path outside the folder" err && ! grep -q allow-output err' \
    "a file of the folder: said it would be replaced, no flag offered: $(cat err)"
run "$R" train --init m $HF --steps 1 --report m/run.json
check 'grep -q "inside the model folder --init .m." err && grep -q "add --allow-output-in-model-folder" err' \
    "a new file in the folder: the flag offered: $(cat err)"
run "$R" train --init $S $HF --steps 1 --report hub/blobs/new.json
check 'grep -q "hub/blobs., where it keeps its files" err' "the cache's blobs/ named: $(cat err)"
# the interrupt file (no --save) of a run started in the folder
(cd m && $TO "$R" train --init . $HF --steps 1 >../out 2>../err); rc=$?
refused 2 "train --init . from inside the folder, without --save"
check 'grep -q "the interrupt file" err && grep -q "give --save a path outside the folder" err' \
    "the interrupt file: --save offered: $(cat err)"
check '[ "$(state m)" = "$m0" ]' "the folder changed by the refused runs"

# --allow-output-in-model-folder: a new file there, written; one that exists, never
run "$R" train --init m $HF --steps 1 --report m/run.json --allow-output-in-model-folder
check '[ $rc -eq 0 ] && [ -s m/run.json ]' "a new report in the folder with the flag: exit $rc $(cat err)"
run "$R" train --init m $HF --steps 1 --report m/run.json --allow-output-in-model-folder
refused 2 "the flag, the report there already (now a file of the folder)"
run "$R" train --init m $HF --steps 2 --save m/r.st --save-every 1 --allow-output-in-model-folder
check '[ $rc -eq 0 ] && [ -s m/r.st ] && [ -s m/r.step000001.st ]' "--save and its step files with the flag: exit $rc $(cat err)"
touch m/q.step000001.st
run "$R" train --init m $HF --steps 2 --save m/q.st --save-every 1 --allow-output-in-model-folder
refused 2 "the flag, a step file there already"
check 'grep -q "step file .m/q.step000001.st" err' "the step file is named: $(cat err)"
run "$R" train --init m $HF --steps 1 --lora 2 --save-adapters m/peft --allow-output-in-model-folder
check '[ $rc -eq 0 ] && [ -s m/peft/adapter_config.json ]' "--save-adapters into the folder with the flag: exit $rc $(cat err)"
run "$R" eval --init $S $HF --data data.txt --report $S/eval.json --allow-output-in-model-folder
check '[ $rc -eq 0 ] && [ -s $S/eval.json ] && [ "$(state hub/blobs)" = "$b0" ]' \
    "a new report in the snapshot with the flag: exit $rc $(cat err)"
check 'cmp -s m/config.json hub/blobs/c1 && cmp -s m/model.safetensors merged.st' "the model's files changed"
for args in "plan $LLAMA --allow-output-in-model-folder" "sample --load lora.st --allow-output-in-model-folder"; do
    # shellcheck disable=SC2086
    run "$R" $args
    check '[ $rc -eq 2 ] && grep -q "applies to remat train, bench, export and eval" err' "$args: exit $rc $(cat err)"
done

# ---- 7. sizes compared: bytes where the MiB figures print alike ----------------
run "$R" plan $LLAMA --memory-budget 1000
least=$(sed -n 's/.*(\([0-9]*\) bytes)$/\1/p' err)
check '[ $rc -eq 1 ] && [ -n "$least" ] && grep -q "budget 0.00 MiB is below the minimum feasible 0.0[0-9] MiB for" err' \
    "a budget far below the least: MiB alone: $(cat err)"
for cmd in plan train; do
    run "$R" $cmd $LLAMA --steps 1 --memory-budget $((least - 1))
    check '[ $rc -eq 1 ] && grep -q "budget \([0-9.]*\) MiB ($((least - 1)) bytes) is below the minimum feasible [0-9.]* MiB ($least bytes)" err' \
        "$cmd: a budget one byte below the least: the bytes said: $(cat err)"
done
run "$R" plan $LLAMA --memory-budget $((least + 1))
check '[ $rc -eq 0 ] && grep -q "^budget [0-9.]* MiB ($((least + 1)) bytes) (store-all [0-9.]* MiB, minimum feasible [0-9.]* MiB ($least bytes))" out' \
    "plan one byte above the least: the bytes said: $(grep ^budget out)"

echo "test_harden4: $pass passed, $fail failed"
[ $fail -eq 0 ]
