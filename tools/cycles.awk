# cycles.awk: reads "FROM TO" edges of a dependency graph, one per line, and
# prints one circle as "a -> b -> ... -> a" if the graph has any (nothing
# otherwise). Depth-first search: an edge back to a file still on the
# search path closes a circle.
{ if (!(($1, $2) in seen)) { seen[$1, $2] = 1; out[$1] = out[$1] " " $2 }; node[$1] = 1; node[$2] = 1 }
function visit(v,    i, n, next_, w, k) {
    state[v] = 1; path[++depth] = v
    n = split(out[v], next_, " ")
    for (i = 1; i <= n && !found; i++) {
        w = next_[i]
        if (state[w] == 1) { # back edge: the circle is the path from w
            for (k = 1; path[k] != w; k++) ;
            cycle = w
            for (k++; k <= depth; k++) cycle = cycle " -> " path[k]
            cycle = cycle " -> " w
            found = 1
        } else if (state[w] == 0) visit(w)
    }
    depth--; state[v] = 2
}
END {
    found = 0; depth = 0
    for (v in node) if (!found && state[v] == 0) visit(v)
    if (found) print cycle
}
