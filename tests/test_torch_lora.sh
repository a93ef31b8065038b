#!/bin/sh
# test_torch_lora.sh: LoRA fine-tuning of a small LLaMA against PyTorch
# (tests/torch_lora.py): the adapters after 5 AdamW steps, the frozen base,
# the PEFT folder and the merged model. Without python3-torch it prints a
# skip line and exits 0.
exec sh "$(dirname "$0")/torch_run.sh" test_torch_lora torch_lora.py
