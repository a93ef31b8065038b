#!/bin/sh
# test_python.sh: the Python package rematplan (python/) as a user installs it
# (README, "PyTorch"): a venv with --system-site-packages (Debian's
# python3-torch and python3-torchvision; PEP 668 keeps pip off the system
# Python), `pip install --no-build-isolation ./python`, which builds libremat
# with portable flags and bundles it, then tests/python_rematplan.py with that
# venv's Python. Under the ASan build the package bundles that build's
# libremat.so instead (REMAT_PREBUILT), with libasan preloaded, and skips the
# four large CPU models (--skip-models: the plain run checks them). Without torch
# (or venv, pip) it says it is skipped.
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, torchvision' >/dev/null 2>&1; then
    echo "test_python: torch or torchvision is absent ($PY cannot import them); skipping python/ (rematplan)"
    echo "test_python: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 && ! "$PY" -m pip --version >/dev/null 2>&1; then
    echo "test_python: neither venv/ensurepip nor pip for $PY (apt-get install python3-venv python3-pip); skipping"
    echo "test_python: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
"$PY" -m venv --system-site-packages "$T/venv" > "$T/log" 2>&1
check '[ $? -eq 0 ]' "python3 -m venv --system-site-packages: $(tail -3 "$T/log")"
PRE=
SKIP=
if objdump -p "$BUILD/libremat.so" 2>/dev/null | grep -q "NEEDED *libasan"; then
    # the ASan build plans the small models and the 12-layer H200 profile through libremat; the
    # four large CPU models (a minute of PyTorch compute under the preloaded ASan) run in the plain
    # build's suite
    SKIP=--skip-models
    # libstdc++ preloaded after libasan, so that ASan's __cxa_throw interceptor finds the real one
    # at start-up (torch throws C++ exceptions that it turns into Python's; without it ASan's
    # CHECK "real___cxa_throw != 0" aborts the interpreter at the first)
    PRE="$(${CC:-cc} -print-file-name=libasan.so) $(${CC:-cc} -print-file-name=libstdc++.so.6)"
    export REMAT_PREBUILT="$PWD/$BUILD/libremat.so"
fi
start=$(date +%s)
"$T/venv/bin/pip" install --no-build-isolation --no-deps --no-index -q ./python > "$T/log" 2>&1
check '[ $? -eq 0 ]' "pip install ./python: $(tail -5 "$T/log")"
echo "test_python: pip install ./python took $(( $(date +%s) - start )) s"
"$T/venv/bin/python" -c 'import rematplan, sys; sys.exit(rematplan._lib.bundled() is None)'
check '[ $? -eq 0 ]' "pip install ./python bundles libremat.so in the package"
# from another folder, so that the installed package is imported, not python/
cd "$T" && LD_PRELOAD=$PRE ASAN_OPTIONS=detect_leaks=0 \
    "$T/venv/bin/python" "$OLDPWD/tests/python_rematplan.py" --remat "$OLDPWD/$BUILD/remat" $SKIP > "$T/out" 2>&1
rc=$?
cd "$OLDPWD"
grep -v '^test_python: [0-9]* passed' "$T/out"
line=$(grep '^test_python: [0-9]* passed, [0-9]* failed$' "$T/out" | tail -1)
p=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed.*/\1/p'); f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed/\1/p')
check '[ -n "$line" ] && [ $rc -eq 0 ]' "python_rematplan.py exited $rc without a clean summary"
pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
echo "test_python: $pass passed, $fail failed"
[ $fail -eq 0 ]
