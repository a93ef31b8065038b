#!/bin/sh
# test_deps.sh: the arrows between the files of src/ point one way.
# - No circle between any two files, in one folder or across folders
#   (tools/cycles.awk), nor between those of cli/ (main.c on top, help.c a
#   leaf). The graph has an edge A -> B when A's object uses a symbol that
#   B's object defines (nm) and when A includes B (#include "..."). A header
#   x.h counts as part of x.c beside it, so calling an inline function of
#   trace.h is using trace.c; a folder's own header (exec/exec.h,
#   plan/chain/chain.h) stands for the folder and is a file of its own.
# - No arrow back up between folders: docs/ARCHITECTURE.md lists the folders
#   of src/, the bottom layer first, and a file may use only files of its own
#   folder or of folders listed before it (tools/layers.awk). That list names
#   every folder of src/ and no other.
# Both finders are first checked on graphs with a known answer, so the test
# cannot pass by finding nothing.
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
cycles() { awk -f tools/cycles.awk "$@"; }
backup() { awk -v layers="$1" -f tools/layers.awk; }

# the finders themselves: a circle of three, a self-loop, a graph without one
check '[ -n "$(printf "a b\nb c\nc a\nx a\n" | cycles)" ]' "the circle a -> b -> c -> a is not found"
check '[ -z "$(printf "a b\nb c\na c\nx a\n" | cycles)" ]' "a circle is found in a graph without one"
check '[ -n "$(printf "a a\n" | cycles)" ]' "a file using itself is not a circle (it should be)"
printf 'src/low\nsrc/high\n' > "$T/layers.txt"
check '[ "$(printf "src/high/a.c src/low/b.c\nsrc/low/b.c src/low/c.c\n" | backup "$T/layers.txt")" = "" ]' \
    "an arrow down, or inside a folder, is taken for one back up"
check '[ "$(printf "src/low/b.c src/high/a.c\n" | backup "$T/layers.txt")" = "src/low/b.c -> src/high/a.c" ]' \
    "the arrow back up src/low/b.c -> src/high/a.c is not found"
check '[ "$(printf "src/other/b.c src/low/a.c\n" | backup "$T/layers.txt")" = "unlisted src/other" ]' \
    "a folder missing from the layers is not named"

# edges OBJECTS...: "user definer" lines, from who defines what, then who uses it
edges() {
for o in "$@"; do
    f=${o#"$BUILD"/}; f=${f%.o}.c
    nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 { print "D", $3, f }'
    nm -u "$o" | awk -v f="$f" '{ print "U", $NF, f }'
done > "$T/syms"
awk '$1 == "D" { def[$2] = $3 } $1 == "U" { use[NR] = $3 " " $2 }
     END { for (i in use) { split(use[i], u, " "); if ((u[2] in def) && def[u[2]] != u[1]) print u[1], def[u[2]] } }' \
    "$T/syms"
}
# includes DIR FILES...: "includer included" lines; in src/ "x/y.h" is
# src/x/y.h and a bare "y.h" is next to the includer; in cli/ all are bare
includes() {
root=$1; shift
for f in "$@"; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
        if [ -f "$root/$h" ]; then echo "$f $root/$h"; elif [ -f "$(dirname "$f")/$h" ]; then echo "$f $(dirname "$f")/$h"; fi
    done
done
}
# inline_edges HEADERS -- FILES: "user owner" for each file that calls a
# static inline function of a header x.h whose own file x.c stands beside
# it (not a folder's header): calling the function is using x.c's code
inline_edges() {
hs=; while [ "$1" != "--" ]; do hs="$hs $1"; shift; done; shift
for h in $hs; do
    d=$(dirname "$h"); b=$(basename "$h" .h)
    [ "$b" = "$(basename "$d")" ] && continue
    [ -f "$d/$b.c" ] || continue
    for fn in $(sed -n 's/^static inline [^(]*[ *]\([A-Za-z_][A-Za-z0-9_]*\)(.*/\1/p' "$h"); do
        grep -lE "(^|[^A-Za-z0-9_])$fn *\(" "$@" | while read -r u; do [ "$u" != "$d/$b.c" ] && echo "$u $d/$b.c"; done
    done
done
}
# the inline edges themselves, on a tree with a known answer: y.c calls x.h's
# inline function, so y.c uses x.c; a.h is the folder a's own header
mkdir -p "$T/src/a"
printf 'static inline int x_twice(int v) { return 2 * v; }\n' > "$T/src/a/x.h"
printf 'static inline int a_one(void) { return 1; }\n' > "$T/src/a/a.h"
printf 'int x(void) { return x_twice(1); }\n' > "$T/src/a/x.c"
printf 'int y(void) { return x_twice (2) + a_one(); }\n' > "$T/src/a/y.c"
printf 'int a(void) { return 0; }\n' > "$T/src/a/a.c"
check '[ "$(inline_edges "$T/src/a/x.h" "$T/src/a/a.h" -- "$T/src/a/x.c" "$T/src/a/y.c" "$T/src/a/a.c")" = "$T/src/a/y.c $T/src/a/x.c" ]' \
    "a call of a header's inline function is not taken for a use of the header's own .c file"

srcs=$(ls src/*/*.c src/*/*/*.c 2>/dev/null)
objs=$(for f in $srcs; do echo "$BUILD/${f%.c}.o"; done)
# shellcheck disable=SC2086
check 'ls $objs >/dev/null 2>&1' "objects missing under $BUILD/src: run make first"
# shellcheck disable=SC2086
edges $objs > "$T/raw"
n_sym=$(wc -l < "$T/raw")
check '[ "$n_sym" -gt 0 ]' "no symbol edges between objects: is nm installed?"
hdrs=$(ls src/*/*.h src/*/*/*.h 2>/dev/null)
# shellcheck disable=SC2086
includes src $srcs $hdrs >> "$T/raw"
# shellcheck disable=SC2086
inline_edges $hdrs -- $srcs >> "$T/raw"
sort -u "$T/raw" > "$T/edges"

circle=$(cycles "$T/edges")
check '[ -z "$circle" ]' "import circle between files of src/: $circle"

# the layers: the block after "<!-- test_deps.sh: layers -->" in docs/ARCHITECTURE.md,
# a folder at the start of a line (indented lines go on describing the one before)
awk '/^<!-- test_deps.sh: layers -->/ { on = 1; next }
     on && /^```/ { if (++fence == 2) exit; next }
     on && fence == 1 && /^[^ \t]/ { f = $1; sub(/\/$/, "", f); print f }' docs/ARCHITECTURE.md > "$T/layers"
check '[ -s "$T/layers" ]' "docs/ARCHITECTURE.md has no layer list (a block after <!-- test_deps.sh: layers -->)"
for f in $srcs $hdrs; do dirname "$f"; done | sort -u > "$T/folders"
sort -u "$T/layers" > "$T/listed"
missing=$(comm -23 "$T/folders" "$T/listed" | tr '\n' ' ')
check '[ -z "$missing" ]' "folders of src/ missing from docs/ARCHITECTURE.md's layers: $missing"
extra=$(comm -13 "$T/folders" "$T/listed" | tr '\n' ' ')
check '[ -z "$extra" ]' "docs/ARCHITECTURE.md's layers name folders src/ does not have: $extra"
check '[ "$(sort "$T/layers" | uniq -d)" = "" ]' "docs/ARCHITECTURE.md's layers name a folder twice"
backup "$T/layers" < "$T/edges" > "$T/up"
check '[ ! -s "$T/up" ]' "arrows back up between the folders of docs/ARCHITECTURE.md (a folder uses only those listed before it): $(tr '\n' ';' < "$T/up")"

# cli/: the same circles, from its objects and its includes
cobjs=$(ls "$BUILD"/cli/*.o 2>/dev/null)
check '[ -n "$cobjs" ]' "no objects under $BUILD/cli: run make first"
# shellcheck disable=SC2086
edges $cobjs > "$T/cedges"
check '[ -s "$T/cedges" ]' "no symbol edges between the objects of cli/"
# shellcheck disable=SC2046
includes cli $(ls cli/*.c cli/*.h) >> "$T/cedges"
# shellcheck disable=SC2046
inline_edges $(ls cli/*.h) -- $(ls cli/*.c) >> "$T/cedges"
circle=$(cycles "$T/cedges")
check '[ -z "$circle" ]' "import circle between files of cli/: $circle"
echo "test_deps: $(wc -l < "$T/edges") edges between $(tr ' ' '\n' < "$T/edges" | sort -u | wc -l) files of src/ in $(wc -l < "$T/layers") layers"
echo "test_deps: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
