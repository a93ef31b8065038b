#!/bin/sh
# test_finetune_cli.sh: fine-tuning from the command line (docs/MODELS.md,
# "Fine-tuning"). --freeze and --train-only: the report counts the smaller
# state and backward, the frozen weights stay as --init gave them, a run
# resumes bit for bit with what it froze (and refuses another --freeze),
# and misuse is a usage error (exit 2) naming what is wrong. --lora: the
# base stays as --init gave it, strategies and a budget give the same
# bytes with dropout on, a run resumes bit for bit, --save-adapters and
# remat export write the PEFT folder and the merged model (whose
# validation loss is the LoRA model's), and misuse is named.
BUILD=${BUILD:-build}
R=$BUILD/remat
. "$(dirname "$0")/lib.sh"
CMP="python3 $(cd "$(dirname "$0")" && pwd)/st_compare.py"
sha() { sha256sum "$1" | cut -d' ' -f1; }
# a tensor's bytes in a safetensors file (pure Python, as st_compare.py)
tensor() {
    python3 - "$1" "$2" <<'EOF'
import json, struct, sys, hashlib
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
t = json.loads(raw[8:8 + n])[sys.argv[2]]
a, b = t["data_offsets"]
print(hashlib.sha256(raw[8 + n + a:8 + n + b]).hexdigest())
EOF
}

LLAMA="--model llama --layers 2 --dim 32 --heads 4 --context 16 --batch 4 --dropout 0.1 --seed 5 --threads 2 --quiet"
"$R" train $LLAMA --steps 2 --save "$T/base.st" >/dev/null || bad "base run exited $?"
"$R" train $LLAMA --steps 3 --init "$T/base.st" --report "$T/full.json" >/dev/null || bad "full run exited $?"
F="model.embed_tokens,lm_head,model.layers.0"
"$R" train $LLAMA --steps 3 --init "$T/base.st" --freeze "$F" --report "$T/frozen.json" --save "$T/frozen.st" \
    >/dev/null || bad "--freeze run exited $?"
for n in model.embed_tokens.weight lm_head.weight model.layers.0.mlp.up_proj.weight; do
    check '[ "$(tensor "$T/frozen.st" $n)" = "$(tensor "$T/base.st" $n)" ]' "--freeze: $n changed"
done
check '[ "$(tensor "$T/frozen.st" model.layers.1.mlp.up_proj.weight)" != "$(tensor "$T/base.st" model.layers.1.mlp.up_proj.weight)" ]' \
    "--freeze: a trainable weight did not change"
check '! "$R" inspect "$T/frozen.st" | grep -q "optimizer.m.lm_head"' "--freeze: the file holds moments of a frozen weight"
check '"$R" inspect "$T/frozen.st" | grep -q "freeze.*model.embed_tokens,lm_head"' "--freeze: not in the file's metadata"
tp=$(field "$T/frozen.json" trainable_params); p=$(field "$T/frozen.json" params)
gb=$(field "$T/frozen.json" grad_bytes); gf=$(field "$T/full.json" grad_bytes)
bf=$(field "$T/frozen.json" backward_flops); bfull=$(field "$T/full.json" backward_flops)
check '[ -n "$tp" ] && [ "$tp" -lt "$p" ] && [ "$gb" -lt "$gf" ] && [ "$((gb / 4))" -ge "$tp" ]' \
    "report: trainable $tp of $p params, grad bytes $gb (full $gf)"
check 'awk -v a="$bf" -v b="$bfull" "BEGIN { exit !(a > 0 && a < 0.75 * b) }"' \
    "report: backward FLOPs $bf frozen vs $bfull full"
# --train-only: the same set said the other way round
"$R" train $LLAMA --steps 3 --init "$T/base.st" --train-only model.layers.1,model.norm --save "$T/only.st" >/dev/null \
    || bad "--train-only run exited $?"
check '$CMP "$T/only.st" "$T/frozen.st" >/dev/null' "--train-only model.layers.1,model.norm differs from --freeze $F: $($CMP "$T/only.st" "$T/frozen.st")"

# resume: 2 + 2 steps == 4 steps, the freeze taken from the file
"$R" train $LLAMA --steps 4 --freeze "$F" --save "$T/r.st" --save-every 2 >/dev/null || bad "run to resume exited $?"
"$R" train --resume "$T/r.step000002.st" --steps 4 --threads 2 --quiet --save "$T/r2.st" || bad "resume exited $?"
check '[ "$(sha "$T/r2.st")" = "$(sha "$T/r.st")" ]' "--freeze resumed at step 2 differs: $($CMP "$T/r2.st" "$T/r.st")"
"$R" train --resume "$T/r.step000002.st" --steps 4 --freeze lm_head --quiet >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "was trained with --freeze" "$T/e"' "resume with another --freeze: exit $rc, $(cat "$T/e")"

# usage errors
"$R" train $LLAMA --steps 1 --freeze model.layers.9 >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "model.layers.9.*matches no parameter" "$T/e"' "a pattern matching nothing: exit $rc, $(cat "$T/e")"
"$R" train $LLAMA --steps 1 --freeze '*' >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "no parameter to train" "$T/e"' "--freeze '*': exit $rc, $(cat "$T/e")"
"$R" sample --load "$T/frozen.st" --freeze lm_head >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "applies to remat train" "$T/e"' "sample --freeze: exit $rc, $(cat "$T/e")"
"$R" train $LLAMA --steps 1 --freeze '' >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ]' "--freeze '': exit $rc"
# plan sees the pruned backward too
"$R" plan $LLAMA --freeze "$F" --memory-budget 100% >"$T/plan.txt" 2>&1 || bad "plan --freeze exited $?: $(cat "$T/plan.txt")"

# ---- LoRA ----
L="$LLAMA --init $T/base.st --lora 4 --lora-alpha 8 --lora-dropout 0.1"
for c in none sqrt selective; do
    "$R" train $L --steps 3 --checkpoint $c --save "$T/lora_$c.st" >/dev/null || bad "--lora --checkpoint $c exited $?"
done
"$R" train $L --steps 3 --memory-budget 80% --save "$T/lora_budget.st" >/dev/null || bad "--lora --memory-budget exited $?"
for c in sqrt selective budget; do
    check '[ "$(sha "$T/lora_$c.st")" = "$(sha "$T/lora_none.st")" ]' "--lora: $c differs from none: $($CMP "$T/lora_$c.st" "$T/lora_none.st")"
done
for n in model.embed_tokens.weight model.layers.1.self_attn.q_proj.weight lm_head.weight model.norm.weight; do
    check '[ "$(tensor "$T/lora_none.st" $n)" = "$(tensor "$T/base.st" $n)" ]' "--lora: the base's $n changed"
done
check '"$R" inspect "$T/lora_none.st" | grep -q "lora_targets = all"' "--lora: no lora_targets in the metadata"
# resume: 2 + 2 steps == 4 steps, the adapters and their moments from the file
"$R" train $L --steps 4 --save "$T/lr.st" --save-every 2 --save-adapters "$T/ad" --report "$T/lr.json" >/dev/null \
    || bad "--lora run to resume exited $?"
"$R" train --resume "$T/lr.step000002.st" --steps 4 --threads 2 --quiet --save "$T/lr2.st" || bad "--lora resume exited $?"
check '[ "$(sha "$T/lr2.st")" = "$(sha "$T/lr.st")" ]' "--lora resumed at step 2 differs: $($CMP "$T/lr2.st" "$T/lr.st")"
"$R" train --resume "$T/lr.step000002.st" --steps 4 --lora 8 --quiet >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "with --lora 4" "$T/e"' "resume with another --lora: exit $rc, $(cat "$T/e")"
# the PEFT folder, and the same from remat export
check '[ -s "$T/ad/adapter_model.safetensors" ] && grep -q "\"peft_type\":.*\"LORA\"" "$T/ad/adapter_config.json"' \
    "--save-adapters: no PEFT folder"
check '[ "$(tensor "$T/ad/adapter_model.safetensors" base_model.model.model.layers.1.mlp.down_proj.lora_B.weight)" = "$(tensor "$T/lr.st" model.layers.1.mlp.down_proj.lora_B.weight)" ]' \
    "--save-adapters: down_proj's lora_B differs from the run's"
"$R" export --load "$T/lr.st" --adapters "$T/ad2" --base-model my/base >/dev/null || bad "export --adapters exited $?"
check 'cmp -s "$T/ad/adapter_model.safetensors" "$T/ad2/adapter_model.safetensors" && grep -q "my/base" "$T/ad2/adapter_config.json"' \
    "export --adapters differs from --save-adapters"
# merged: a plain llama (no adapters, no LoRA keys) with the LoRA model's validation loss
"$R" export --load "$T/lr.st" --merge-lora --out "$T/merged.st" >/dev/null || bad "export --merge-lora exited $?"
check '! "$R" inspect "$T/merged.st" | grep -q "lora"' "the merged file still names LoRA"
"$R" train $LLAMA --steps 0 --init "$T/merged.st" --report "$T/m.json" >/dev/null || bad "--init merged exited $?"
check 'awk -v a="$(field "$T/m.json" val_loss)" -v b="$(field "$T/lr.json" val_loss)" "BEGIN { d = a - b; exit !(a > 0 && d < 1e-5 && d > -1e-5) }"' \
    "merged val loss $(field "$T/m.json" val_loss) vs the LoRA model's $(field "$T/lr.json" val_loss)"
check '[ -n "$("$R" sample --load "$T/lr.st" --prompt "The " --tokens 4 --threads 1)" ]' "sample of a LoRA file"
# misuse
"$R" train $LLAMA --steps 1 --init "$T/lr.st" >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 1 ] && grep -q "holds the LoRA adapter" "$T/e"' "--init a LoRA file without --lora: exit $rc, $(cat "$T/e")"
"$R" train $LLAMA --steps 1 --lora-alpha 16 >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "needs --lora" "$T/e"' "--lora-alpha without --lora: exit $rc, $(cat "$T/e")"
"$R" train $LLAMA --steps 1 --lora 4 --lora-targets q_proj,x_proj >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q "x_proj" "$T/e"' "--lora-targets x_proj: exit $rc, $(cat "$T/e")"
"$R" train --model mlp --steps 1 --lora 4 >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ] && grep -q -- "--lora applies to" "$T/e"' "--lora on an mlp: exit $rc, $(cat "$T/e")"
"$R" train $LLAMA --steps 1 --save-adapters "$T/x" >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ]' "--save-adapters without --lora: exit $rc"
"$R" export --load "$T/base.st" --merge-lora --out "$T/x.st" >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 1 ] && grep -q "holds no LoRA adapters" "$T/e"' "export of a file without adapters: exit $rc, $(cat "$T/e")"
"$R" export --load "$T/lr.st" >/dev/null 2>"$T/e"; rc=$?
check '[ $rc -eq 2 ]' "export with nothing to write: exit $rc"

echo "test_finetune_cli: $pass passed, $fail failed"
[ $fail -eq 0 ]
