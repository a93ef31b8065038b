/* data.c: loading token data, the train/validation split and the batch
 * samplers (see data.h). No global state: everything lives in rm_dataset. */
#include "train/data.h"
#include "util/util.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

extern const unsigned char rm_corpus[];
extern const size_t rm_corpus_len;

/* Philox counter word that separates the data sampler's stream from the
 * others keyed by the same seed (init, dropout): "DATA". */
#define DATA_STREAM 0x44415441u

static void seterr(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

void rm_data_free(rm_dataset *d) {
    if (!d) return;
    free(d->tokens);
    memset(d, 0, sizeof *d);
}

/* Common tail of the loaders: the token count and the largest id. */
static rm_status finish(rm_dataset *d, char *err, size_t errlen) {
    if (d->n < 2) {
        seterr(err, errlen, "'%s': %s; at least 2 tokens are needed", d->name,
               d->n == 0 ? "no tokens (the file is empty)" : "only 1 token");
        free(d->tokens);
        d->tokens = NULL;
        d->n = 0;
        return RM_ERR_FORMAT;
    }
    int32_t mx = 0;
    for (size_t i = 0; i < d->n; i++)
        if (d->tokens[i] > mx) mx = d->tokens[i];
    d->max_id = mx;
    d->n_train = d->n;
    d->n_val = 0;
    return RM_OK;
}

/* Empties *d, names it and allocates room for n tokens. */
static rm_status alloc_tokens(rm_dataset *d, const char *name, rm_data_format format, size_t n,
                              char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name ? name : "<memory>");
    d->format = format;
    if (n > SIZE_MAX / sizeof(int32_t)) {
        seterr(err, errlen, "'%s': too large", d->name);
        return RM_ERR_NOMEM;
    }
    d->tokens = malloc((n ? n : 1) * sizeof *d->tokens);
    if (!d->tokens) {
        seterr(err, errlen, "'%s': out of memory for %zu tokens", d->name, n);
        return RM_ERR_NOMEM;
    }
    return RM_OK;
}

rm_status rm_data_from_bytes(rm_dataset *d, const char *name, const unsigned char *bytes,
                             size_t n, char *err, size_t errlen) {
    if (!d || (!bytes && n)) {
        seterr(err, errlen, "rm_data_from_bytes: bad arguments");
        return RM_ERR_ARG;
    }
    rm_status st = alloc_tokens(d, name, RM_DATA_BYTES, n, err, errlen);
    if (st != RM_OK) return st;
    for (size_t i = 0; i < n; i++) d->tokens[i] = bytes[i];
    d->n = n;
    return finish(d, err, errlen);
}

rm_status rm_data_from_tokens(rm_dataset *d, const char *name, const int32_t *tokens, size_t n,
                              char *err, size_t errlen) {
    if (!d || (!tokens && n)) {
        seterr(err, errlen, "rm_data_from_tokens: bad arguments");
        return RM_ERR_ARG;
    }
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0) {
            memset(d, 0, sizeof *d);
            seterr(err, errlen, "'%s': token %d at position %zu is negative", name ? name : "<memory>",
                   (int)tokens[i], i);
            return RM_ERR_ARG;
        }
    rm_status st = alloc_tokens(d, name, RM_DATA_TOKENS, n, err, errlen);
    if (st != RM_OK) return st;
    if (n) memcpy(d->tokens, tokens, n * sizeof *tokens);
    d->n = n;
    return finish(d, err, errlen);
}

rm_status rm_data_load_corpus(rm_dataset *d, char *err, size_t errlen) {
    return rm_data_from_bytes(d, "<corpus>", rm_corpus, rm_corpus_len, err, errlen);
}

static int32_t rd_i32(const unsigned char *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    return (int32_t)v;
}

rm_status rm_data_load_file(rm_dataset *d, const char *path, char *err, size_t errlen) {
    return rm_data_load_tokens(d, path, 0, err, errlen);
}

rm_status rm_data_load_tokens(rm_dataset *d, const char *path, int token_bytes, char *err, size_t errlen) {
    if (!d || !path || (token_bytes != 0 && token_bytes != 2 && token_bytes != 4)) {
        if (d) memset(d, 0, sizeof *d);
        seterr(err, errlen, "rm_data_load_tokens: bad arguments (token_bytes is 0, 2 or 4)");
        return RM_ERR_ARG;
    }
    memset(d, 0, sizeof *d);
    char *buf;
    size_t len;
    rm_status st = rm_read_file(path, SIZE_MAX / 8, &buf, &len, err, errlen); /* refuses FIFOs at once */
    if (st != RM_OK) return st;
    st = rm_data_parse_width(d, path, (const unsigned char *)buf, len, token_bytes, err, errlen);
    free(buf);
    return st;
}

rm_status rm_data_parse(rm_dataset *d, const char *name, const unsigned char *buf, size_t len, char *err,
                        size_t errlen) {
    return rm_data_parse_width(d, name, buf, len, 0, err, errlen);
}

/* n ids of `width` bytes (little-endian, unsigned) from p into d->tokens;
 * an id above INT32_MAX (only 4-byte ids can be) is refused. */
static rm_status read_ids(rm_dataset *d, const unsigned char *p, size_t n, int width, char *err, size_t errlen) {
    d->tokens = malloc((n ? n : 1) * sizeof *d->tokens);
    if (!d->tokens) {
        seterr(err, errlen, "'%s': out of memory for %zu tokens", d->name, n);
        return RM_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const unsigned char *q = p + (size_t)width * i;
        uint32_t v = (uint32_t)q[0] | (uint32_t)q[1] << 8;
        if (width == 4) v |= (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
        if (v > INT32_MAX) {
            seterr(err, errlen, "'%s': token %u at position %zu is too large for a token id", d->name, v, i);
            free(d->tokens);
            d->tokens = NULL;
            return RM_ERR_FORMAT;
        }
        d->tokens[i] = (int32_t)v;
    }
    d->n = n;
    return RM_OK;
}

/* An llm.c header (llm.c dev/data/data_common.py: write_datafile): 256
 * int32, magic and version say the id width, then the token count. */
static rm_status parse_llmc(rm_dataset *d, const char *name, const unsigned char *buf, size_t len, int token_bytes,
                            char *err, size_t errlen) {
    const int32_t magic = rd_i32(buf), version = len >= 8 ? rd_i32(buf + 4) : 0;
    const int width = magic == RM_LLMC_MAGIC ? 2 : 4;
    const size_t hdr = RM_LLMC_HEADER_INTS * 4;
    d->format = RM_DATA_LLMC;
    if (len < hdr) {
        seterr(err, errlen, "'%s': llm.c token file with a truncated header (%zu of %zu bytes)", name, len, hdr);
        return RM_ERR_FORMAT;
    }
    const int32_t want = magic == RM_LLMC_MAGIC ? RM_LLMC_VERSION : RM_LLMC_VERSION_U32, count = rd_i32(buf + 8);
    if (version != want) {
        seterr(err, errlen, "'%s': llm.c token file (magic %d) version %d is not supported (only %d, %s tokens)",
               name, (int)magic, (int)version, (int)want, width == 2 ? "uint16" : "uint32");
        return RM_ERR_FORMAT;
    }
    if (token_bytes && token_bytes != width) {
        seterr(err, errlen, "'%s': its llm.c header says %d-byte tokens, not --token-bytes %d", name, width,
               token_bytes);
        return RM_ERR_FORMAT;
    }
    if (count < 0 || (uint64_t)(len - hdr) != (uint64_t)width * (uint64_t)count) {
        seterr(err, errlen, "'%s': llm.c header says %d tokens (%llu bytes) but the file has %zu bytes of tokens",
               name, (int)count, (unsigned long long)((uint64_t)width * (uint64_t)(count < 0 ? 0 : count)),
               len - hdr);
        return RM_ERR_FORMAT;
    }
    rm_status st = read_ids(d, buf + hdr, (size_t)count, width, err, errlen);
    return st == RM_OK ? finish(d, err, errlen) : st;
}

rm_status rm_data_parse_width(rm_dataset *d, const char *name, const unsigned char *buf, size_t len,
                              int token_bytes, char *err, size_t errlen) {
    if (!d || !name || (!buf && len) || (token_bytes != 0 && token_bytes != 2 && token_bytes != 4)) {
        seterr(err, errlen, "rm_data_parse: bad arguments");
        return RM_ERR_ARG;
    }
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    const int llmc = len >= 4 && (rd_i32(buf) == RM_LLMC_MAGIC || rd_i32(buf) == RM_LLMC_MAGIC_U32);
    if (llmc) return parse_llmc(d, name, buf, len, token_bytes, err, errlen);
    if (!token_bytes) return rm_data_from_bytes(d, name, buf, len, err, errlen);
    /* a headerless array of ids (numpy's tofile) */
    d->format = RM_DATA_TOKENS;
    if (len % (size_t)token_bytes != 0) {
        seterr(err, errlen, "'%s': %zu bytes is not a whole number of %d-byte tokens (and there is no llm.c header)",
               name, len, token_bytes);
        return RM_ERR_FORMAT;
    }
    rm_status st = read_ids(d, buf, len / (size_t)token_bytes, token_bytes, err, errlen);
    return st == RM_OK ? finish(d, err, errlen) : st;
}

/* rm_dataset is a public struct a caller may fill by hand: its counts must
 * agree before a reader indexes tokens by them (n_train past n read past
 * the tokens). */
static int consistent(const rm_dataset *d) {
    return d && d->tokens && d->n_train <= d->n && d->n_val <= d->n - d->n_train;
}

static rm_status inconsistent(const rm_dataset *d, char *err, size_t errlen) {
    if (!d || !d->tokens)
        seterr(err, errlen, "no data loaded");
    else
        seterr(err, errlen, "'%.200s': the dataset's counts disagree (n %zu, n_train %zu, n_val %zu: the parts "
               "must fit in n); fill it with a loader and rm_data_split", d->name, d->n, d->n_train, d->n_val);
    return RM_ERR_ARG;
}

rm_status rm_data_check_vocab(const rm_dataset *d, int vocab, char *err, size_t errlen) {
    if (!d || vocab <= 0) {
        seterr(err, errlen, "vocabulary size must be positive (got %d)", vocab);
        return RM_ERR_ARG;
    }
    if (!consistent(d)) return inconsistent(d, err, errlen);
    /* every id read, not max_id: a dataset filled by hand may say anything there */
    for (size_t i = 0; i < d->n; i++) {
        int32_t id = d->tokens[i];
        if (id < 0) {
            seterr(err, errlen, "'%s': token %d at position %zu is negative; token ids are in [0, vocab)", d->name,
                   (int)id, i);
            return RM_ERR_ARG;
        }
        if (id >= vocab) {
            int32_t max = id;
            for (size_t j = i; j < d->n; j++) max = d->tokens[j] > max ? d->tokens[j] : max;
            seterr(err, errlen, "'%s': token %d at position %zu is >= vocab %d; the model "
                   "needs a vocab of %lld or larger", d->name, (int)id, i, vocab, (long long)max + 1);
            return RM_ERR_ARG;
        }
    }
    return RM_OK;
}

/* Tokens one (B, T) batch needs, or 0 if B or T is not positive or B*T+1
 * overflows. */
static uint64_t batch_need(int B, int T) {
    if (B <= 0 || T <= 0) return 0;
    return (uint64_t)B * (uint64_t)T + 1; /* < 2^62: no overflow */
}

rm_status rm_data_split(rm_dataset *d, double val_fraction, int B, int T, char *err,
                        size_t errlen) {
    if (!d || !d->tokens) {
        seterr(err, errlen, "rm_data_split: no data");
        return RM_ERR_ARG;
    }
    if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
        seterr(err, errlen, "validation fraction must be in [0, 1) (got %g)", val_fraction);
        return RM_ERR_ARG;
    }
    uint64_t need = batch_need(B, T);
    if (need == 0) {
        seterr(err, errlen, "batch size and sequence length must be positive (got B=%d, T=%d)",
               B, T);
        return RM_ERR_ARG;
    }
    size_t n_val = (size_t)((double)d->n * val_fraction);
    if (n_val > d->n) n_val = d->n;
    size_t n_train = d->n - n_val;
    if (n_train < need) {
        seterr(err, errlen, "'%s': the training part has %zu tokens (of %zu) but a batch of "
               "B=%d x T=%d needs %llu (B*T+1); use more data, a smaller batch or a smaller "
               "validation fraction", d->name, n_train, d->n, B, T, (unsigned long long)need);
        return RM_ERR_ARG;
    }
    if (val_fraction > 0.0 && n_val < need) {
        seterr(err, errlen, "'%s': the validation part has %zu tokens (%g of %zu) but a batch "
               "of B=%d x T=%d needs %llu (B*T+1); use more data, a smaller batch or a larger "
               "validation fraction", d->name, n_val, val_fraction, d->n, B, T,
               (unsigned long long)need);
        return RM_ERR_ARG;
    }
    d->n_train = n_train;
    d->n_val = n_val;
    return RM_OK;
}

size_t rm_data_part_len(const rm_dataset *d, rm_data_part part) {
    if (!consistent(d)) return 0;
    return part == RM_DATA_VAL ? d->n_val : d->n_train;
}

static const int32_t *part_base(const rm_dataset *d, rm_data_part part) {
    return part == RM_DATA_VAL ? d->tokens + d->n_train : d->tokens;
}

uint64_t rm_data_num_batches(const rm_dataset *d, rm_data_part part, int B, int T) {
    size_t n = rm_data_part_len(d, part);
    uint64_t bt = batch_need(B, T);
    if (bt == 0 || n < bt) return 0;
    return (uint64_t)(n - 1) / (bt - 1);
}

size_t rm_data_row_start(const rm_dataset *d, rm_data_part part, rm_sampler mode, uint64_t seed,
                         uint64_t k, int B, int T, int r) {
    size_t n = rm_data_part_len(d, part);
    if (part == RM_DATA_VAL || mode == RM_SAMPLE_SEQUENTIAL) {
        uint64_t nb = rm_data_num_batches(d, part, B, T);
        if (nb == 0) return 0;
        return (size_t)((k % nb) * (uint64_t)B * (uint64_t)T + (uint64_t)r * (uint64_t)T);
    }
    if (T < 0 || n < (size_t)T + 1) return 0;
    /* Uniform in [0, n-T-1]: 64 random bits reduced mod n-T; the bias,
     * (n-T)/2^64, is negligible (a float in [0,1) would leave gaps). */
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    const uint32_t ctr[4] = {(uint32_t)r, (uint32_t)k, (uint32_t)(k >> 32), DATA_STREAM};
    uint32_t out[4];
    rm_philox4x32(key, ctr, out);
    uint64_t x = (uint64_t)out[0] | (uint64_t)out[1] << 32;
    return (size_t)(x % (uint64_t)(n - (size_t)T));
}

static rm_status check_batch(const rm_dataset *d, rm_data_part part, int B, int T, char *err,
                             size_t errlen) {
    if (!consistent(d)) return inconsistent(d, err, errlen);
    uint64_t need = batch_need(B, T);
    size_t n = rm_data_part_len(d, part);
    if (need == 0 || n < need) {
        seterr(err, errlen, "'%s': the %s part has %zu tokens but a batch of B=%d x T=%d "
               "needs %llu", d->name, part == RM_DATA_VAL ? "validation" : "training", n, B, T,
               (unsigned long long)need);
        return RM_ERR_ARG;
    }
    return RM_OK;
}

rm_status rm_data_rows(const rm_dataset *d, rm_data_part part, rm_sampler mode, uint64_t seed, uint64_t k,
                       int B, int T, int r0, int n, int vocab, int32_t *tokens, float *x, int32_t *targets,
                       char *err, size_t errlen) {
    rm_status st = check_batch(d, part, B, T, err, errlen);
    if (st != RM_OK) return st;
    if (r0 < 0 || n < 0 || r0 > B - n) {
        seterr(err, errlen, "rows [%d, %d) are not within a batch of %d rows", r0, r0 + n, B);
        return RM_ERR_ARG;
    }
    if (x && vocab < 2) {
        seterr(err, errlen, "the mlp input scales ids by 1/(vocab-1): vocab must be >= 2 "
               "(got %d)", vocab);
        return RM_ERR_ARG;
    }
    const int32_t *base = part_base(d, part);
    const float den = (float)(vocab - 1);
    for (int i = 0; i < n; i++) {
        // a language model: tokens (n,T), targets (n,T); a window model: x (n,T), targets (n)
        const int32_t *row = base + rm_data_row_start(d, part, mode, seed, k, B, T, r0 + i);
        if (x) {
            for (int t = 0; t < T; t++) x[(size_t)i * T + t] = (float)row[t] / den;
            targets[i] = row[T];
        } else {
            memcpy(tokens + (size_t)i * T, row, (size_t)T * sizeof *tokens);
            memcpy(targets + (size_t)i * T, row + 1, (size_t)T * sizeof *targets);
        }
    }
    return RM_OK;
}

rm_status rm_data_batch(const rm_dataset *d, rm_data_part part, rm_sampler mode, uint64_t seed,
                        uint64_t k, int B, int T, int32_t *tokens, int32_t *targets,
                        char *err, size_t errlen) {
    if (!tokens || !targets) {
        seterr(err, errlen, "rm_data_batch: %s is NULL", !tokens ? "tokens" : "targets");
        return RM_ERR_ARG;
    }
    return rm_data_rows(d, part, mode, seed, k, B, T, 0, B, 0, tokens, NULL, targets, err, errlen);
}

rm_status rm_data_batch_mlp(const rm_dataset *d, rm_data_part part, rm_sampler mode,
                            uint64_t seed, uint64_t k, int B, int T, int vocab, float *x,
                            int32_t *y, char *err, size_t errlen) {
    if (!x || !y) {
        seterr(err, errlen, "rm_data_batch_mlp: %s is NULL", !x ? "x" : "y");
        return RM_ERR_ARG;
    }
    return rm_data_rows(d, part, mode, seed, k, B, T, 0, B, vocab, NULL, x, y, err, errlen);
}
