#!/bin/sh
# torch_run.sh NAME SCRIPT: runs a PyTorch test script (tests/SCRIPT) with
# /usr/bin/python3 (Debian's python3-torch; PYTHON overrides it) against
# $BUILD/remat, and ends with its "NAME: N passed, N failed" line. Without
# torch it prints a skip line and exits 0. Shared by test_torch.sh and
# test_ckptfile_torch.sh.
set -eu
name=$1
script=$2
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
here=$(dirname "$0")

if ! [ -x "$PYTHON" ] || ! "$PYTHON" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "$name: torch is absent ($PYTHON cannot import torch and numpy); skipping $script"
    echo "$name: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! [ -x "$BUILD/remat" ]; then
    echo "$name: $BUILD/remat not found (run make first)"
    echo "$name: 0 passed, 1 failed"
    exit 1
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
"$PYTHON" "$here/$script" --remat "$BUILD/remat" >"$log" 2>&1 || rc=$?
# the summary is printed last, alone; anything else (a crash) counts as a failure
grep -v "^$name: [0-9]* passed, [0-9]* failed\$" "$log" || true
summary=$(grep "^$name: [0-9]* passed, [0-9]* failed\$" "$log" | tail -1 || true)
if [ -z "$summary" ]; then
    echo "$name: $script exited $rc without a summary"
    echo "$name: 0 passed, 1 failed"
    exit 1
fi
if [ "$rc" -ne 0 ] && echo "$summary" | grep -q ' 0 failed$'; then
    echo "$name: $script exited $rc"
    echo "$name: 0 passed, 1 failed"
    exit 1
fi
echo "$summary"
exit "$rc"
