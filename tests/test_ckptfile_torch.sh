#!/bin/sh
# test_ckptfile_torch.sh: checkpoint files between remat and PyTorch, both
# ways (see tests/ckptfile_torch.py): a file remat saves loads in PyTorch and
# gives the same loss, its AdamW moments continue in torch.optim.AdamW, and
# files written from PyTorch load in remat (--init, --resume).
# Needs Debian's python3-torch for /usr/bin/python3 (PYTHON overrides it);
# without torch it prints a skip line and exits 0. The last line is
# "test_ckptfile_torch: N passed, N failed".
exec sh "$(dirname "$0")/torch_run.sh" test_ckptfile_torch ckptfile_torch.py
