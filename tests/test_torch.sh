#!/bin/sh
# test_torch.sh: cross-checks `remat train` against PyTorch (see
# tests/torch_crosscheck.py): tiny GPT and MLP models, SGD and AdamW with
# clipping, every saved parameter and the losses compared after 5 steps.
# Needs Debian's python3-torch for /usr/bin/python3 (PYTHON overrides it);
# without torch it prints a skip line and exits 0.
# Run by tests/run_all.sh (`make test`) with BUILD=build; the last line is
# "test_torch: N passed, N failed".
set -eu
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
here=$(dirname "$0")

if ! [ -x "$PYTHON" ] || ! "$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "test_torch: torch is absent ($PYTHON cannot import torch and numpy); skipping the PyTorch cross-check"
    echo "test_torch: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! [ -x "$BUILD/remat" ]; then
    echo "test_torch: $BUILD/remat not found (run make first)"
    echo "test_torch: 0 passed, 1 failed"
    exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
"$PYTHON" "$here/torch_crosscheck.py" --remat "$BUILD/remat" >"$log" 2>&1 || rc=$?
# the summary is printed last, alone; anything else (a crash) counts as a failure
grep -v '^test_torch: [0-9]* passed, [0-9]* failed$' "$log" || true
summary=$(grep '^test_torch: [0-9]* passed, [0-9]* failed$' "$log" | tail -1 || true)
if [ -z "$summary" ]; then
    echo "test_torch: torch_crosscheck.py exited $rc without a summary"
    echo "test_torch: 0 passed, 1 failed"
    exit 1
fi
if [ "$rc" -ne 0 ] && echo "$summary" | grep -q ' 0 failed$'; then
    echo "test_torch: torch_crosscheck.py exited $rc"
    echo "test_torch: 0 passed, 1 failed"
    exit 1
fi
echo "$summary"
exit "$rc"
