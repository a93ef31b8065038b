/* util.c: small helpers shared by every part of the library. */
#include "util/util.h"
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A size string (the memory budget): a positive finite decimal number and
 * a unit, nothing around them (' 5MiB' and '5MiB ' are refused alike; a
 * space between number and unit, '5 MiB', is allowed). Not rounded:
 * rm_parse_size says what a fraction of a byte means. */
rm_status rm_parse_bytes(const char *s, double *bytes, int *percent) {
    char *end;
    *percent = 0;
    if (!s || !*s || strspn(s, "+.0123456789") == 0) return RM_ERR_ARG; /* white space, hex, inf, nan */
    double v = strtod(s, &end);
    if (end == s || !(v > 0) || !isfinite(v) || strspn(s, "+-.0123456789eE") < (size_t)(end - s))
        return RM_ERR_ARG; /* 0x10: not decimal */
    while (*end == ' ') end++;
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
        {"PiB", 1125899906842624.0}, {"EiB", 1152921504606846976.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
        {"TB", 1e12}, {"PB", 1e15}, {"EB", 1e18}, {"K", 1024.0}, {"M", 1048576.0}, {"G", 1073741824.0}};
    if (strcmp(end, "%") == 0) {
        if (v > 100) return RM_ERR_ARG;
        *percent = 1;
        *bytes = v;
        return RM_OK;
    }
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcmp(end, units[i].unit) == 0) {
            *bytes = v * units[i].mult;
            return isfinite(*bytes) ? RM_OK : RM_ERR_ARG; /* 1e305PiB: beyond any double */
        }
    return RM_ERR_ARG;
}

size_t rm_dtype_size(rm_dtype d) {
    switch (d) {
    case RM_DTYPE_F32: return 4;
    case RM_DTYPE_I32: return 4;
    case RM_DTYPE_BF16: return 2;
    case RM_DTYPE_F16: return 2;
    }
    return 0; /* an invalid dtype: callers treat 0 bytes as an error */
}

/* Copies at most n-1 bytes of src and always terminates dst (when n > 0);
 * a too-long src is truncated, never overflows. */
void rm_strlcpy(char *dst, const char *src, size_t n) {
    if (n == 0) return;
    size_t len = src ? strlen(src) : 0;
    if (len >= n) len = n - 1;
    if (len) memcpy(dst, src, len);
    dst[len] = '\0';
}

const char *rm_version(void) { return RM_VERSION; }

/* Opens a file for reading only if it is a regular file. O_NONBLOCK makes
 * open() itself return at once on a FIFO with no writer (a plain open blocks
 * there forever) and on devices; fstat then refuses anything not regular.
 * Regular files ignore O_NONBLOCK, so reads behave as usual. Returns the fd
 * with *size set, or -1 with *st and err set. */
int rm_open_regular(const char *path, size_t max_bytes, size_t *size, rm_status *st, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (err && errlen) snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        *st = RM_ERR_IO;
        return -1;
    }
    struct stat sb;
    const char *why = NULL;
    if (fstat(fd, &sb) != 0) why = strerror(errno);
    else if (S_ISDIR(sb.st_mode)) why = "it is a directory";
    else if (S_ISFIFO(sb.st_mode)) why = "it is a FIFO (a pipe), not a regular file";
    else if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) why = "it is a device, not a regular file";
    else if (!S_ISREG(sb.st_mode)) why = "not a regular file";
    else if ((uint64_t)sb.st_size > (uint64_t)max_bytes) why = "the file is too large";
    if (why) {
        if (err && errlen) {
            if ((uint64_t)sb.st_size > (uint64_t)max_bytes && S_ISREG(sb.st_mode))
                snprintf(err, errlen, "cannot read '%s': %s (%llu bytes; the limit is %llu)", path, why,
                         (unsigned long long)sb.st_size, (unsigned long long)max_bytes);
            else snprintf(err, errlen, "cannot read '%s': %s", path, why);
        }
        close(fd);
        *st = RM_ERR_IO;
        return -1;
    }
    *size = (size_t)sb.st_size;
    return fd;
}

rm_status rm_read_file(const char *path, size_t max_bytes, char **out, size_t *len, char *err, size_t errlen) {
    if (!out || !path) {
        if (err && errlen) snprintf(err, errlen, "rm_read_file: %s is NULL", !out ? "out" : "path");
        return RM_ERR_ARG;
    }
    *out = NULL;
    if (len) *len = 0;
    rm_status st;
    size_t n;
    int fd = rm_open_regular(path, max_bytes < SIZE_MAX ? max_bytes : SIZE_MAX - 1, &n, &st, err, errlen);
    if (fd < 0) return st;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        if (err && errlen) snprintf(err, errlen, "cannot read '%s': out of memory (%zu bytes)", path, n);
        return RM_ERR_NOMEM;
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    int e = errno;
    close(fd);
    if (got != n) {
        free(buf);
        if (err && errlen)
            snprintf(err, errlen, "cannot read '%s': %s", path, got < n && e ? strerror(e) : "the file shrank while being read");
        return RM_ERR_IO;
    }
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return RM_OK;
}

uint64_t rm_hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
    }
    for (; i < n; i++) h = (h ^ b[i]) * 0x94D049BB133111EBull;
    return h ^ (h >> 29);
}

int rm_list_problem(const char *list, size_t max_item, int unique, char *why, size_t cap) {
    for (const char *p = list;; p++) {
        const size_t n = strcspn(p, ",");
        const int shown = (int)(n < 60 ? n : 60);
        size_t k = 0, twice = 0;
        while (k < n && !isspace((unsigned char)p[k])) k++;
        for (const char *q = list; unique && !twice && q < p; q += strcspn(q, ",") + 1)
            twice = strcspn(q, ",") == n && !strncmp(q, p, n);
        if (n == 0) return snprintf(why, cap, "an empty item"), 1;
        if (k < n) return snprintf(why, cap, "white space in the item '%.*s'", shown, p), 1;
        if (n >= max_item) return snprintf(why, cap, "the item '%.*s...' (too long)", shown, p), 1;
        if (twice) return snprintf(why, cap, "the item '%.*s' twice", shown, p), 1;
        p += n;
        if (!*p) return 0;
    }
}

void rm_mib_pair(int64_t a, int64_t b, char *a_out, char *b_out, size_t cap) {
    const int64_t v[2] = {a, b};
    char *out[2] = {a_out, b_out}, t[2][RM_MIB_TEXT];
    for (int i = 0; i < 2; i++) snprintf(t[i], sizeof t[i], "%.2f MiB", (double)v[i] / 1048576.0);
    const int hidden = a != b && !strcmp(t[0], t[1]); /* rounding would hide which is larger */
    for (int i = 0; i < 2; i++)
        if (out[i] && cap) {
            if (hidden) snprintf(out[i], cap, "%s (%lld bytes)", t[i], (long long)v[i]);
            else snprintf(out[i], cap, "%s", t[i]);
        }
}
