/* jsonerr.c: the strict reading of the JSON files remat is given (chain and
 * graph files, a graph plan: src/plan/chain/chainfile.c, plan/graphplan/graphfile.c) and the
 * message for text that cJSON refused. A file with anything but white space
 * after its object (trailing junk, a second object) or a key twice in one
 * object is refused, not read up to where the object ends
 * or with its second value ignored, and so is a NUL character, a byte or
 * the escape \u0000 in a string (cJSON's strings end at it, Python's do
 * not). rm_json_parse is given C strings (a NUL byte inside a chain or
 * graph file is the CLI's to refuse: cli/plan.c, read_json); the Hugging
 * Face reader's texts (config.json, the index) come with their length. */
#include "util/util.h"
#include <cjson/cJSON.h>
#include <ctype.h>
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

static char *one_line(char *s);

/* The edits (insert, delete, change, swap two neighbours; case ignored)
 * from a to b, counted up to limit + 1. */
static int edits(const char *a, const char *b, int limit) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64 || (la > lb ? la - lb : lb - la) > (size_t)limit) return limit + 1;
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int v = d[i - 1][j - 1] + (ca != cb);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) && tolower((unsigned char)a[i - 2]) == cb &&
                d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* The first key of o one edit or two (by its length) from a key in
 * known, and *meant that key; NULL where there is none. */
static const char *misspelt_key(const cJSON *o, const char *const *known, const char **meant) {
    *meant = NULL;
    for (const cJSON *c = cJSON_IsObject(o) ? o->child : NULL; c; c = c->next) {
        int is_known = 0;
        for (int k = 0; known[k] && !is_known; k++) is_known = !strcmp(c->string, known[k]);
        for (int k = 0; known[k] && !is_known; k++) {
            size_t len = strlen(known[k]);
            int limit = len < 3 ? 0 : len < 7 ? 1 : 2; /* "ab" and "bt" are one edit apart, and both real */
            if (edits(c->string, known[k], limit) <= limit) return *meant = known[k], c->string;
        }
    }
    return NULL;
}

int rm_json_check_keys(const cJSON *o, const char *const *known, const char *where, char *err, size_t errlen) {
    const char *meant, *key = misspelt_key(o, known, &meant);
    if (!key) return 0;
    char shown[64];
    snprintf(shown, sizeof shown, "%.60s", key);
    snprintf(err, errlen, "%s: the key \"%s\" is not one remat reads: did you mean \"%s\"? (a misspelt key would "
             "be ignored, and another graph planned than the one meant)", where, one_line(shown), meant);
    return 1;
}

long long rm_json_nul_at(const char *text, size_t len) {
    int in_string = 0;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (c == 0) return (long long)i;
        if (!in_string) in_string = c == '"';
        else if (c == '"') in_string = 0;
        else if (c == '\\' && i + 1 < len) {
            if (text[i + 1] == 'u' && i + 5 < len && !memcmp(text + i + 2, "0000", 4)) return (long long)i;
            i++; /* the escaped character: \" does not end the string */
        }
    }
    return -1;
}

/* s made one line: a newline or escape from the file shown as '?'. */
static char *one_line(char *s) {
    for (char *p = s; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
    return s;
}

static void dup_error(const char *dup, char *err, size_t errlen) {
    char k[64];
    snprintf(k, sizeof k, "%.60s", dup);
    one_line(k);
    snprintf(err, errlen, "invalid JSON: the key '%s' appears twice in one object (which one counts?): give each "
             "key once", k);
}

static void nul_error(long long at, char *err, size_t errlen) {
    snprintf(err, errlen, "invalid JSON: it contains a NUL character (byte %lld): remat reads text up to a NUL, "
             "Python's json past it, so the two would read different names or values; remove it", at);
}

#define TEXT_OF(x) #x
#define NESTING_OF(x) TEXT_OF(x)
#define NESTING_TEXT NESTING_OF(CJSON_NESTING_LIMIT)

/* What a reader written for Python's json may have put at byte `at` of
 * text (len bytes) that JSON does not allow, as a hint: "" when nothing. */
static const char *near_hint(const char *text, size_t at, size_t len) {
    const char *p = text + at;
    const size_t left = len - at;
    if (len == 0) return ": the file is empty";
    /* cJSON stops at its nesting limit where the brackets open past it: the text may be valid JSON */
    int depth = 0, in_string = 0;
    for (size_t i = 0; i < at && i < len; i++) {
        const char c = text[i];
        if (in_string) in_string = c == '\\' ? (i++, 1) : c != '"';
        else if (c == '"') in_string = 1;
        else depth += (c == '[' || c == '{') - (c == ']' || c == '}');
    }
    if (depth >= CJSON_NESTING_LIMIT)
        return ": nested deeper than " NESTING_TEXT " arrays and objects, the most remat reads (cJSON's limit); "
               "flatten it";
    if (left > 0 && *p == '-') p++;
    if ((size_t)(p - text) + 3 <= len && (!strncmp(p, "NaN", 3) || !strncmp(p, "Inf", 3)))
        return ": NaN and Infinity are not JSON numbers (Python's json writes them); give a number";
    return "";
}

/* "invalid JSON near byte AT of LEN ('...')" and the hint, into err. */
static void near_error(const char *prefix, const char *text, size_t at, size_t len, char *err, size_t errlen) {
    char shown[24];
    if (at > len) at = len;
    const size_t j = at < len ? (len - at < 20 ? len - at : 20) : 0;
    snprintf(shown, sizeof shown, "%.*s", (int)j, text + at); /* stops at a NUL too */
    snprintf(err, errlen, "%sinvalid JSON near byte %zu of %zu%s%s%s%s", prefix, at, len, *shown ? " ('" : "",
             one_line(shown), *shown ? "')" : "", near_hint(text, at, len));
}

cJSON *rm_json_parse(const char *text, char *err, size_t errlen) {
    const char *end = NULL;
    const long long nul = rm_json_nul_at(text, strlen(text)); /* a \u0000 escape: the text itself has no NUL */
    cJSON *root = nul >= 0 ? NULL : cJSON_ParseWithOpts(text, &end, 1); /* 1: nothing but white space after it */
    const char *dup = rm_json_dup_key(root);
    if (nul >= 0) nul_error(nul, err, errlen);
    else if (!root) rm_json_error(text, end, err, errlen);
    else if (dup) dup_error(dup, err, errlen);
    if (dup) cJSON_Delete(root), root = NULL;
    return root;
}

cJSON *rm_json_parse_len(const char *text, size_t len, char *err, size_t errlen) {
    const long long nul = rm_json_nul_at(text, len);
    if (nul >= 0) return nul_error(nul, err, errlen), NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        near_error("not a JSON object: ", text, at, len, err, errlen);
        return NULL;
    }
    const char *p = end;
    while (p < text + len && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
    const char *dup = p < text + len ? NULL : rm_json_dup_key(root);
    if (p < text + len)
        snprintf(err, errlen, "invalid JSON: bytes after the JSON object, at byte %zu: remove them", (size_t)(p - text));
    else if (dup) dup_error(dup, err, errlen);
    if (p < text + len || dup) cJSON_Delete(root), root = NULL;
    return root;
}

void rm_json_error(const char *text, const char *end, char *err, size_t errlen) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    const char *stop = NULL;
    cJSON *lenient = cJSON_ParseWithOpts(text, &stop, 0);
    char shown[24];
    if (lenient && stop) {
        snprintf(shown, sizeof shown, "%.20s", stop);
        snprintf(err, errlen, "invalid JSON: bytes after the JSON object, at byte %zu ('%s'): remove them",
                 (size_t)(stop - text), one_line(shown));
    }
    else near_error("", text, at, strlen(text), err, errlen);
    cJSON_Delete(lenient);
}
