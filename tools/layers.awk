# layers.awk: reads "FROM TO" edges between files, one per line, and the
# folders' layers (-v layers=FILE: one folder a line, the bottom layer
# first, as docs/ARCHITECTURE.md lists them). Prints each edge that runs
# back up: from a folder to one listed after it ("FROM -> TO"); and
# "unlisted FOLDER" for a folder of an edge that the list does not name.
# Edges inside one folder are left to cycles.awk.
BEGIN {
    while ((getline line < layers) > 0) if (line != "") rank[line] = ++n
    close(layers)
}
function folder(f) { sub(/\/[^\/]*$/, "", f); return f }
{
    a = folder($1); b = folder($2)
    if (!(a in rank)) { if (!(a in said)) print "unlisted " a; said[a] = 1; next }
    if (!(b in rank)) { if (!(b in said)) print "unlisted " b; said[b] = 1; next }
    if (rank[a] < rank[b]) print $1 " -> " $2
}
