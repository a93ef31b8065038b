/* safetensors.c: a strict reader and an atomic writer of .safetensors files
 * (format: see safetensors.h).
 *
 * The reader takes nothing in the file on trust: every size and offset is
 * checked in uint64 arithmetic before it is used, because these files come
 * from elsewhere (and the reader is fuzzed, fuzz/). The writer is in
 * st_write.c; rm_save_params, rm_load_params and the training-state files,
 * on top of both, are in params.c. */
#include "train/safetensors.h"
#include "util/half.h"
#include "util/util.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Tensor bytes are written and read as they lie in memory. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

#define ST_MAX_EXACT 9007199254740992.0 /* 2^53: cJSON numbers are doubles */

typedef struct st_entry {
    rm_st_tensor t;
    uint64_t begin, end;
    int order; /* position in the header, to keep sorting deterministic */
} st_entry;

struct rm_st_file {
    unsigned char *mem;  /* the whole file (rm_st_parse), or its 8 bytes and header (rm_st_open) (owned) */
    const unsigned char *data; /* the data section in mem, or NULL: read from fd */
    uint64_t data_len;
    int fd;              /* rm_st_open: the file, read with pread (-1: all in mem) */
    uint64_t data_off;   /* the data section's offset in the file */
    cJSON *root;         /* names, dtypes and metadata point into it */
    st_entry *ent;       /* by data offset */
    int n;
    int *by_name;        /* indices of ent sorted by name, for bsearch */
    int64_t *dims;
    const char **meta_k, **meta_v;
    int n_meta;
};

void rm_st_seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *rm_st_printable(const char *s, char *out, size_t cap) {
    size_t j = 0;
    if (!out || cap == 0) return "";
    for (size_t i = 0; s && s[i] && j + 4 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        out[j++] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
        if (i >= 60 && s[i + 1]) {
            memcpy(out + j, "...", 3);
            j += 3;
            break;
        }
    }
    out[j] = 0;
    return out;
}

size_t rm_st_dtype_size(const char *dt) {
    static const struct { const char *name; size_t size; } tab[] = {
        {"BOOL", 1}, {"U8", 1}, {"I8", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
        {"U16", 2}, {"I16", 2}, {"F16", 2}, {"BF16", 2},
        {"U32", 4}, {"I32", 4}, {"F32", 4},
        {"U64", 8}, {"I64", 8}, {"F64", 8}, {"C64", 8},
    };
    if (!dt) return 0;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(dt, tab[i].name) == 0) return tab[i].size;
    return 0;
}

uint64_t rm_st_shape_numel(int ndim, const int64_t *shape, int *ovf) {
    uint64_t n = 1;
    *ovf = 0;
    for (int i = 0; i < ndim; i++)
        if (shape[i] == 0) return 0;
    for (int i = 0; i < ndim; i++) {
        uint64_t d = (uint64_t)shape[i];
        if (n > UINT64_MAX / d) {
            *ovf = 1;
            return 0;
        }
        n *= d;
    }
    return n;
}

uint64_t rm_st_numel(const rm_st_tensor *t) {
    int ovf;
    return rm_st_shape_numel(t->ndim, t->shape, &ovf);
}

void rm_format_shape(int ndim, const int64_t *shape, char *out, size_t cap) {
    if (!out || cap == 0) return;
    if (!shape) ndim = 0; /* nothing to print: "[]" */
    size_t j = 0;
    j += (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && j < cap; i++)
        j += (size_t)snprintf(out + j, cap - j, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (j < cap) snprintf(out + j, cap - j, "]");
}

/* ---- reading ------------------------------------------------------------- */

static uint64_t le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* A JSON number that is an exact non-negative integer (cJSON keeps doubles,
 * exact up to 2^53, far beyond any file this reader can hold). */
static int json_uint(const cJSON *it, uint64_t *out) {
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_EXACT) || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_offset(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

/* qsort has no context argument: sort (name, index) pairs instead. */
typedef struct name_idx { const char *name; int idx; } name_idx;
static int cmp_name(const void *a, const void *b) {
    return strcmp(((const name_idx *)a)->name, ((const name_idx *)b)->name);
}

/* A tensor's "shape": at most RM_ST_MAX_NDIM non-negative integers. */
static rm_status parse_shape(const cJSON *sh, int64_t *dims, int *ndim_out, const char *fname, const char *name,
                             char *err, size_t errlen) {
    if (!cJSON_IsArray(sh)) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s': shape is not an array", fname, name);
        return RM_ERR_FORMAT;
    }
    int ndim = cJSON_GetArraySize(sh);
    *ndim_out = ndim;
    if (ndim > RM_ST_MAX_NDIM) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s' has %d dimensions (at most %d)", fname, name,
               ndim, RM_ST_MAX_NDIM);
        return RM_ERR_FORMAT;
    }
    int k = 0;
    for (const cJSON *d = sh->child; d; d = d->next, k++) {
        uint64_t v;
        if (!json_uint(d, &v)) {
            rm_st_seterr(err, errlen, "'%s': tensor '%s': shape entry %d is not a non-negative integer",
                   fname, name, k);
            return RM_ERR_FORMAT;
        }
        dims[k] = (int64_t)v;
    }
    return RM_OK;
}

/* Parses one tensor entry into e (dims appended at *dims). */
static rm_status parse_tensor(const cJSON *it, st_entry *e, int64_t *dims, uint64_t data_len,
                              const char *fname, char *err, size_t errlen) {
    char nm[80];
    const char *name = rm_st_printable(it->string, nm, sizeof nm);
    if (!cJSON_IsObject(it)) {
        rm_st_seterr(err, errlen, "'%s': entry '%s' is not an object", fname, name);
        return RM_ERR_FORMAT;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!dt || !sh || !off) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s' has no \"%s\"", fname, name,
               !dt ? "dtype" : !sh ? "shape" : "data_offsets");
        return RM_ERR_FORMAT;
    }
    if (!cJSON_IsString(dt) || !dt->valuestring) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s': dtype is not a string", fname, name);
        return RM_ERR_FORMAT;
    }
    size_t esize = rm_st_dtype_size(dt->valuestring);
    if (esize == 0) {
        char d[80];
        rm_st_seterr(err, errlen, "'%s': tensor '%s' has unknown dtype '%s'", fname, name,
               rm_st_printable(dt->valuestring, d, sizeof d));
        return RM_ERR_FORMAT;
    }
    int ndim;
    rm_status st = parse_shape(sh, dims, &ndim, fname, name, err, errlen);
    if (st != RM_OK) return st;
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &b) ||
        !json_uint(off->child->next, &en)) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s': data_offsets is not [begin, end] "
               "with non-negative integers", fname, name);
        return RM_ERR_FORMAT;
    }
    if (b > en) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s' has data_offsets [%llu, %llu] with begin > end",
               fname, name, (unsigned long long)b, (unsigned long long)en);
        return RM_ERR_FORMAT;
    }
    if (en > data_len) {
        rm_st_seterr(err, errlen, "'%s': tensor '%s' ends at byte %llu of a %llu-byte data section",
               fname, name, (unsigned long long)en, (unsigned long long)data_len);
        return RM_ERR_FORMAT;
    }
    int ovf;
    uint64_t numel = rm_st_shape_numel(ndim, dims, &ovf);
    char shs[256];
    if (ovf || (numel && esize > UINT64_MAX / numel) || numel * esize != en - b) {
        rm_format_shape(ndim, dims, shs, sizeof shs);
        if (ovf || (numel && esize > UINT64_MAX / numel))
            rm_st_seterr(err, errlen, "'%s': tensor '%s': shape %s is too large", fname, name, shs);
        else
            rm_st_seterr(err, errlen, "'%s': tensor '%s' has %llu data bytes but dtype %s and shape %s "
                   "need %llu", fname, name, (unsigned long long)(en - b), dt->valuestring, shs,
                   (unsigned long long)(numel * esize));
        return RM_ERR_FORMAT;
    }
    e->t.name = it->string;
    e->t.dtype = dt->valuestring;
    e->t.ndim = ndim;
    e->t.shape = dims;
    e->t.bytes = en - b;
    e->begin = b;
    e->end = en;
    return RM_OK;
}

static rm_status parse_metadata(rm_st_file *f, const cJSON *it, const char *fname, char *err,
                                size_t errlen) {
    if (!cJSON_IsObject(it)) {
        rm_st_seterr(err, errlen, "'%s': __metadata__ is not an object", fname);
        return RM_ERR_FORMAT;
    }
    int n = cJSON_GetArraySize(it);
    f->meta_k = calloc((size_t)n + 1, sizeof *f->meta_k);
    f->meta_v = calloc((size_t)n + 1, sizeof *f->meta_v);
    if (!f->meta_k || !f->meta_v) {
        rm_st_seterr(err, errlen, "'%s': out of memory", fname);
        return RM_ERR_NOMEM;
    }
    /* no key twice: parse_header refused that (rm_json_dup_key, in n log n: a pairwise check here took
     * 25 s for 100000 keys, hours for the 5 million a 100 MB header holds) */
    for (const cJSON *m = it->child; m; m = m->next) {
        char k[80];
        if (!cJSON_IsString(m) || !m->valuestring) {
            rm_st_seterr(err, errlen, "'%s': metadata '%s' is not a string", fname,
                   rm_st_printable(m->string, k, sizeof k));
            return RM_ERR_FORMAT;
        }
        f->meta_k[f->n_meta] = m->string;
        f->meta_v[f->n_meta++] = m->valuestring;
    }
    return RM_OK;
}

/* The 8-byte length, then a JSON object padded with whitespace: parses it
 * into f->root and sets f->data to what follows. */
static rm_status parse_header(rm_st_file *f, const unsigned char *buf, size_t len, const char *fname, char *err,
                              size_t errlen) {
    /* rm_st_open: buf holds the 8 bytes and the header; len is the file's */
    const int in_mem = f->fd < 0;
    if (len < 8) {
        rm_st_seterr(err, errlen, "'%s': file has %zu bytes, too short for a safetensors header",
               fname, len);
        return RM_ERR_FORMAT;
    }
    uint64_t hlen = le64(buf);
    if (hlen == 0) {
        rm_st_seterr(err, errlen, "'%s': header length is 0", fname);
        return RM_ERR_FORMAT;
    }
    if (hlen > RM_ST_MAX_HEADER) {
        rm_st_seterr(err, errlen, "'%s': header length %llu exceeds the limit of %u bytes: not a safetensors file, or a damaged one", fname,
               (unsigned long long)hlen, RM_ST_MAX_HEADER);
        return RM_ERR_FORMAT;
    }
    if (hlen > len - 8) {
        rm_st_seterr(err, errlen, "'%s': header length %llu goes past the end of the file (%zu bytes)",
               fname, (unsigned long long)hlen, len);
        return RM_ERR_FORMAT;
    }
    const char *hdr = (const char *)buf + 8;
    f->data = in_mem ? buf + 8 + hlen : NULL;
    f->data_off = 8 + hlen;
    f->data_len = len - 8 - hlen;
    if (hdr[0] != '{') {
        rm_st_seterr(err, errlen, "'%s': header is not a JSON object", fname);
        return RM_ERR_FORMAT;
    }
    const long long nul = rm_json_nul_at(hdr, (size_t)hlen); /* a name would end there for remat, not for Python */
    if (nul >= 0) {
        rm_st_seterr(err, errlen, "'%s': header contains a NUL character (byte %lld): readers differ on the names "
                     "around it", fname, nul);
        return RM_ERR_FORMAT;
    }
    const char *end = NULL;
    f->root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, 0);
    if (!f->root) {
        size_t at = (end && end >= hdr && end <= hdr + hlen) ? (size_t)(end - hdr) : 0;
        rm_st_seterr(err, errlen, "'%s': header is not valid JSON (near byte %zu)", fname, at);
        return RM_ERR_FORMAT;
    }
    /* Only whitespace (the spec's space padding) may follow the object. */
    for (const char *p = end ? end : hdr + hlen; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            rm_st_seterr(err, errlen, "'%s': header has bytes after the JSON object", fname);
            return RM_ERR_FORMAT;
        }
    if (!cJSON_IsObject(f->root)) {
        rm_st_seterr(err, errlen, "'%s': header is not a JSON object", fname);
        return RM_ERR_FORMAT;
    }
    const char *dup = rm_json_dup_key(f->root); /* a tensor or a metadata key twice: which one counts? */
    if (dup) {
        char k[80];
        rm_st_seterr(err, errlen, "'%s': header names '%s' twice", fname, rm_st_printable(dup, k, sizeof k));
        return RM_ERR_FORMAT;
    }
    return RM_OK;
}

/* Counts the tensors and their dimensions (for one allocation each);
 * a second __metadata__ is an error. */
static rm_status count_entries(const rm_st_file *f, int *n_tensors, size_t *total_dims, const char *fname,
                               char *err, size_t errlen) {
    int have_meta = 0;
    *n_tensors = 0, *total_dims = 0;
    for (const cJSON *it = f->root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (have_meta++) {
                rm_st_seterr(err, errlen, "'%s': __metadata__ appears twice", fname);
                return RM_ERR_FORMAT;
            }
            continue;
        }
        (*n_tensors)++;
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
        if (cJSON_IsArray(sh)) {
            int k = cJSON_GetArraySize(sh);
            *total_dims += (size_t)(k < RM_ST_MAX_NDIM ? k : RM_ST_MAX_NDIM);
        }
    }
    return RM_OK;
}

/* Parses every entry of the header: the tensors into f->ent, the metadata. */
static rm_status parse_entries(rm_st_file *f, const char *fname, char *err, size_t errlen) {
    int n_tensors;
    size_t total_dims;
    rm_status st = count_entries(f, &n_tensors, &total_dims, fname, err, errlen);
    if (st != RM_OK) return st;
    f->ent = calloc((size_t)n_tensors + 1, sizeof *f->ent);
    f->by_name = calloc((size_t)n_tensors + 1, sizeof *f->by_name);
    f->dims = calloc(total_dims + 1, sizeof *f->dims);
    if (!f->ent || !f->by_name || !f->dims) {
        rm_st_seterr(err, errlen, "'%s': out of memory", fname);
        return RM_ERR_NOMEM;
    }
    size_t dpos = 0;
    for (const cJSON *it = f->root->child; it && st == RM_OK; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            st = parse_metadata(f, it, fname, err, errlen);
            continue;
        }
        st_entry *e = &f->ent[f->n];
        e->order = f->n;
        st = parse_tensor(it, e, f->dims + dpos, f->data_len, fname, err, errlen);
        if (st == RM_OK) {
            dpos += (size_t)e->t.ndim;
            f->n++;
        }
    }
    return st;
}

/* The tensors must tile the data section: no overlap, no hole. */
static rm_status check_tiling(rm_st_file *f, const char *fname, char *err, size_t errlen) {
    qsort(f->ent, (size_t)f->n, sizeof *f->ent, cmp_offset);
    uint64_t pos = 0;
    for (int i = 0; i < f->n; i++) {
        char a[80], b[80];
        st_entry *e = &f->ent[i];
        if (e->begin < pos) {
            rm_st_seterr(err, errlen, "'%s': tensors '%s' and '%s' overlap", fname,
                   rm_st_printable(f->ent[i - 1].t.name, a, sizeof a), rm_st_printable(e->t.name, b, sizeof b));
            return RM_ERR_FORMAT;
        }
        if (e->begin > pos) {
            rm_st_seterr(err, errlen, "'%s': %llu unused bytes before tensor '%s'", fname,
                   (unsigned long long)(e->begin - pos), rm_st_printable(e->t.name, b, sizeof b));
            return RM_ERR_FORMAT;
        }
        pos = e->end;
        e->t.data = f->data ? f->data + e->begin : NULL;
    }
    if (pos != f->data_len) {
        rm_st_seterr(err, errlen, "'%s': data section has %llu bytes but the tensors cover %llu",
               fname, (unsigned long long)f->data_len, (unsigned long long)pos);
        return RM_ERR_FORMAT;
    }
    return RM_OK;
}

/* f->by_name: the tensors in name order, for lookups; names are unique. */
static rm_status index_names(rm_st_file *f, const char *fname, char *err, size_t errlen) {
    name_idx *names = calloc((size_t)f->n + 1, sizeof *names);
    if (!names) {
        rm_st_seterr(err, errlen, "'%s': out of memory", fname);
        return RM_ERR_NOMEM;
    }
    for (int i = 0; i < f->n; i++) {
        names[i].name = f->ent[i].t.name;
        names[i].idx = i;
    }
    qsort(names, (size_t)f->n, sizeof *names, cmp_name);
    rm_status st = RM_OK;
    for (int i = 0; i < f->n && st == RM_OK; i++) {
        f->by_name[i] = names[i].idx;
        if (i > 0 && strcmp(names[i].name, names[i - 1].name) == 0) {
            char a[80];
            rm_st_seterr(err, errlen, "'%s': tensor '%s' appears twice", fname,
                   rm_st_printable(names[i].name, a, sizeof a));
            st = RM_ERR_FORMAT;
        }
    }
    free(names);
    return st;
}

/* Validates the file in f->mem[0..len) and fills f. */
static rm_status parse_file(rm_st_file *f, const unsigned char *buf, size_t len,
                            const char *fname, char *err, size_t errlen) {
    rm_status st = parse_header(f, buf, len, fname, err, errlen);
    if (st == RM_OK) st = parse_entries(f, fname, err, errlen);
    if (st == RM_OK) st = check_tiling(f, fname, err, errlen);
    if (st == RM_OK) st = index_names(f, fname, err, errlen);
    return st;
}

void rm_st_close(rm_st_file *f) {
    if (!f) return;
    cJSON_Delete(f->root);
    free(f->ent);
    free(f->by_name);
    free(f->dims);
    free(f->meta_k);
    free(f->meta_v);
    free(f->mem);
    if (f->fd >= 0) close(f->fd);
    free(f);
}

rm_status rm_st_read(const rm_st_file *f, const rm_st_tensor *t, uint64_t off, void *dst, size_t n) {
    if (off > t->bytes || n > t->bytes - off) return RM_ERR_ARG;
    if (t->data) {
        memcpy(dst, (const unsigned char *)t->data + off, n);
        return RM_OK;
    }
    const st_entry *e = (const st_entry *)(const void *)t; /* t is the first member of its entry */
    uint64_t at = f->data_off + e->begin + off;
    for (unsigned char *p = dst; n > 0;) {
        ssize_t r = pread(f->fd, p, n, (off_t)at);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return RM_ERR_IO; /* an error, or the file shrank since it was opened */
        p += r, n -= (size_t)r, at += (uint64_t)r;
    }
    return RM_OK;
}

/* Allocates room for a len-byte file whose data section will start 64-byte
 * aligned (given the header length in its first 8 bytes, if plausible). */
static unsigned char *alloc_file(const unsigned char first8[8], size_t len, unsigned char **mem) {
    size_t pad = 0;
    if (len >= 8) {
        uint64_t h = le64(first8);
        if (h <= len - 8) pad = (size_t)((64 - (8 + h) % 64) % 64);
    }
    void *p = NULL;
    if (len > SIZE_MAX - 128 || posix_memalign(&p, 64, pad + len + 64) != 0) return NULL;
    *mem = p;
    return (unsigned char *)p + pad;
}

static rm_status finish_open(rm_st_file *f, const unsigned char *buf, size_t len,
                             const char *fname, rm_st_file **out, char *err, size_t errlen) {
    rm_status st = parse_file(f, buf, len, fname, err, errlen);
    if (st != RM_OK) {
        rm_st_close(f);
        return st;
    }
    *out = f;
    return RM_OK;
}

rm_status rm_st_parse(const void *buf, size_t len, const char *name, rm_st_file **out,
                      char *err, size_t errlen) {
    if (!out || (!buf && len)) {
        rm_st_seterr(err, errlen, "rm_st_parse: bad arguments");
        return RM_ERR_ARG;
    }
    *out = NULL;
    if (!name) name = "<memory>";
    rm_st_file *f = calloc(1, sizeof *f);
    if (f) f->fd = -1;
    unsigned char first8[8] = {0};
    if (len >= 8) memcpy(first8, buf, 8);
    unsigned char *dst = f ? alloc_file(first8, len, &f->mem) : NULL;
    if (!dst) {
        free(f);
        rm_st_seterr(err, errlen, "'%s': out of memory", name);
        return RM_ERR_NOMEM;
    }
    if (len) memcpy(dst, buf, len);
    return finish_open(f, dst, len, name, out, err, errlen);
}

static int read_all(int fd, unsigned char *p, size_t n) {
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) {
            errno = EIO; /* the file shrank while being read */
            return -1;
        }
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

rm_status rm_st_open(const char *path, rm_st_file **out, char *err, size_t errlen) {
    if (!path || !out) {
        rm_st_seterr(err, errlen, "rm_st_open: bad arguments");
        return RM_ERR_ARG;
    }
    *out = NULL;
    size_t len;
    rm_status st;
    int fd = rm_open_regular(path, SIZE_MAX / 2, &len, &st, err, errlen); /* never blocks on a FIFO */
    if (fd < 0) return st;
    unsigned char first8[8] = {0};
    if (len >= 8 && read_all(fd, first8, 8) != 0) {
        rm_st_seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        close(fd);
        return RM_ERR_IO;
    }
    /* Only the 8 bytes and the header are read now (what the header says is
     * checked against the file's size first); tensors are read from the
     * file when asked for (rm_st_read), so opening a file of any size takes
     * the header's memory. A header length past the file or the limit is
     * refused by parse_header before anything of that size is allocated. */
    uint64_t hlen = len >= 8 ? le64(first8) : 0;
    size_t head = len < 8 ? len : hlen <= RM_ST_MAX_HEADER && hlen <= len - 8 ? 8 + (size_t)hlen : 8;
    rm_st_file *f = calloc(1, sizeof *f);
    unsigned char *dst = f ? malloc(head + 1) : NULL;
    if (!dst) {
        free(f);
        close(fd);
        rm_st_seterr(err, errlen, "cannot read '%s': out of memory (%zu bytes)", path, head);
        return RM_ERR_NOMEM;
    }
    f->mem = dst, f->fd = fd;
    size_t have = len >= 8 ? 8 : 0;
    memcpy(dst, first8, have);
    if (read_all(fd, dst + have, head - have) != 0) {
        rm_st_seterr(err, errlen, "cannot read '%s': %s", path, strerror(errno));
        rm_st_close(f);
        return RM_ERR_IO;
    }
    return finish_open(f, dst, len, path, out, err, errlen);
}

int rm_st_count(const rm_st_file *f) { return f ? f->n : 0; }

const rm_st_tensor *rm_st_at(const rm_st_file *f, int i) {
    return (f && i >= 0 && i < f->n) ? &f->ent[i].t : NULL;
}

const rm_st_tensor *rm_st_find(const rm_st_file *f, const char *name) {
    if (!f || !name) return NULL;
    int lo = 0, hi = f->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const rm_st_tensor *t = &f->ent[f->by_name[mid]].t;
        int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

const char *rm_st_meta(const rm_st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_k[i], key) == 0) return f->meta_v[i];
    return NULL;
}

int rm_st_meta_count(const rm_st_file *f) { return f ? f->n_meta : 0; }
const char *rm_st_meta_key(const rm_st_file *f, int i) {
    return (f && i >= 0 && i < f->n_meta) ? f->meta_k[i] : NULL;
}
const char *rm_st_meta_value(const rm_st_file *f, int i) {
    return (f && i >= 0 && i < f->n_meta) ? f->meta_v[i] : NULL;
}

/* ---- values ----------------------------------------------------------------- */

float rm_st_element(const rm_st_tensor *t, uint64_t i) {
    const unsigned char *p = t->data; /* maybe unaligned: bytes are copied */
    if (strcmp(t->dtype, "F32") == 0) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    const uint16_t h = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    return strcmp(t->dtype, "BF16") == 0 ? rm_bf16_to_f32(h) : rm_f16_to_f32(h);
}

/* n elements of t, its data in memory, into dst kept as store; *bad: the
 * first that is not finite (counted from `first`), unless set already */
static void convert_mem(const rm_st_tensor *t, void *dst, uint64_t n, rm_dtype store, uint64_t first,
                        int64_t *bad) {
    const int same = (store == RM_DTYPE_BF16 && strcmp(t->dtype, "BF16") == 0) ||
                     (store == RM_DTYPE_F16 && strcmp(t->dtype, "F16") == 0);
    for (uint64_t i = 0; i < n; i++) {
        const float x = rm_st_element(t, i);
        if (!isfinite(x) && *bad < 0) *bad = (int64_t)(first + i);
        if (store == RM_DTYPE_F32) ((float *)dst)[i] = x;
        else if (same) memcpy((uint16_t *)dst + i, (const unsigned char *)t->data + 2 * i, 2);
        else ((uint16_t *)dst)[i] = store == RM_DTYPE_BF16 ? rm_f32_to_bf16(x) : rm_f32_to_f16(x);
    }
}

#define CONVERT_BLOCK 65536 /* elements read at a time from a file kept on disk */

rm_status rm_st_convert(const rm_st_file *f, const rm_st_tensor *t, void *dst, uint64_t n, rm_dtype store,
                        int64_t *bad) {
    *bad = -1;
    if (t->data) {
        convert_mem(t, dst, n, store, 0, bad);
        return RM_OK;
    }
    const size_t esize = rm_st_dtype_size(t->dtype), out = store == RM_DTYPE_F32 ? 4 : 2;
    unsigned char *buf = malloc(CONVERT_BLOCK * esize);
    if (!buf) return RM_ERR_NOMEM;
    rm_status st = RM_OK;
    for (uint64_t i0 = 0; i0 < n && st == RM_OK; i0 += CONVERT_BLOCK) {
        const uint64_t k = n - i0 < CONVERT_BLOCK ? n - i0 : CONVERT_BLOCK;
        st = rm_st_read(f, t, i0 * esize, buf, (size_t)(k * esize));
        rm_st_tensor part = *t;
        part.data = buf, part.bytes = k * esize;
        if (st == RM_OK) convert_mem(&part, (unsigned char *)dst + i0 * out, k, store, i0, bad);
    }
    free(buf);
    return st;
}

const char *rm_st_dtype_name(rm_dtype store) {
    return store == RM_DTYPE_BF16 ? "BF16" : store == RM_DTYPE_F16 ? "F16" : "F32";
}
