/* checksum.c: the checksum of remat's .safetensors files.
 *
 * The metadata key "remat_checksum" holds "sha256:" and the lowercase hex
 * SHA-256 of this byte string (docs/CHECKPOINT_FILES.md):
 *
 *   "remat-checksum-1" NUL  <tensor count, decimal> NUL
 *   for each tensor, by name (bytewise):
 *       name NUL dtype NUL <dims, decimal, comma-separated> NUL <its data bytes>
 *   <metadata count, decimal> NUL
 *   for each metadata entry but remat_checksum, by key (bytewise):
 *       key NUL value NUL
 *
 * It covers the tensor data and also the names, shapes and metadata (the
 * step, the seed, the model config), and it does not depend on the order of
 * the header or of the data section, so a tool that rewrites the file with
 * the same contents keeps it valid. SHA-256 rather than a CRC: it is what
 * users can recompute anywhere (Python's hashlib), and at ~1 GB/s (Nettle,
 * with the CPU's SHA instructions) it costs less than writing the file.
 * Nettle is Debian's libnettle8, which GnuTLS already pulls in. */
#include "train/safetensors.h"

#include <nettle/sha2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECKSUM_TAG "remat-checksum-1"

static void put_str(struct sha256_ctx *c, const char *s) {
    sha256_update(c, strlen(s) + 1, (const uint8_t *)s); /* with its NUL */
}

static void put_count(struct sha256_ctx *c, long long n) {
    char b[32];
    snprintf(b, sizeof b, "%lld", n);
    put_str(c, b);
}

static int cmp_tensor(const void *a, const void *b) {
    /* strcmp compares as unsigned char: bytewise, as Python's sorted() on bytes */
    return strcmp((*(const rm_st_tensor *const *)a)->name, (*(const rm_st_tensor *const *)b)->name);
}

typedef struct kv { const char *k, *v; } kv;
static int cmp_kv(const void *a, const void *b) {
    return strcmp(((const kv *)a)->k, ((const kv *)b)->k);
}

/* A tensor's data into the hash: from memory, or read from src in chunks
 * (a file of any size is hashed in CHUNK bytes of memory). */
enum { CHUNK = 1 << 20 };
static rm_status put_data(struct sha256_ctx *c, const rm_st_file *src, const rm_st_tensor *x, unsigned char *buf) {
    if (x->data || !x->bytes) {
        if (x->bytes) sha256_update(c, (size_t)x->bytes, x->data);
        return RM_OK;
    }
    for (uint64_t off = 0; off < x->bytes; off += CHUNK) {
        size_t n = x->bytes - off < CHUNK ? (size_t)(x->bytes - off) : CHUNK;
        rm_status st = src ? rm_st_read(src, x, off, buf, n) : RM_ERR_ARG;
        if (st != RM_OK) return st;
        sha256_update(c, n, buf);
    }
    return RM_OK;
}

/* rm_st_digest, with the tensors whose data is not in memory read from src. */
static rm_status digest(const rm_st_file *src, int n, const rm_st_tensor *const *t, int n_meta,
                        const char *const *keys, const char *const *values, char out[RM_ST_CHECKSUM_LEN]) {
    const rm_st_tensor **ts = malloc(((size_t)n + 1) * sizeof *ts);
    kv *meta = malloc(((size_t)n_meta + 1) * sizeof *meta);
    unsigned char *buf = src ? malloc(CHUNK) : NULL;
    if (!ts || !meta || (src && !buf)) {
        free(ts);
        free(meta);
        free(buf);
        return RM_ERR_NOMEM;
    }
    if (n) memcpy(ts, t, (size_t)n * sizeof *ts);
    int m = 0;
    for (int i = 0; i < n_meta; i++)
        if (strcmp(keys[i], RM_ST_CHECKSUM_KEY) != 0) meta[m++] = (kv){keys[i], values[i]};
    qsort(ts, (size_t)n, sizeof *ts, cmp_tensor);
    qsort(meta, (size_t)m, sizeof *meta, cmp_kv);

    struct sha256_ctx c;
    sha256_init(&c);
    put_str(&c, CHECKSUM_TAG);
    put_count(&c, n);
    for (int i = 0; i < n; i++) {
        const rm_st_tensor *x = ts[i];
        char dims[RM_ST_MAX_NDIM * 21 + 1];
        size_t j = 0;
        dims[0] = 0;
        for (int d = 0; d < x->ndim && d < RM_ST_MAX_NDIM; d++)
            j += (size_t)snprintf(dims + j, sizeof dims - j, "%s%lld", d ? "," : "",
                                  (long long)x->shape[d]);
        put_str(&c, x->name);
        put_str(&c, x->dtype);
        put_str(&c, dims);
        rm_status st = put_data(&c, src, x, buf);
        if (st != RM_OK) {
            free(ts), free(meta), free(buf);
            return st;
        }
    }
    put_count(&c, m);
    for (int i = 0; i < m; i++) {
        put_str(&c, meta[i].k);
        put_str(&c, meta[i].v);
    }
    uint8_t d[SHA256_DIGEST_SIZE];
    sha256_digest(&c, sizeof d, d);
    memcpy(out, "sha256:", 7);
    for (int i = 0; i < SHA256_DIGEST_SIZE; i++) snprintf(out + 7 + 2 * i, 3, "%02x", d[i]);
    free(ts);
    free(meta);
    free(buf);
    return RM_OK;
}

rm_status rm_st_digest(int n, const rm_st_tensor *const *t, int n_meta, const char *const *keys,
                       const char *const *values, char out[RM_ST_CHECKSUM_LEN]) {
    return digest(NULL, n, t, n_meta, keys, values, out);
}

rm_status rm_st_verify(const rm_st_file *f, const char *fname, int *present,
                       char computed[RM_ST_CHECKSUM_LEN], char *err, size_t errlen) {
    *present = 0;
    int n = rm_st_count(f), m = rm_st_meta_count(f);
    const rm_st_tensor **t = malloc(((size_t)n + 1) * sizeof *t);
    const char **k = malloc(((size_t)m + 1) * sizeof *k), **v = malloc(((size_t)m + 1) * sizeof *v);
    char sum[RM_ST_CHECKSUM_LEN];
    rm_status st = (t && k && v) ? RM_OK : RM_ERR_NOMEM;
    for (int i = 0; st == RM_OK && i < n; i++) t[i] = rm_st_at(f, i);
    for (int i = 0; st == RM_OK && i < m; i++) {
        k[i] = rm_st_meta_key(f, i);
        v[i] = rm_st_meta_value(f, i);
    }
    if (st == RM_OK) st = digest(f, n, t, m, k, v, sum);
    free(t);
    free(k);
    free(v);
    if (st != RM_OK) {
        rm_st_seterr(err, errlen, st == RM_ERR_IO ? "'%s': cannot read its tensors to check the checksum (did the "
                     "file shrink since it was opened?)" : "'%s': out of memory computing the checksum", fname);
        return st;
    }
    if (computed) memcpy(computed, sum, sizeof sum);
    const char *want = rm_st_meta(f, RM_ST_CHECKSUM_KEY);
    if (!want) return RM_OK;
    *present = 1;
    int well_formed = strlen(want) == RM_ST_CHECKSUM_LEN - 1 && strncmp(want, "sha256:", 7) == 0 &&
                      strspn(want + 7, "0123456789abcdef") == RM_ST_CHECKSUM_LEN - 8;
    if (!well_formed) {
        char shown[40];
        snprintf(shown, sizeof shown, "%.24s%s", want, strlen(want) > 24 ? "..." : "");
        for (char *p = shown; *p; p++)
            if ((unsigned char)*p < 0x20) *p = '?';
        rm_st_seterr(err, errlen, "'%s': unsupported checksum '%s' (expected sha256: and 64 "
                     "lowercase hex digits)", fname, shown);
        return RM_ERR_FORMAT;
    }
    if (strcmp(want, sum) != 0) {
        rm_st_seterr(err, errlen, "'%s': checksum mismatch: the file says %.19s..., its contents "
                     "give %.19s...; the file is corrupt", fname, want, sum);
        return RM_ERR_FORMAT;
    }
    return RM_OK;
}
