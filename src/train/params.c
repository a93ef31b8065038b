/* params.c: parameter files and checkpoint files (the whole training state)
 * on top of the safetensors reader and writer.
 *
 * Every parameter is an F32 tensor named as in the graph (state such as
 * BatchNorm's running statistics included). A checkpoint file adds the
 * AdamW moments of each trainable parameter as "optimizer.m.<name>" and
 * "optimizer.v.<name>", and the update count as the metadata
 * "optimizer_updates". Both kinds carry the checksum of checksum.c. */
#include "exec/exec.h"
#include "train/safetensors.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENT_NAME_LEN (RM_NAME_LEN + 16)

static rm_status param_fail(rm_session *s, rm_status st, char *err, size_t errlen,
                            const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (err && errlen) snprintf(err, errlen, "%s", buf);
    if (s) rm_session_fail(s, st, "%s", buf);
    return st;
}

static void moment_name(char *out, int which, const char *param) {
    snprintf(out, MOMENT_NAME_LEN, "optimizer.%c.%s", which ? 'v' : 'm', param);
}

/* A tensor of paged training state (issue 20): its bytes are read from the
 * scratch file a unit at a time, staged in the arena (exec/page.c). */
typedef struct paged_src { rm_session *s; int pi, what; } paged_src;

static const void *paged_view(void *user, uint64_t off, uint64_t *len) {
    const paged_src *p = user;
    return rm_session_state_view(p->s, p->pi, p->what, off, len);
}

/* t (whose data is w) reads from the scratch file when that state is paged. */
static void maybe_paged(rm_session *s, int pi, int what, rm_st_tensor *t, paged_src *src) {
    if (!rm_session_state_paged(s, pi, what)) return;
    *src = (paged_src){s, pi, what};
    t->data = NULL;
    t->view = paged_view;
    t->user = src;
}

static rm_status save(rm_session *s, rm_optim *o, const char *path, int n_meta,
                      const char *const *keys, const char *const *values, char *err,
                      size_t errlen) {
    if (!s || !s->g || !path || n_meta < 0 || (n_meta > 0 && (!keys || !values)) ||
        (o && rm_optim_session(o) != s))
        return param_fail(s, RM_ERR_ARG, err, errlen, "cannot save: bad arguments");
    const rm_graph *g = s->g;
    if (g->n_params > 0 && !s->params)
        return param_fail(s, RM_ERR_STATE, err, errlen, "cannot save: session has no parameters");
    float *m = NULL, *v = NULL;
    uint64_t updates = 0;
    if (o) rm_optim_state(o, &m, &v, &updates);
    int cap = g->n_params * (m ? 3 : 1);
    rm_st_tensor *t = calloc((size_t)cap + 1, sizeof *t);
    paged_src *src = calloc((size_t)cap + 1, sizeof *src);
    char *names = m ? malloc((size_t)g->n_params * 2 * MOMENT_NAME_LEN) : NULL;
    const char **k = malloc(((size_t)n_meta + 1) * sizeof *k);
    const char **val = malloc(((size_t)n_meta + 1) * sizeof *val);
    if (!t || !src || (m && !names) || !k || !val) {
        free(t);
        free(src);
        free(names);
        free(k);
        free(val);
        return param_fail(s, RM_ERR_NOMEM, err, errlen, "cannot write '%s': out of memory", path);
    }
    int n = 0;
    for (int i = 0; i < g->n_params; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        t[n] = (rm_st_tensor){p->name, "F32", p->ndim, p->shape, s->params + p->param_off,
                              (uint64_t)p->numel * sizeof(float), NULL, NULL};
        maybe_paged(s, i, 0, &t[n], &src[n]);
        n++;
    }
    for (int w = 0; m && w < 2; w++)
        for (int i = 0; i < g->n_params; i++) {
            const rm_value *p = &g->vals[g->params[i]];
            if (!p->trainable) continue;
            char *nm = names + ((size_t)w * g->n_params + i) * MOMENT_NAME_LEN;
            moment_name(nm, w, p->name);
            t[n] = (rm_st_tensor){nm, "F32", p->ndim, p->shape, (w ? v : m) + p->param_off,
                                  (uint64_t)p->numel * sizeof(float), NULL, NULL};
            maybe_paged(s, i, w + 1, &t[n], &src[n]);
            n++;
        }
    for (int i = 0; i < n_meta; i++) {
        k[i] = keys[i];
        val[i] = values[i];
    }
    char ubuf[32];
    int nm = n_meta;
    if (o) {
        snprintf(ubuf, sizeof ubuf, "%llu", (unsigned long long)updates);
        k[nm] = "optimizer_updates";
        val[nm++] = ubuf;
    }
    char e[512];
    rm_status st = rm_st_write_ex(path, n, t, nm, k, val, 1, e, sizeof e);
    free(t);
    free(src);
    free(names);
    free(k);
    free(val);
    if (st != RM_OK) return param_fail(s, st, err, errlen, "%s", e);
    return RM_OK;
}

rm_status rm_save_params(rm_session *s, const char *path, int n_meta, const char *const *keys,
                         const char *const *values, char *err, size_t errlen) {
    return save(s, NULL, path, n_meta, keys, values, err, errlen);
}

rm_status rm_save_state(rm_session *s, rm_optim *o, const char *path, int n_meta,
                        const char *const *keys, const char *const *values, char *err,
                        size_t errlen) {
    return save(s, o, path, n_meta, keys, values, err, errlen);
}

/* *out = the tensor `name` of f, checked against parameter v: F32, same shape. */
static rm_status find_like(rm_session *s, const rm_st_file *f, const char *fname,
                           const char *name, const rm_value *v, const rm_st_tensor **out,
                           char *err, size_t errlen) {
    const rm_st_tensor *t = rm_st_find(f, name);
    char want[256], have[256];
    if (!t)
        return param_fail(s, RM_ERR_FORMAT, err, errlen, "'%s': missing tensor '%s'", fname,
                          name);
    if (strcmp(t->dtype, "F32") != 0)
        return param_fail(s, RM_ERR_FORMAT, err, errlen,
                          "'%s': tensor '%s' has dtype %s but the model expects F32", fname,
                          name, t->dtype);
    int same = t->ndim == v->ndim;
    for (int d = 0; same && d < v->ndim; d++) same = t->shape[d] == v->shape[d];
    if (!same) {
        rm_format_shape(t->ndim, t->shape, have, sizeof have);
        rm_format_shape(v->ndim, v->shape, want, sizeof want);
        return param_fail(s, RM_ERR_FORMAT, err, errlen,
                          "'%s': tensor '%s' has shape %s but the model expects %s", fname,
                          name, have, want);
    }
    if (t->bytes != (uint64_t)v->numel * sizeof(float) ||
        v->param_off + (size_t)v->numel > s->g->param_floats)
        return param_fail(s, RM_ERR_STATE, err, errlen,
                          "'%s': tensor '%s': internal size mismatch", fname, name);
    *out = t;
    return RM_OK;
}

/* Where a tensor's pieces go: parameter or moment w of parameter i, in
 * memory at `mem`, or in the scratch file when paged. */
typedef struct load_dst {
    rm_session *s;
    int i, w, paged;
    unsigned char *mem;
    uint64_t at;
} load_dst;

static int load_piece(void *ctx, const void *p, uint64_t n) {
    load_dst *d = ctx;
    if (d->paged && rm_session_state_write(d->s, d->i, d->w, d->at, p, (size_t)n) != RM_OK) return EIO;
    if (!d->paged) memcpy(d->mem + d->at, p, (size_t)n);
    d->at += n;
    return 0;
}

rm_status rm_load_from(rm_session *s, rm_optim *o, const rm_st_file *f, const char *fname,
                       int flags, char *err, size_t errlen) {
    const int need_state = flags & RM_LOAD_STATE;
    if (!s || !s->g || !f || !fname || (o && rm_optim_session(o) != s))
        return param_fail(s, RM_ERR_ARG, err, errlen, "cannot load: bad arguments");
    const rm_graph *g = s->g;
    if (g->n_params > 0 && !s->params)
        return param_fail(s, RM_ERR_STATE, err, errlen, "cannot load: session has no parameters");
    char e[512];
    int present = rm_st_meta(f, RM_ST_CHECKSUM_KEY) != NULL;
    rm_status st = RM_OK;
    if (!(flags & RM_LOAD_VERIFIED)) st = rm_st_verify(f, fname, &present, NULL, e, sizeof e);
    if (st != RM_OK) return param_fail(s, st, err, errlen, "%s", e);
    if (need_state && !present)
        return param_fail(s, RM_ERR_FORMAT, err, errlen, "'%s': no checksum (metadata '%s'): "
                          "not a checkpoint file written by remat", fname, RM_ST_CHECKSUM_KEY);
    float *m = NULL, *v = NULL;
    uint64_t updates = 0;
    if (o) rm_optim_state(o, &m, &v, NULL);
    if (o && need_state) {
        const char *u = rm_st_meta(f, "optimizer_updates");
        char *end = NULL;
        errno = 0;
        unsigned long long x = u ? strtoull(u, &end, 10) : 0;
        if (!u || !*u || *end || errno || u[0] == '-' || u[0] == '+' || u[0] == ' ')
            return param_fail(s, RM_ERR_FORMAT, err, errlen, "'%s': metadata "
                              "'optimizer_updates' is %s", fname,
                              u ? "not a whole number" : "missing");
        updates = x;
    }
    /* Check everything first, then copy: a failed load changes nothing. */
    const rm_st_tensor **src = calloc((size_t)g->n_params * 3 + 1, sizeof *src);
    if (!src) return param_fail(s, RM_ERR_NOMEM, err, errlen, "cannot load '%s': out of memory", fname);
    char nm[MOMENT_NAME_LEN];
    for (int i = 0; i < g->n_params && st == RM_OK; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        st = find_like(s, f, fname, p->name, p, &src[i], err, errlen);
        for (int w = 0; m && need_state && p->trainable && w < 2 && st == RM_OK; w++) {
            moment_name(nm, w, p->name);
            st = find_like(s, f, fname, nm, p, &src[(size_t)(w + 1) * g->n_params + i], err,
                           errlen);
        }
    }
    for (int i = 0; i < g->n_params && st == RM_OK; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        float *dst[3] = {s->params, m, v};
        for (int w = 0; w < 3 && st == RM_OK; w++) {
            const rm_st_tensor *t = src[(size_t)w * g->n_params + i];
            if (!t || !dst[w] || !t->bytes) continue;
            /* piece by piece: a large file is read as it is copied (lazy), and
             * paged state goes to the scratch file (issue 20) */
            load_dst d = {s, i, w, rm_session_state_paged(s, i, w), (unsigned char *)(dst[w] + p->param_off), 0};
            if (rm_st_each_piece(t, load_piece, &d) != 0)
                st = param_fail(s, RM_ERR_IO, err, errlen, "cannot load '%s': %s", fname,
                                d.paged ? s->errmsg : "reading it failed");
        }
    }
    if (st == RM_OK && o && need_state) rm_optim_set_updates(o, updates);
    free(src);
    return st;
}

static rm_status load_path(rm_session *s, rm_optim *o, const char *path, int flags,
                           char *err, size_t errlen) {
    if (!s || !s->g || !path)
        return param_fail(s, RM_ERR_ARG, err, errlen, "cannot load: bad arguments");
    char e[512];
    rm_st_file *f = NULL;
    rm_status st = rm_st_open(path, &f, e, sizeof e);
    if (st != RM_OK) return param_fail(s, st, err, errlen, "%s", e);
    st = rm_load_from(s, o, f, path, flags, err, errlen);
    rm_st_close(f);
    return st;
}

rm_status rm_load_params(rm_session *s, const char *path, char *err, size_t errlen) {
    return load_path(s, NULL, path, 0, err, errlen);
}

rm_status rm_load_state(rm_session *s, rm_optim *o, const char *path, char *err, size_t errlen) {
    return load_path(s, o, path, RM_LOAD_STATE, err, errlen);
}
