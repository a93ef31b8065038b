#!/bin/sh
# test_torch_bf16.sh: one step of remat train --precision bf16 against PyTorch's bf16
# CPU autocast (tests/torch_bf16.py): every gradient within a relative 2e-2.
# Without torch it prints a skip line and exits 0.
exec sh "$(dirname "$0")/torch_run.sh" test_torch_bf16 torch_bf16.py
