#!/bin/sh
# test_harden3.sh: the command-line classes of the third hardening round
# (issue 28), each tried on several members:
#  1. no output replaces an input by any name: a Hugging Face cache's links
#     (snapshots/<rev>/x -> ../../blobs/<sha>), hard links, a sharded
#     folder's index and shards, a step file that already exists as a link;
#     every output flag of train, eval, bench, export (exit 2, nothing
#     written, the input unchanged).
# Every command runs under `timeout`: a hang is a failure (exit 124).
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
TO="timeout 60"
cd "$T" || exit 1
awk 'BEGIN { for (i = 0; i < 200; i++) printf "line %d: some text to train on, %d\n", i, i * 7 % 13 }' > data.txt
LLAMA="--model llama --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --quiet"
HF="--context 8 --batch 2 --threads 1 --quiet"
HFV="--context 8 --batch 2 --threads 1"
# run CMD...: exit status in $rc, stdout in out, stderr in err
run() { $TO "$@" >out 2>err; rc=$?; }
# refused WANT WHAT: exit WANT, one error line, no work done
refused() {
    want=$1
    check '[ $rc -eq $want ] && [ $(grep -c "error: ." err) -eq 1 ]' "$2: exit $rc (want $want): $(head -c 400 err)"
    check '! grep -q "^step\|done:\|saved\|loaded\|eval:" out err' "$2: worked before refusing: $(head -c 200 out)"
}

# ---- 1. file identity -------------------------------------------------------
# A Hugging Face cache: hub/blobs/<sha> holds the bytes, snapshots/<rev>/NAME
# links to them. A plain weights blob (export --merge-lora writes HF names).
"$R" train $LLAMA --lora 2 --steps 1 --save lora.st >/dev/null 2>&1 || bad "training the LoRA llama"
"$R" export --load lora.st --merge-lora --out merged.st >/dev/null 2>&1 || bad "export --merge-lora"
mkdir -p hub/blobs hub/snapshots/rev hub/shard
cp merged.st hub/blobs/w1
printf '{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false}\n' \
    > hub/blobs/c1
ln -s ../../blobs/w1 hub/snapshots/rev/model.safetensors
ln -s ../../blobs/c1 hub/snapshots/rev/config.json
# a sharded folder: the index and its one shard (any name it gives) are links
cp merged.st hub/blobs/w2
"$R" inspect merged.st | awk '/^checksum/ { on = 0 } on { printf "%s\"%s\": \"part-a.bin.safetensors\"", n++ ? ", " : "", $1 }
    /^tensors:/ { on = 1; getline }
    END { print "" }' > names
printf '{"metadata": {}, "weight_map": {%s}}\n' "$(cat names)" > hub/blobs/i2
ln -s ../blobs/c1 hub/shard/config.json
ln -s ../blobs/i2 hub/shard/model.safetensors.index.json
ln -s ../blobs/w2 hub/shard/part-a.bin.safetensors
ln hub/blobs/c1 hard-config.json
for f in w1 c1 w2 i2; do cp hub/blobs/$f $f.orig; done
blobs_kept() { cmp -s hub/blobs/w1 w1.orig && cmp -s hub/blobs/c1 c1.orig && cmp -s hub/blobs/w2 w2.orig &&
               cmp -s hub/blobs/i2 i2.orig; }
run "$R" train --init hub/snapshots/rev $HFV --steps 1 --save fine.st
check '[ $rc -eq 0 ] && grep -q "loaded 12 tensors" out' "the cached folder does not train: exit $rc $(cat err)"
run "$R" train --init hub/shard $HFV --steps 1 --save fine2.st
check '[ $rc -eq 0 ] && grep -q "loaded 12 tensors" out' "the sharded folder does not train: exit $rc $(cat err)"
S=hub/snapshots/rev
for args in "train --init $S $HF --steps 1 --save hub/blobs/w1" "train --init $S $HF --steps 1 --report hub/blobs/c1" \
    "train --init $S $HF --steps 1 --trace hub/blobs/w1" "train --init $S $HF --steps 1 --report hard-config.json" \
    "train --init $S $HF --steps 1 --save $S/../../blobs/w1" "train --init $S/ $HF --steps 1 --save ./hub/blobs/c1" \
    "train --init $S $HF --steps 2 --save run.st --save-every 1 --report hub/blobs/w1" \
    "train --init $S $HF --steps 1 --lora 2 --save-adapters hub/blobs/../snapshots/rev --report hub/blobs/c1" \
    "eval --init $S $HF --data data.txt --report hub/blobs/w1" "eval --init $S $HF --data data.txt --report hub/blobs/c1" \
    "train --init hub/shard $HF --steps 1 --save hub/blobs/w2" "train --init hub/shard $HF --steps 1 --report hub/blobs/i2" \
    "eval --init hub/shard $HF --data data.txt --report hub/blobs/w2" \
    "eval --init hub/shard $HF --data data.txt --report hub/blobs/i2" \
    "bench --init $S $HF --steps 1 --budgets 0 --rounds 1 --strategies none --csv hub/blobs/w1" \
    "bench --init hub/shard $HF --steps 1 --budgets 0 --rounds 1 --strategies none --svg hub/blobs/i2"; do
    # shellcheck disable=SC2086
    run "$R" $args
    refused 2 "$args"
    check 'blobs_kept && grep -q "replace" err' "$args: a blob changed or the reason is not said: $(cat err)"
done
# the adapter folder's files are outputs too: a link in it to an input
mkdir -p ad && ln -s ../hub/blobs/c1 ad/adapter_config.json
run "$R" train --init $S $HF --steps 1 --lora 2 --save-adapters ad
refused 2 "--save-adapters DIR whose adapter_config.json links to config.json's blob"
rm ad/adapter_config.json && ln data.txt ad/adapter_model.safetensors
run "$R" train $LLAMA --lora 2 --steps 1 --data data.txt --save-adapters ad
refused 2 "--save-adapters DIR whose adapter_model.safetensors is a hard link to --data"
rm ad/adapter_model.safetensors && ln lora.st ad/adapter_model.safetensors
run "$R" export --load lora.st --adapters ad
refused 2 "export --adapters DIR whose adapter_model.safetensors is a hard link to another input"
rm -f ad/adapter_model.safetensors
# a step file of --save-every that exists already, a link to an input
ln -s data.txt run.step000002.st
run "$R" train $LLAMA --steps 3 --data data.txt --save run.st --save-every 2
refused 2 "a step file that is a link to --data"
check '[ ! -e run.st ] && [ -L run.step000002.st ]' "the step file's link was replaced"
ln lora.st run2.step000001.st
cp lora.st lora.orig
run "$R" train $LLAMA --steps 2 --init lora.st --lora 2 --save run2.st --save-every 1
refused 2 "a step file that is a hard link to --init"
run "$R" export --load lora.st --merge-lora --out run2.step000001.st
refused 2 "export --out: a hard link to --load"
check 'cmp -s lora.st lora.orig' "--init's file changed"
# the same file spelled through a linked folder
ln -s hub/blobs blobs-link
run "$R" eval --init $S $HF --data data.txt --report blobs-link/w1
refused 2 "eval --report through a linked folder onto the weights blob"
run "$R" eval --init $S $HF --data data.txt --report report.json
check '[ $rc -eq 0 ] && [ -s report.json ] && blobs_kept' "eval --report elsewhere: exit $rc $(cat err)"

echo "test_harden3.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
