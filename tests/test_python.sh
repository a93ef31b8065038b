#!/bin/sh
# test_python.sh: the Python package rematplan (python/) as a user installs it
# (README, "PyTorch"): `make install` into a scratch prefix, a venv with
# --system-site-packages (Debian's python3-torch; PEP 668 keeps pip off the
# system Python), `pip install --no-build-isolation ./python`, then
# tests/python_rematplan.py with that venv's Python, libremat found through
# pkg-config. Without torch (or venv, pip) it says it is skipped. Under the
# ASan build libremat.so needs libasan loaded first: it is preloaded.
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-/usr/bin/python3}
if ! [ -x "$PY" ] || ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    echo "test_python: torch is absent ($PY cannot import torch); skipping python/ (rematplan)"
    echo "test_python: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1 && ! "$PY" -m pip --version >/dev/null 2>&1; then
    echo "test_python: neither venv/ensurepip nor pip for $PY (apt-get install python3-venv python3-pip); skipping"
    echo "test_python: 0 passed, 0 failed, 1 skipped"
    exit 0
fi
P=$T/prefix
make -s install BUILD="$BUILD" ${REMAT_MPI_BUILD:+MPI=$REMAT_MPI_BUILD} PREFIX="$P" > "$T/log" 2>&1
check '[ $? -eq 0 ]' "make install failed: $(tail -3 "$T/log")"
"$PY" -m venv --system-site-packages "$T/venv" > "$T/log" 2>&1
check '[ $? -eq 0 ]' "python3 -m venv --system-site-packages: $(tail -3 "$T/log")"
cp -r python "$T/src"  # pip builds in the folder it installs: not in the work tree
"$T/venv/bin/pip" install --no-build-isolation --no-deps --no-index -q "$T/src" > "$T/log" 2>&1
check '[ $? -eq 0 ]' "pip install ./python: $(tail -5 "$T/log")"
PRE=
objdump -p "$P/lib/libremat.so" | grep -q "NEEDED *libasan" && PRE=$(${CC:-cc} -print-file-name=libasan.so)
# from another folder, so that the installed package is imported, not python/
cd "$T" && PKG_CONFIG_PATH="$P/lib/pkgconfig" LD_PRELOAD=$PRE ASAN_OPTIONS=detect_leaks=0 \
    "$T/venv/bin/python" "$OLDPWD/tests/python_rematplan.py" --remat "$P/bin/remat" > "$T/out" 2>&1
rc=$?
cd "$OLDPWD"
grep -v '^test_python: [0-9]* passed' "$T/out"
line=$(grep '^test_python: [0-9]* passed, [0-9]* failed$' "$T/out" | tail -1)
p=$(echo "$line" | sed -n 's/.* \([0-9]*\) passed.*/\1/p'); f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed/\1/p')
check '[ -n "$line" ] && [ $rc -eq 0 ]' "python_rematplan.py exited $rc without a clean summary"
pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0}))
echo "test_python: $pass passed, $fail failed"
[ $fail -eq 0 ]
