#!/bin/sh
# test_torch.sh: cross-checks `remat train` against PyTorch (see
# tests/torch_crosscheck.py): tiny GPT and MLP models, SGD and AdamW with
# clipping, every saved parameter and the losses compared after 5 steps.
# Needs Debian's python3-torch for /usr/bin/python3 (PYTHON overrides it);
# without torch it prints a skip line and exits 0.
# Run by tests/run_all.sh (`make test`) with BUILD=build; the last line is
# "test_torch: N passed, N failed".
exec sh "$(dirname "$0")/torch_run.sh" test_torch torch_crosscheck.py
