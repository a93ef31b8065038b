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

/* o, when given, must be the optimizer rm_optim_new made for s. */
static rm_status optim_of(rm_session *s, rm_optim *o, const char *verb, const char *path, char *err, size_t errlen) {
    if (!o || rm_optim_session(o) == s) return RM_OK;
    return param_fail(s, RM_ERR_ARG, err, errlen, "cannot %s '%s': the optimizer given is %s; pass the one "
                      "rm_optim_new made for this session", verb, path,
                      rm_optim_session(o) ? "another session's" : "of a freed session");
}

static void moment_name(char *out, int which, const char *param) {
    snprintf(out, MOMENT_NAME_LEN, "optimizer.%c.%s", which ? 'v' : 'm', param);
}

/* A tensor of paged training state (issue 20): its bytes are read from the
 * scratch file a unit at a time, staged in the arena (exec/pagestate.c). */
static const void *paged_view(void *user, uint64_t off, uint64_t *len) {
    const rm_paged_src *p = user;
    return rm_session_state_view(p->s, p->pi, p->what, off, len);
}

void rm_st_tensor_paged(rm_session *s, int pi, int what, rm_st_tensor *t, rm_paged_src *src) {
    if (!rm_session_state_paged(s, pi, what)) return;
    *src = (rm_paged_src){s, pi, what};
    t->data = NULL;
    t->view = paged_view;
    t->user = src;
}

static rm_status save(rm_session *s, rm_optim *o, const char *path, int n_meta,
                      const char *const *keys, const char *const *values, char *err,
                      size_t errlen) {
    if (!s || !s->g || !path || n_meta < 0 || (n_meta > 0 && (!keys || !values)))
        return param_fail(s, RM_ERR_ARG, err, errlen, "cannot save: bad arguments (s and path must not be NULL, "
                          "n_meta %d must be >= 0, and keys and values given when it is not 0)", n_meta);
    if (optim_of(s, o, "save", path, err, errlen) != RM_OK) return RM_ERR_ARG;
    const rm_graph *g = s->g;
    if (rm_session_runnable(s, "cannot save") != RM_OK) return param_fail(s, RM_ERR_STATE, err, errlen, "%s", s->errmsg);
    float *m = NULL, *v = NULL;
    uint64_t updates = 0;
    if (o) rm_optim_state(o, &m, &v, &updates);
    int cap = g->n_params * (m ? 3 : 1);
    rm_st_tensor *t = calloc((size_t)cap + 1, sizeof *t);
    rm_paged_src *src = calloc((size_t)cap + 1, sizeof *src);
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
        /* a parameter kept in 2 bytes (rm_param_store) is saved so: BF16 or F16 */
        t[n] = (rm_st_tensor){p->name, rm_st_dtype_name(p->store), p->ndim, p->shape, s->params + p->param_off,
                              (uint64_t)p->numel * rm_dtype_size(p->store), NULL, NULL};
        rm_st_tensor_paged(s, i, 0, &t[n], &src[n]); /* in the scratch file (issue 20): F32 only */
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
            rm_st_tensor_paged(s, i, w + 1, &t[n], &src[n]);
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

/* *out = the tensor `name` of f, checked against parameter v: F32 (a
 * parameter, as opposed to a moment, may also be BF16 or F16: it is
 * converted to the parameter's storage), same shape; it goes into a buffer
 * of `floats` floats at v's offset (half as many floats for a parameter
 * kept in 2 bytes). */
static rm_status find_like(rm_session *s, const rm_st_file *f, const char *fname,
                           const char *name, const rm_value *v, size_t floats, const rm_st_tensor **out,
                           char *err, size_t errlen) {
    const rm_st_tensor *t = rm_st_find(f, name);
    char want[256], have[256];
    const int moment = strcmp(name, v->name) != 0;
    if (!t)
        return param_fail(s, RM_ERR_FORMAT, err, errlen, "'%s': missing tensor '%s'", fname,
                          name);
    if (strcmp(t->dtype, "F32") != 0 && (moment || (strcmp(t->dtype, "BF16") != 0 && strcmp(t->dtype, "F16") != 0)))
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
    const size_t kept = moment || v->store == RM_DTYPE_F32 ? (size_t)v->numel : ((size_t)v->numel + 1) / 2;
    if (t->bytes != (uint64_t)v->numel * rm_st_dtype_size(t->dtype) || v->param_off + kept > floats)
        return param_fail(s, RM_ERR_STATE, err, errlen,
                          "'%s': tensor '%s': internal size mismatch", fname, name);
    *out = t;
    return RM_OK;
}

/* The first LoRA adapter tensor of f (PEFT's names: "...lora_A.weight",
 * "...lora_B.weight") that is no parameter of g, or NULL: loading the base
 * weights alone would silently drop what the adapters learnt. */
static const char *foreign_adapter(const rm_graph *g, const rm_st_file *f) {
    for (int t = 0; t < rm_st_count(f); t++) {
        const char *name = rm_st_at(f, t)->name;
        size_t n = strlen(name);
        if (strncmp(name, "optimizer.", 10) == 0 || n < 14 ||
            (strcmp(name + n - 14, ".lora_A.weight") != 0 && strcmp(name + n - 14, ".lora_B.weight") != 0))
            continue;
        int known = 0;
        for (int i = 0; i < g->n_params && !known; i++) known = strcmp(g->vals[g->params[i]].name, name) == 0;
        if (!known) return name;
    }
    return NULL;
}

rm_status rm_st_load_paged(rm_session *s, const rm_st_file *f, const rm_st_tensor *t, int pi, int what,
                           int64_t *bad) {
    enum { BLOCK = 1 << 18 }; /* elements a piece */
    const uint64_t esize = rm_st_dtype_size(t->dtype), n = t->bytes / esize;
    float *buf = malloc(BLOCK * sizeof *buf);
    unsigned char *raw = t->data ? NULL : malloc(BLOCK * esize); /* a file read from disk */
    rm_status st = buf && (t->data || raw) ? RM_OK : RM_ERR_NOMEM;
    *bad = -1;
    for (uint64_t e0 = 0; e0 < n && st == RM_OK; e0 += BLOCK) {
        const uint64_t k = n - e0 < BLOCK ? n - e0 : BLOCK;
        rm_st_tensor part = *t;
        part.data = t->data ? (const unsigned char *)t->data + e0 * esize : raw, part.bytes = k * esize;
        if (!t->data) st = rm_st_read(f, t, e0 * esize, raw, (size_t)(k * esize));
        int64_t b = -1;
        if (st == RM_OK) st = rm_st_convert(f, &part, buf, k, RM_DTYPE_F32, &b); /* F32 copied, 2 bytes widened */
        if (b >= 0 && *bad < 0) *bad = (int64_t)e0 + b;
        if (st == RM_OK) st = rm_session_state_write(s, pi, what, e0 * sizeof *buf, buf, (size_t)k * sizeof *buf);
    }
    free(buf);
    free(raw);
    return st;
}

rm_status rm_load_from(rm_session *s, rm_optim *o, const rm_st_file *f, const char *fname,
                       int flags, char *err, size_t errlen) {
    const int need_state = flags & RM_LOAD_STATE;
    if (!s || !s->g || !f || !fname)
        return param_fail(s, RM_ERR_ARG, err, errlen, "cannot load: bad arguments");
    if (optim_of(s, o, "load", fname, err, errlen) != RM_OK) return RM_ERR_ARG;
    const rm_graph *g = s->g;
    if (rm_session_runnable(s, "cannot load") != RM_OK) return param_fail(s, RM_ERR_STATE, err, errlen, "%s", s->errmsg);
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
    const char *foreign = foreign_adapter(g, f);
    if (foreign) {
        free(src);
        return param_fail(s, RM_ERR_FORMAT, err, errlen, "'%s' holds the LoRA adapter '%s', which this model "
                          "lacks: build it with the same LoRA rank and targets, or merge the adapters into the "
                          "weights first (remat export --merge-lora, rm_save_merged)", fname, foreign);
    }
    for (int i = 0; i < g->n_params && st == RM_OK; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        /* weights only: adapters a base model's file lacks keep their initial values */
        if (!need_state && p->adapter && !rm_st_find(f, p->name)) continue;
        st = find_like(s, f, fname, p->name, p, g->param_floats, &src[i], err, errlen);
        for (int w = 0; m && need_state && p->trainable && w < 2 && st == RM_OK; w++) {
            moment_name(nm, w, p->name);
            st = find_like(s, f, fname, nm, p, g->train_floats, /* moments: trainable floats only */
                           &src[(size_t)(w + 1) * g->n_params + i], err, errlen);
        }
    }
    for (int i = 0; i < g->n_params && st == RM_OK; i++) { /* the narrowing rule (narrow.c) */
        const rm_value *p = &g->vals[g->params[i]];
        int64_t at = -1;
        float x = 0;
        if (src[i] && (st = rm_st_first_unfit(f, src[i], p->store, &at, &x)) != RM_OK)
            param_fail(s, st, err, errlen, "'%s': cannot read tensor '%s'", fname, p->name);
        if (at >= 0) {
            rm_st_unfit_error(e, sizeof e, fname, p->name, at, x, p->store);
            st = param_fail(s, RM_ERR_FORMAT, err, errlen, "%s", e);
        }
    }
    for (int i = 0; i < g->n_params && st == RM_OK; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        float *dst[3] = {s->params, m, v};
        for (int w = 0; w < 3 && st == RM_OK; w++) {
            const rm_st_tensor *t = src[(size_t)w * g->n_params + i];
            if (!t || !dst[w] || !t->bytes) continue;
            if (rm_session_state_paged(s, i, w)) { /* to the scratch file (issue 20) */
                int64_t bad;
                st = rm_st_load_paged(s, f, t, i, w, &bad);
                if (st != RM_OK) st = param_fail(s, st, err, errlen, "cannot load '%s': %s", fname, s->errmsg);
            } else if (w == 0 && (p->store != RM_DTYPE_F32 || strcmp(t->dtype, "F32") != 0)) { /* 2 bytes on one side */
                int64_t bad;
                st = rm_st_convert(f, t, dst[w] + p->param_off, (uint64_t)p->numel, p->store, &bad);
            } else st = rm_st_read(f, t, 0, dst[w] + p->param_off, (size_t)t->bytes);
        }
        if (st != RM_OK) /* only when the file changes under us: the checks above passed */
            param_fail(s, st, err, errlen, "'%s': cannot read tensor '%s' (did the file shrink since it was "
                       "opened?)", fname, p->name);
    }
    if (st == RM_OK && o && need_state) rm_optim_set_updates(o, updates);
    free(src);
    return st;
}

rm_status rm_params_match(const rm_graph *g, const rm_st_file *f, const char *fname, char *err, size_t errlen) {
    const rm_st_tensor *t;
    rm_status st = RM_OK;
    for (int i = 0; i < g->n_params && st == RM_OK; i++) {
        const rm_value *p = &g->vals[g->params[i]];
        if (p->adapter && !rm_st_find(f, p->name)) continue; /* adapters a base model's file lacks */
        st = find_like(NULL, f, fname, p->name, p, g->param_floats, &t, err, errlen);
    }
    return st;
}

/* Marks each parameter f holds as F32 (or 2 bytes) of its shape as one the
 * load will write: rm_compile leaves it zero instead of drawing it. */
rm_status rm_params_mark_loaded(rm_graph *g, const rm_st_file *f, const char *fname, int *n) {
    const rm_st_tensor *t;
    for (int i = 0; i < g->n_params; i++) {
        rm_value *p = &g->vals[g->params[i]];
        if (rm_st_find(f, p->name) && find_like(NULL, f, fname, p->name, p, g->param_floats, &t, NULL, 0) == RM_OK) {
            p->init = RM_INIT_ZEROS;
            if (n) (*n)++;
        }
    }
    return RM_OK;
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
