#!/bin/sh
# test_public_api.sh: the CLI and the examples are clients of the public API
# only: every file of cli/ and examples/ compiles against include/ alone
# (no -Isrc) and includes no internal header; and every function remat.h
# declares carries a comment.
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
CC=${CC:-cc}
CJSON=$(pkg-config --cflags libcjson 2>/dev/null)
for f in cli/*.c examples/*.c; do
    [ -e "$f" ] || continue
    $CC -std=c11 -Wall -Wextra -Werror -D_POSIX_C_SOURCE=200809L -fopenmp $CJSON -Iinclude -fsyntax-only "$f" \
        2> "$T/err"
    check '[ $? -eq 0 ]' "$f does not compile with -Iinclude alone: $(head -3 "$T/err")"
    check '! grep -qE "#include \"(internal|train/|graph/|plan/|exec/|ops/|util/|models/)" "$f"' \
        "$f includes an internal header"
done
# Every function remat.h declares has a comment right above it or above its
# group of declarations (tests/undocumented.awk).
awk -f tests/undocumented.awk include/remat.h > "$T/undoc"
check '[ ! -s "$T/undoc" ]' "remat.h: $(cat "$T/undoc")"
echo "test_public_api: $pass passed, $fail failed"
[ $fail -eq 0 ]
