#!/bin/sh
# `make run`: train the default GPT on the built-in corpus for about two
# minutes on 2 cores under a memory budget of half what storing every
# activation would take, print the memory saved and the overhead paid (both
# measured), save the model and show a generated sample.
set -eu
REMAT=${1:-build/remat}
OUT=${OUT:-out}
mkdir -p "$OUT"
"$REMAT" train --layers 4 --dim 128 --heads 4 --context 64 --batch 16 \
    --steps 1500 --lr 2e-3 --warmup 50 --lr-schedule cosine --dropout 0.0 --memory-budget 50% \
    --eval-every 250 --save "$OUT/model.safetensors" --report "$OUT/report.json"
echo
echo "--- a sample from $OUT/model.safetensors:"
"$REMAT" sample --load "$OUT/model.safetensors" --prompt "The step " --tokens 300 --temperature 0.8 --top-k 40 --seed 7
