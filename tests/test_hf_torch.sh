#!/bin/sh
# test_hf_torch.sh: remat on Hugging Face LlamaForCausalLM folders that
# PyTorch writes (tests/hf_torch.py, tests/hf_llama.py): logits, eval and
# refusals. Without python3-torch it prints a skip line and exits 0.
exec sh "$(dirname "$0")/torch_run.sh" test_hf_torch hf_torch.py
