#!/bin/sh
# test_deps.sh: no import circles between the files of src/. The graph has
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

# symbol edges: who defines what, then who uses it
objs=$(ls "$BUILD"/src/*/*.o 2>/dev/null)
check '[ -n "$objs" ]' "no objects under $BUILD/src: run make first"
for o in $objs; do
    f=${o#"$BUILD"/}; f=${f%.o}.c
    nm --defined-only -g "$o" | awk -v f="$f" 'NF == 3 { print "D", $3, f }'
    nm -u "$o" | awk -v f="$f" '{ print "U", $NF, f }'
done > "$T/syms"
awk '$1 == "D" { def[$2] = $3 } $1 == "U" { use[NR] = $3 " " $2 }
     END { for (i in use) { split(use[i], u, " "); if ((u[2] in def) && def[u[2]] != u[1]) print u[1], def[u[2]] } }' \
    "$T/syms" > "$T/edges"
n_sym=$(wc -l < "$T/edges")
check '[ "$n_sym" -gt 0 ]' "no symbol edges between objects: is nm installed?"

# include edges: "x/y.h" is src/x/y.h, a bare "y.h" is next to the includer
for f in src/*/*.c src/*/*.h; do
    sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
        if [ -f "src/$h" ]; then echo "$f src/$h"; elif [ -f "$(dirname "$f")/$h" ]; then echo "$f $(dirname "$f")/$h"; fi
    done
done >> "$T/edges"

circle=$(cycles "$T/edges")
check '[ -z "$circle" ]' "import circle between files of src/: $circle"
echo "test_deps: $(sort -u "$T/edges" | wc -l) edges between $(tr ' ' '\n' < "$T/edges" | sort -u | wc -l) files"
echo "test_deps: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
