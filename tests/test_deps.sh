#!/bin/sh
# test_deps.sh: no import circles between the files of src/, nor between
# those of cli/ (the command line: main.c on top, help.c a leaf). The graph has
# an edge A -> B when A's object uses a symbol that B's object defines (nm)
# and when A includes B (#include "..."). A circle such as the old
# lower.c -> schedule.c -> revolve.c -> lower.c fails the test, named.
# tools/cycles.awk finds circles; it is checked first on graphs with a known
# answer, so the test cannot pass by finding nothing.
BUILD=${BUILD:-build}
. "$(dirname "$0")/lib.sh"
cycles() { awk -f tools/cycles.awk "$@"; }

# the finder itself: a circle of three, a self-loop, and a graph without one
check '[ -n "$(printf "a b\nb c\nc a\nx a\n" | cycles)" ]' "the circle a -> b -> c -> a is not found"
check '[ -n "$(printf "a a\n" | cycles)" ]' "a file using itself is not a circle (it should be)"
check '[ -z "$(printf "a b\nb c\na c\nx a\n" | cycles)" ]' "a circle is found in a graph without one"

# symbol edges: who defines what, then who uses it (src/ and cli/ apart:
# cli/ uses the library through remat.h only, and never the reverse)
edges() { # OBJECTS...: "user definer" lines
for o in "$@"; do
    f=${o#"$BUILD"/}; f=${f%.o}.c
    nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 { print "D", $3, f }'
    nm -u "$o" | awk -v f="$f" '{ print "U", $NF, f }'
done > "$T/syms"
awk '$1 == "D" { def[$2] = $3 } $1 == "U" { use[NR] = $3 " " $2 }
     END { for (i in use) { split(use[i], u, " "); if ((u[2] in def) && def[u[2]] != u[1]) print u[1], def[u[2]] } }' \
    "$T/syms"
}
objs=$(ls "$BUILD"/src/*/*.o "$BUILD"/src/*/*/*.o 2>/dev/null)
check '[ -n "$objs" ]' "no objects under $BUILD/src: run make first"
# shellcheck disable=SC2086
edges $objs > "$T/edges"
n_sym=$(wc -l < "$T/edges")
check '[ "$n_sym" -gt 0 ]' "no symbol edges between objects: is nm installed?"

# include edges: "x/y.h" is src/x/y.h, a bare "y.h" is next to the includer
for f in src/*/*.c src/*/*.h src/*/*/*.c src/*/*/*.h; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
        if [ -f "src/$h" ]; then echo "$f src/$h"; elif [ -f "$(dirname "$f")/$h" ]; then echo "$f $(dirname "$f")/$h"; fi
    done
done >> "$T/edges"

circle=$(cycles "$T/edges")
check '[ -z "$circle" ]' "import circle between files of src/: $circle"

# cli/: the same, from its objects and its includes
cobjs=$(ls "$BUILD"/cli/*.o 2>/dev/null)
check '[ -n "$cobjs" ]' "no objects under $BUILD/cli: run make first"
# shellcheck disable=SC2086
edges $cobjs > "$T/cedges"
check '[ -s "$T/cedges" ]' "no symbol edges between the objects of cli/"
for f in cli/*.c cli/*.h; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
        [ -f "cli/$h" ] && echo "$f cli/$h"
    done
done >> "$T/cedges"
circle=$(cycles "$T/cedges")
check '[ -z "$circle" ]' "import circle between files of cli/: $circle"
echo "test_deps: $(sort -u "$T/edges" | wc -l) edges between $(tr ' ' '\n' < "$T/edges" | sort -u | wc -l) files"
echo "test_deps: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
