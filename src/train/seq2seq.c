/* seq2seq.c: data for the encoder-decoder (encdec.c): pairs of byte strings
 * (source, target) turned into the four (B,T) rows the model reads:
 *   source:      s_0 .. s_{n-1} PAD ..            (truncated to T)
 *   source_mask: 1 .. 1 0 ..                      (1 where source is not PAD)
 *   tokens:      BOS y_0 .. y_{T-2}                (decoder input, shifted right)
 *   targets:     y_0 .. y_{T-1}                   (y = target bytes + EOS, PAD after)
 * Pairs come from a file of tab-separated "source<TAB>target" lines, or
 * from the built-in task: reverse a random string of lowercase letters.
 * Batch k is a pure function of (seed, k), as every remat batch. */
#include "exec/exec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void rm_seq2seq_row(const unsigned char *src, size_t ns, const unsigned char *tgt, size_t nt, int T,
                    int32_t *source, int32_t *mask, int32_t *tokens, int32_t *targets) {
    if (!source || !mask || !tokens || !targets || (!src && ns) || (!tgt && nt)) return; /* nothing to write into */
    for (int t = 0; t < T; t++) {
        const int real = (size_t)t < ns;
        source[t] = real ? src[t] : RM_ENCDEC_PAD;
        mask[t] = real;
        /* y_t: target byte, then EOS, then PAD */
        targets[t] = (size_t)t < nt ? tgt[t] : (size_t)t == nt ? RM_ENCDEC_EOS : RM_ENCDEC_PAD;
        tokens[t] = t == 0 ? RM_ENCDEC_BOS : targets[t - 1] == RM_ENCDEC_EOS ? RM_ENCDEC_PAD : targets[t - 1];
    }
}

void rm_seq2seq_reverse_pair(uint64_t seed, uint64_t k, int r, int T, unsigned char *src, unsigned char *tgt,
                             size_t *n) {
    if (!src || !tgt || !n) return;
    if (T < 1) { /* buffers of T bytes hold no letter */
        *n = 0;
        return;
    }
    /* length in [1, T-1], so that the target's EOS fits in the T positions */
    const int max = T > 2 ? T - 1 : 1;
    const size_t len = 1 + (size_t)(rm_philox_uniform(seed, (uint32_t)k, (uint32_t)r, 0) * (float)max) % (size_t)max;
    for (size_t i = 0; i < len; i++)
        src[i] = (unsigned char)('a' + (int)(rm_philox_uniform(seed, (uint32_t)k, (uint32_t)r, i + 1) * 26.0f) % 26);
    for (size_t i = 0; i < len; i++) tgt[i] = src[len - 1 - i];
    *n = len;
}

rm_status rm_pairs_load(rm_pairs *p, const char *path, char *err, size_t errlen) {
    if (!p || !path) {
        if (err && errlen) snprintf(err, errlen, "rm_pairs_load: %s is NULL", !p ? "p" : "path");
        return RM_ERR_ARG;
    }
    memset(p, 0, sizeof *p);
    char *text;
    size_t len;
    /* regular files only, never blocking on a FIFO (docs/RELIABILITY.md) */
    rm_status st = rm_read_file(path, SIZE_MAX / 8, &text, &len, err, errlen);
    if (st != RM_OK) return st;
    unsigned char *buf = (unsigned char *)text;
    size_t lines = 0;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    p->off = malloc((lines + 1) * 4 * sizeof *p->off);
    if (!p->off) {
        free(buf);
        snprintf(err, errlen, "out of memory reading '%s'", path);
        return RM_ERR_NOMEM;
    }
    p->buf = buf, p->len = len;
    size_t line = 0;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && buf[e] != '\n') e++;
        size_t end = e > i && buf[e - 1] == '\r' ? e - 1 : e, tab = i;
        while (tab < end && buf[tab] != '\t') tab++;
        line++;
        if (end > i) { /* blank lines are skipped */
            if (tab == end) {
                snprintf(err, errlen, "'%s' line %zu: no tab between source and target", path, line);
                rm_pairs_free(p);
                return RM_ERR_FORMAT;
            }
            size_t *o = p->off + 4 * p->n++;
            o[0] = i, o[1] = tab - i, o[2] = tab + 1, o[3] = end - tab - 1;
        }
        i = e + 1;
    }
    if (p->n == 0) {
        snprintf(err, errlen, "'%s' holds no source<TAB>target line", path);
        rm_pairs_free(p);
        return RM_ERR_FORMAT;
    }
    return RM_OK;
}

void rm_pairs_free(rm_pairs *p) {
    if (!p) return;
    free(p->buf);
    free(p->off);
    memset(p, 0, sizeof *p);
}

rm_status rm_seq2seq_batch(const rm_pairs *p, uint64_t seed, uint64_t k, int B, int T, int32_t *source,
                           int32_t *mask, int32_t *tokens, int32_t *targets) {
    if (B < 1 || T < 2 || (p && (p->n == 0 || !p->buf || !p->off)) || !source || !mask || !tokens || !targets) return RM_ERR_ARG;
    for (int r = 0; r < B; r++) {
        const size_t at = (size_t)r * (size_t)T;
        if (p) { /* a pair chosen uniformly, keyed by (seed, k, r) */
            size_t i = (size_t)((double)rm_philox_uniform(seed, (uint32_t)k, (uint32_t)r, 0) * (double)p->n);
            const size_t *o = p->off + 4 * (i < p->n ? i : p->n - 1);
            /* the struct is public: a pair filled by hand may point past buf */
            if (o[0] > p->len || o[1] > p->len - o[0] || o[2] > p->len || o[3] > p->len - o[2]) return RM_ERR_ARG;
            rm_seq2seq_row(p->buf + o[0], o[1], p->buf + o[2], o[3], T, source + at, mask + at, tokens + at,
                           targets + at);
        } else {
            unsigned char s[1024], t[1024];
            size_t n;
            rm_seq2seq_reverse_pair(seed, k, r, T < 1024 ? T : 1024, s, t, &n);
            rm_seq2seq_row(s, n, t, n, T, source + at, mask + at, tokens + at, targets + at);
        }
    }
    return RM_OK;
}

rm_status rm_seq2seq_fill(rm_session *s, const rm_model_io *io, const rm_pairs *p, uint64_t seed, uint64_t k) {
    if (!s) return RM_ERR_ARG;
    if (rm_session_runnable(s, "rm_seq2seq_fill") != RM_OK) return RM_ERR_STATE;
    if (!io) return rm_session_fail(s, RM_ERR_ARG, "rm_seq2seq_fill: io is NULL");
    int64_t sh[RM_MAX_DIMS];
    if (rm_shape(s->g, io->source, sh) != 2 || sh[1] < 2 || sh[0] > INT32_MAX || sh[1] > INT32_MAX)
        return rm_session_fail(s, RM_ERR_ARG, "rm_seq2seq_fill: io needs source, source_mask, tokens and targets "
                               "of a compiled encdec session; source must be (B, T) with T >= 2");
    /* all four (B,T) int32 inputs */
    const int64_t n = sh[0] * sh[1];
    int32_t *src = rm_session_input(s, io->source, RM_DTYPE_I32, n, "rm_seq2seq_fill", "source");
    int32_t *mask = src ? rm_session_input(s, io->source_mask, RM_DTYPE_I32, n, "rm_seq2seq_fill", "source_mask") : NULL;
    int32_t *tok = mask ? rm_session_input(s, io->tokens, RM_DTYPE_I32, n, "rm_seq2seq_fill", "tokens") : NULL;
    int32_t *tgt = tok ? rm_session_input(s, io->targets, RM_DTYPE_I32, n, "rm_seq2seq_fill", "targets") : NULL;
    if (!tgt) return RM_ERR_ARG;
    if (rm_seq2seq_batch(p, seed, k, (int)sh[0], (int)sh[1], src, mask, tok, tgt) != RM_OK)
        return rm_session_fail(s, RM_ERR_ARG, "rm_seq2seq_fill: the pairs hold no pair within their %zu bytes (n %zu): "
                               "fill them with rm_pairs_load", p ? p->len : 0, p ? p->n : 0);
    return RM_OK;
}
