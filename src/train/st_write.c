/* st_write.c: the atomic .safetensors writer (format: see safetensors.h).
 *
 * A file is written to a temp file in the target's directory, synced and
 * renamed over the target, so the target always holds either the old or the
 * whole new file, even if the process is killed. Temp files that a killed
 * writer left behind are removed by the next write to the same target. */
#include "train/safetensors.h"
#include "util/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct strbuf { char *p; size_t len, cap; int oom; } strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void sb_str(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(strbuf *b, uint64_t v) {
    char t[32];
    int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_put(b, t, (size_t)n);
}

/* A JSON string literal; bytes >= 0x80 pass through (UTF-8). */
static void sb_json(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            sb_put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", c);
            sb_put(b, e, 6);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the writer's arguments; names must be unique. */
static rm_status check_write_args(const char *path, int n, const rm_st_tensor *t, int n_meta,
                                  const char *const *keys, const char *const *values,
                                  char *err, size_t errlen) {
    if (n < 0 || (n > 0 && !t) || n_meta < 0 || (n_meta > 0 && (!keys || !values))) {
        rm_st_seterr(err, errlen, "cannot write '%s': bad arguments", path);
        return RM_ERR_ARG;
    }
    for (int i = 0; i < n; i++) {
        const char *nm = t[i].name ? t[i].name : "(null)";
        size_t es = rm_st_dtype_size(t[i].dtype);
        if (!t[i].name || !*t[i].name || strcmp(t[i].name, "__metadata__") == 0 || es == 0 ||
            t[i].ndim < 0 || t[i].ndim > RM_ST_MAX_NDIM || (t[i].ndim > 0 && !t[i].shape)) {
            rm_st_seterr(err, errlen, "cannot write '%s': tensor '%s' has a bad name, dtype or shape",
                   path, nm);
            return RM_ERR_ARG;
        }
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0) {
                rm_st_seterr(err, errlen, "cannot write '%s': tensor '%s' has a negative dimension",
                       path, nm);
                return RM_ERR_ARG;
            }
        int ovf;
        uint64_t numel = rm_st_shape_numel(t[i].ndim, t[i].shape, &ovf);
        if (ovf || (numel && es > UINT64_MAX / numel) || numel * es != t[i].bytes ||
            (t[i].bytes && !t[i].data && !t[i].view)) {
            rm_st_seterr(err, errlen, "cannot write '%s': tensor '%s' has %llu bytes, its shape and "
                   "dtype need another size", path, nm, (unsigned long long)t[i].bytes);
            return RM_ERR_ARG;
        }
    }
    for (int i = 0; i < n_meta; i++)
        if (!keys[i] || !values[i]) {
            rm_st_seterr(err, errlen, "cannot write '%s': metadata entry %d is NULL", path, i);
            return RM_ERR_ARG;
        }
    /* Duplicates, in O(n log n): a model can have thousands of tensors. */
    int m = n > n_meta ? n : n_meta;
    const char **s = calloc((size_t)m + 1, sizeof *s);
    if (!s) {
        rm_st_seterr(err, errlen, "cannot write '%s': out of memory", path);
        return RM_ERR_NOMEM;
    }
    rm_status st = RM_OK;
    for (int pass = 0; pass < 2 && st == RM_OK; pass++) {
        int k = pass ? n_meta : n;
        for (int i = 0; i < k; i++) s[i] = pass ? keys[i] : t[i].name;
        qsort(s, (size_t)k, sizeof *s, cmp_str);
        for (int i = 1; i < k; i++)
            if (strcmp(s[i], s[i - 1]) == 0) {
                rm_st_seterr(err, errlen, "cannot write '%s': %s '%s' appears twice", path,
                       pass ? "metadata key" : "tensor", s[i]);
                st = RM_ERR_ARG;
                break;
            }
    }
    free(s);
    return st;
}

static int write_all(int fd, const void *buf, uint64_t n) {
    const unsigned char *p = buf;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        ssize_t w = write(fd, p, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        p += w;
        n -= (uint64_t)w;
    }
    return 0;
}

static int write_piece(void *ctx, const void *p, uint64_t n) { return write_all(*(int *)ctx, p, n) ? errno : 0; }

/* Removes the temp files that killed writers left: "<dir>/.<name>.tmp.<pid>"
 * where <name> is this target or any *.safetensors (the periodic step files
 * of a run are other targets), and no process <pid> exists. A live writer's
 * file (kill says the process exists, or that we may not signal it) stays;
 * a reused pid only delays the cleanup. */
static void remove_stale_temps(const char *dir, const char *base) {
    DIR *d = opendir(dir);
    if (!d) return;
    const char *ext = ".safetensors";
    size_t bl = strlen(base), el = strlen(ext);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name, *digits = NULL;
        if (nm[0] != '.') continue;
        if (strncmp(nm + 1, base, bl) == 0 && strncmp(nm + 1 + bl, ".tmp.", 5) == 0) {
            digits = nm + 1 + bl + 5;
        } else {
            const char *t = strstr(nm + 1, ".tmp.");
            if (t && (size_t)(t - (nm + 1)) > el && strncmp(t - el, ext, el) == 0) digits = t + 5;
        }
        if (!digits) continue;
        char *end;
        errno = 0;
        long pid = strtol(digits, &end, 10);
        if (end == digits || *end || errno || pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        size_t cap = strlen(dir) + strlen(nm) + 2;
        char *p = malloc(cap);
        if (!p) break;
        snprintf(p, cap, "%s/%s", dir, nm);
        (void)unlink(p);
        free(p);
    }
    closedir(d);
}

/* Test-only: REMAT_TEST_SLOW_SAVE_MS holds a finished temp file that long
 * before the rename, so tests/test_ckptfile.sh can kill a writer mid-save. */
static void test_slow_save(void) {
    const char *v = getenv("REMAT_TEST_SLOW_SAVE_MS");
    long ms = v ? strtol(v, NULL, 10) : 0;
    if (ms <= 0 || ms > 600000) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* The header JSON, padded with spaces so the data section is 8-aligned. */
static void build_header(strbuf *h, int n, const rm_st_tensor *t, int n_meta,
                         const char *const *keys, const char *const *values) {
    sb_str(h, "{");
    if (n_meta > 0) {
        sb_str(h, "\"__metadata__\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) sb_str(h, ",");
            sb_json(h, keys[i]);
            sb_str(h, ":");
            sb_json(h, values[i]);
        }
        sb_str(h, "}");
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        if (i || n_meta > 0) sb_str(h, ",");
        sb_json(h, t[i].name);
        sb_str(h, ":{\"dtype\":");
        sb_json(h, t[i].dtype);
        sb_str(h, ",\"shape\":[");
        for (int d = 0; d < t[i].ndim; d++) {
            if (d) sb_str(h, ",");
            sb_u64(h, (uint64_t)t[i].shape[d]);
        }
        sb_str(h, "],\"data_offsets\":[");
        sb_u64(h, off);
        sb_str(h, ",");
        sb_u64(h, off + t[i].bytes);
        sb_str(h, "]}");
        off += t[i].bytes;
    }
    sb_str(h, "}");
    while (!h->oom && h->len % 8) sb_str(h, " ");
}

/* Writes the file to tmp and renames it over path; returns 0 or an errno. */
static int write_and_rename(const char *tmp, const char *path, const strbuf *h, int n,
                            const rm_st_tensor *t) {
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->len >> (8 * i));
    int e = 0; /* errno of the first failure; later calls may change errno */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return errno;
    if (write_all(fd, len8, 8) || write_all(fd, h->p, h->len)) e = errno;
    for (int i = 0; i < n && !e; i++)
        e = rm_st_each_piece(&t[i], write_piece, &fd);
    if (!e && fsync(fd) != 0) e = errno;
    if (close(fd) != 0 && !e) e = errno;
    if (!e) test_slow_save();
    if (!e && rename(tmp, path) != 0) e = errno;
    if (e) unlink(tmp);
    return e;
}

rm_status rm_st_write(const char *path, int n, const rm_st_tensor *t, int n_meta,
                      const char *const *keys, const char *const *values, char *err,
                      size_t errlen) {
    return rm_st_write_ex(path, n, t, n_meta, keys, values, 0, err, errlen);
}

rm_status rm_st_write_ex(const char *path, int n, const rm_st_tensor *t, int n_meta,
                         const char *const *keys, const char *const *values, int add_checksum,
                         char *err, size_t errlen) {
    if (!path || !*path) {
        rm_st_seterr(err, errlen, "cannot write a safetensors file: no path");
        return RM_ERR_ARG;
    }
    rm_status st = check_write_args(path, n, t, n_meta, keys, values, err, errlen);
    if (st != RM_OK) return st;
    /* The temp file lives in the target's directory so rename is atomic. */
    const char *slash = strrchr(path, '/');
    size_t dlen = slash ? (size_t)(slash - path) + 1 : 0;
    if (!path[dlen]) {
        rm_st_seterr(err, errlen, "cannot write '%s': not a file name", path);
        return RM_ERR_ARG;
    }
    char sum[RM_ST_CHECKSUM_LEN];
    const char **k2 = NULL, **v2 = NULL;
    const rm_st_tensor **tp = NULL;
    strbuf h = {0};
    size_t tcap = strlen(path) + 64;
    char *tmp = malloc(tcap), *dir = malloc(dlen + 2);
    if (add_checksum) {
        k2 = malloc(((size_t)n_meta + 1) * sizeof *k2);
        v2 = malloc(((size_t)n_meta + 1) * sizeof *v2);
        tp = malloc(((size_t)n + 1) * sizeof *tp);
    }
    if (!tmp || !dir || (add_checksum && (!k2 || !v2 || !tp))) st = RM_ERR_NOMEM;
    if (st == RM_OK && add_checksum) {
        for (int i = 0; i < n_meta; i++) {
            k2[i] = keys[i];
            v2[i] = values[i];
            if (strcmp(keys[i], RM_ST_CHECKSUM_KEY) == 0) {
                rm_st_seterr(err, errlen, "cannot write '%s': metadata key '%s' is reserved",
                             path, RM_ST_CHECKSUM_KEY);
                st = RM_ERR_ARG;
            }
        }
        for (int i = 0; i < n; i++) tp[i] = &t[i];
        if (st == RM_OK) st = rm_st_digest(n, tp, n_meta, keys, values, sum);
        if (st == RM_ERR_IO) rm_st_seterr(err, errlen, "cannot write '%s': reading the bytes of a tensor failed", path);
        k2[n_meta] = RM_ST_CHECKSUM_KEY;
        v2[n_meta] = sum;
        keys = k2;
        values = v2;
        n_meta++;
    }
    if (st == RM_OK) {
        build_header(&h, n, t, n_meta, keys, values);
        if (h.oom) st = RM_ERR_NOMEM;
    }
    if (st == RM_OK) {
        snprintf(tmp, tcap, "%.*s.%s.tmp.%ld", (int)dlen, path, path + dlen, (long)getpid());
        if (dlen) snprintf(dir, dlen + 2, "%.*s", (int)dlen, path);
        else snprintf(dir, 2, ".");
        remove_stale_temps(dir, path + dlen);
        int e = write_and_rename(tmp, path, &h, n, t);
        if (e) {
            rm_st_seterr(err, errlen, "cannot write '%s': %s", path, strerror(e));
            st = RM_ERR_IO;
        } else {
            /* Make the rename itself durable. Some file systems cannot sync a
             * directory; the file is complete either way: best effort. */
            int dfd = open(dir, O_RDONLY | O_CLOEXEC);
            if (dfd >= 0) {
                (void)fsync(dfd);
                close(dfd);
            }
        }
    }
    if (st == RM_ERR_NOMEM) rm_st_seterr(err, errlen, "cannot write '%s': out of memory", path);
    free(h.p);
    free(tmp);
    free(dir);
    free(k2);
    free(v2);
    free(tp);
    return st;
}
