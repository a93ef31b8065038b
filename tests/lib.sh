# lib.sh: what the shell tests share; source it from tests/test_*.sh.
# A scratch folder $T (removed on exit), pass/fail counters, check CMD MSG
# (counts CMD's truth, prints MSG on failure) and field FILE KEY (a number
# from a JSON report).
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
pass=0; fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
check() { if eval "$1"; then ok; else bad "$2"; fi; }
field() { sed -n "s/.*\"$2\": \([0-9.]*\).*/\1/p" "$1"; }
