#!/bin/sh
# test_torch_models.sh: cross-checks `remat train` for the llama, uvit and
# encdec models against PyTorch implementations (tests/torch_models.py):
# every saved parameter and the losses after 5 steps, SGD and AdamW.
# Without python3-torch it prints a skip line and exits 0.
exec sh "$(dirname "$0")/torch_run.sh" test_torch_models torch_models.py
