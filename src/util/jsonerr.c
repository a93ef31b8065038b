/* jsonerr.c: the strict reading of the JSON files remat is given (chain and
 * graph files, a graph plan: src/plan/chain/chainfile.c, plan/graphplan/graphfile.c) and the
 * message for text that cJSON refused. A file with anything but white space
 * after its object (trailing junk, a second object) or a key twice in one
 * object is refused, not read up to where the object ends
 * or with its second value ignored. The library is given C strings: a
 * NUL byte inside a file is the CLI's to refuse (cli/plan.c, read_json). */
#include "util/util.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_key(const void *x, const void *y) {
    return strcmp((*(const cJSON *const *)x)->string, (*(const cJSON *const *)y)->string);
}

/* A key twice among the members of object o: sorted, neighbours compared
 * (small objects pairwise, with no allocation). */
static const char *dup_in(const cJSON *o) {
    int n = 0;
    for (const cJSON *c = o->child; c; c = c->next) n++;
    if (n <= 16) {
        for (const cJSON *a = o->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string && b->string && !strcmp(a->string, b->string)) return a->string;
        return NULL;
    }
    const cJSON **k = malloc(sizeof *k * (size_t)n);
    const char *dup = NULL;
    if (!k) return NULL; /* no memory to check: the reading goes on as cJSON reads it */
    n = 0;
    for (const cJSON *c = o->child; c; c = c->next)
        if (c->string) k[n++] = c;
    qsort(k, (size_t)n, sizeof *k, by_key);
    for (int i = 1; i < n && !dup; i++)
        if (!strcmp(k[i - 1]->string, k[i]->string)) dup = k[i]->string;
    free(k);
    return dup;
}

const char *rm_json_dup_key(const cJSON *root) {
    if (!root) return NULL;
    const char *d = cJSON_IsObject(root) ? dup_in(root) : NULL;
    for (const cJSON *c = root->child; c && !d; c = c->next) d = rm_json_dup_key(c);
    return d;
}

cJSON *rm_json_parse(const char *text, char *err, size_t errlen) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1); /* 1: nothing but white space after the value */
    const char *dup = rm_json_dup_key(root);
    if (!root) rm_json_error(text, end, err, errlen);
    else if (dup) snprintf(err, errlen, "invalid JSON: the key '%.60s' appears twice in one object (which one "
                           "counts?): give each key once", dup);
    if (dup) cJSON_Delete(root), root = NULL;
    return root;
}

void rm_json_error(const char *text, const char *end, char *err, size_t errlen) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    const char *stop = NULL;
    cJSON *lenient = cJSON_ParseWithOpts(text, &stop, 0);
    if (lenient && stop)
        snprintf(err, errlen, "invalid JSON: bytes after the JSON object, at byte %zu ('%.20s'): remove them",
                 (size_t)(stop - text), stop);
    else snprintf(err, errlen, "invalid JSON near byte %zu of %zu", at, strlen(text));
    cJSON_Delete(lenient);
}
