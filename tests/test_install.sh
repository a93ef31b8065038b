#!/bin/sh
# test_install.sh: `make install PREFIX=...` installs the header, libremat.a,
# libremat.so (with its soname), remat.pc and the CLI; a program built with
# `pkg-config --cflags --libs remat` against that copy alone compiles, links
# (shared, and static with --static) and runs.
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
P=$T/prefix
make -s install BUILD="$BUILD" ${REMAT_MPI_BUILD:+MPI=$REMAT_MPI_BUILD} PREFIX="$P" > "$T/log" 2>&1
check '[ $? -eq 0 ]' "make install failed: $(tail -3 "$T/log")"
for f in include/remat.h lib/libremat.a lib/libremat.so lib/pkgconfig/remat.pc bin/remat; do
    check '[ -e "$P/$f" ]' "not installed: $f"
done
check 'objdump -p "$P/lib/libremat.so" | grep -q "SONAME *libremat.so.[0-9]"' "libremat.so has no soname"
check '"$P/bin/remat" --version | grep -q "^remat "' "installed remat --version"

cat > "$T/hello.c" <<'PROG'
#include <remat.h>
#include <stdio.h>
#include <string.h>
/* A linear model trained for two steps through the installed library. */
int main(void) {
    rm_graph *g = rm_graph_new();
    const int64_t xs[2] = {4, 8}, ws[2] = {3, 8}, ys[1] = {4};
    rm_val x = rm_input(g, "x", RM_DTYPE_F32, 2, xs), y = rm_input(g, "y", RM_DTYPE_I32, 1, ys);
    rm_val w = rm_param(g, "w", 2, ws, RM_INIT_NORMAL, 0.1f, 1);
    rm_set_loss(g, rm_softmax_ce(g, rm_linear(g, x, w, -1), y));
    rm_options o;
    rm_options_default(&o);
    rm_session *s;
    if (rm_compile(g, &o, &s) != RM_OK) return printf("%s\n", rm_graph_errmsg(g)), 1;
    float *xd = rm_value_data(s, x), loss = 0;
    int *yd = rm_value_data(s, y);
    for (int i = 0; i < 32; i++) xd[i] = (float)(i % 5) / 5;
    for (int i = 0; i < 4; i++) yd[i] = i % 3;
    if (rm_step(s, 0, &loss) != RM_OK || rm_step(s, 1, &loss) != RM_OK) return 1;
    printf("remat %s loss %.3f\n", rm_version(), loss);
    rm_session_free(s);
    rm_graph_free(g);
    return strcmp(rm_version(), RM_VERSION) != 0;
}
PROG
export PKG_CONFIG_PATH="$P/lib/pkgconfig"
CC=${CC:-cc}
$CC -std=c11 -o "$T/hello" "$T/hello.c" $(pkg-config --cflags --libs remat) > "$T/log" 2>&1
check '[ $? -eq 0 ]' "build against the installed copy: $(head -5 "$T/log")"
# Under make asan libremat.so needs libasan, which must be loaded first.
PRE=
objdump -p "$P/lib/libremat.so" | grep -q "NEEDED *libasan" && PRE=$($CC -print-file-name=libasan.so)
LD_PRELOAD=$PRE LD_LIBRARY_PATH="$P/lib" "$T/hello" > "$T/out" 2>&1
check '[ $? -eq 0 ] && grep -q "^remat [0-9.]* loss" "$T/out"' "run (shared): $(cat "$T/out")"
check 'LD_LIBRARY_PATH="$P/lib" ldd "$T/hello" | grep -q "$P/lib/libremat.so"' "hello is not linked to the installed libremat.so"
$CC -std=c11 -o "$T/hello_static" "$T/hello.c" -I"$P/include" "$P/lib/libremat.a" \
    $(pkg-config --static --libs-only-other --libs-only-l remat | sed 's/-lremat//') > "$T/log" 2>&1
check '[ $? -eq 0 ]' "static build: $(head -5 "$T/log")"
"$T/hello_static" > "$T/out" 2>&1
check '[ $? -eq 0 ] && grep -q "loss" "$T/out"' "run (static): $(cat "$T/out")"
# `make` alone builds what a user of the library needs: the CLI, libremat.a
# and libremat.so (docs/PYTORCH.md loads the .so; it used to need `make
# install` or `make test` first)
make -n BUILD="$T/fresh" ${REMAT_MPI_BUILD:+MPI=$REMAT_MPI_BUILD} > "$T/plan" 2>&1
check 'grep -q -- "-shared .*-o $T/fresh/libremat.so" "$T/plan" && grep -q "ar rcs $T/fresh/libremat.a" "$T/plan" &&
       grep -q -- "-o $T/fresh/remat " "$T/plan"' "plain make does not build the CLI, libremat.a and libremat.so"
# DESTDIR (packaging): everything under DESTDIR/PREFIX, remat.pc naming PREFIX
# alone, the .so links relative, nothing written to PREFIX itself
S=$T/stage
make -s install BUILD="$BUILD" ${REMAT_MPI_BUILD:+MPI=$REMAT_MPI_BUILD} PREFIX=/opt/remat-test DESTDIR="$S" > "$T/log" 2>&1
check '[ $? -eq 0 ]' "make install DESTDIR= failed: $(tail -3 "$T/log")"
for f in include/remat.h lib/libremat.a lib/libremat.so lib/pkgconfig/remat.pc bin/remat; do
    check '[ -e "$S/opt/remat-test/$f" ]' "not installed under DESTDIR: $f"
done
check 'grep -qx "prefix=/opt/remat-test" "$S/opt/remat-test/lib/pkgconfig/remat.pc"' \
    "remat.pc's prefix under DESTDIR: $(head -1 "$S/opt/remat-test/lib/pkgconfig/remat.pc")"
check '[ "$(readlink "$S/opt/remat-test/lib/libremat.so")" = "$(readlink "$P/lib/libremat.so")" ] &&
       case "$(readlink "$S/opt/remat-test/lib/libremat.so")" in /*) false ;; *) true ;; esac' "the .so link is not relative"
check '[ ! -e /opt/remat-test ]' "make install DESTDIR= wrote to PREFIX itself"
echo "test_install: $pass passed, $fail failed"
[ $fail -eq 0 ]
