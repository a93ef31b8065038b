# bench/lib.sh: what the benchmark scripts share; source it after `cd` to
# the repository root. REMAT [build/remat] PYTHON [/usr/bin/python3, which
# has Debian's torch and numpy] THREADS [all cores]; field FILE KEY prints
# the first number under KEY in a JSON report.
REMAT=${REMAT:-build/remat}
PYTHON=${PYTHON:-/usr/bin/python3}
THREADS=${THREADS:-$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)}
field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1" | head -1; }
