# undocumented.awk: prints the functions of a header with no comment right
# above them or above the unbroken group of declarations they belong to.
/^\/\*|^ \*|\*\/ *$/ && !/^[}#]|^typedef/ { doc = 1; next }
/^$|^[}#]|^typedef/ { doc = 0; next }
/^[a-zA-Z_][a-zA-Z0-9_ ]*[ *]rm_[a-z0-9_]+\(/ { if (!doc) print "undocumented: " $0 }
