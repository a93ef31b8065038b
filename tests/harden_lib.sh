# harden_lib.sh: what the hardening rounds' shell tests share (tests/test_harden3.sh,
# tests/test_harden4.sh); source it after setting nothing. In $T: data.txt (text),
# the flags of a tiny llama ($LLAMA) and of a Hugging Face folder ($HF, $HFV: not
# quiet), run and refused; every command runs under `timeout` (a hang: exit 124).
BUILD=${BUILD:-build}
R=$(cd "$(dirname "$BUILD/remat")" && pwd)/remat
. "$(dirname "$0")/lib.sh"
TO="timeout 60"
cd "$T" || exit 1
awk 'BEGIN { for (i = 0; i < 200; i++) printf "line %d: some text to train on, %d\n", i, i * 7 % 13 }' > data.txt
LLAMA="--model llama --layers 1 --dim 16 --heads 2 --context 8 --batch 2 --threads 1 --quiet"
HF="--context 8 --batch 2 --threads 1 --quiet"
HFV="--context 8 --batch 2 --threads 1"
# config.json of the llama $LLAMA trains (export --merge-lora writes its weights with HF names)
LLAMA_CONFIG='{"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 256, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false}'
# run CMD...: exit status in $rc, stdout in out, stderr in err
run() { $TO "$@" >out 2>err; rc=$?; }
# refused WANT WHAT: exit WANT, one error line, no work done
refused() {
    want=$1
    check '[ $rc -eq $want ] && [ $(grep -c "error: ." err) -eq 1 ]' "$2: exit $rc (want $want): $(head -c 400 err)"
    check '! grep -q "^step\|done:\|saved\|loaded\|eval:" out err' "$2: worked before refusing: $(head -c 200 out)"
}
