/* params.c: rm_save_params and rm_load_params, the public way to store a
 * session's parameters, on top of the safetensors reader and writer. Every
 * parameter is an F32 tensor named as in the graph. */
#include "internal.h"
#include "train/safetensors.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

rm_status rm_save_params(rm_session *s, const char *path, int n_meta, const char *const *keys,
                         const char *const *values, char *err, size_t errlen) {
    if (!s || !s->g || !path)
        return param_fail(s, RM_ERR_ARG, err, errlen, "rm_save_params: bad arguments");
    const rm_graph *g = s->g;
    if (g->n_params > 0 && !s->params)
        return param_fail(s, RM_ERR_STATE, err, errlen,
                          "rm_save_params: session has no parameters");
    rm_st_tensor *t = calloc((size_t)g->n_params + 1, sizeof *t);
    if (!t)
        return param_fail(s, RM_ERR_NOMEM, err, errlen, "cannot write '%s': out of memory", path);
    for (int i = 0; i < g->n_params; i++) {
        const rm_value *v = &g->vals[g->params[i]];
        t[i].name = v->name;
        t[i].dtype = "F32";
        t[i].ndim = v->ndim;
        t[i].shape = v->shape;
        t[i].data = s->params + v->param_off;
        t[i].bytes = (uint64_t)v->numel * sizeof(float);
    }
    char e[512];
    rm_status st = rm_st_write(path, g->n_params, t, n_meta, keys, values, e, sizeof e);
    free(t);
    if (st != RM_OK) return param_fail(s, st, err, errlen, "%s", e);
    return RM_OK;
}

rm_status rm_load_params(rm_session *s, const char *path, char *err, size_t errlen) {
    if (!s || !s->g || !path)
        return param_fail(s, RM_ERR_ARG, err, errlen, "rm_load_params: bad arguments");
    const rm_graph *g = s->g;
    if (g->n_params > 0 && !s->params)
        return param_fail(s, RM_ERR_STATE, err, errlen,
                          "rm_load_params: session has no parameters");
    char e[512];
    rm_st_file *f = NULL;
    rm_status st = rm_st_open(path, &f, e, sizeof e);
    if (st != RM_OK) return param_fail(s, st, err, errlen, "%s", e);
    /* Everything goes to a copy first: a failed load leaves params as they were. */
    size_t nf = g->param_floats;
    float *tmp = malloc((nf ? nf : 1) * sizeof *tmp);
    if (!tmp) {
        rm_st_close(f);
        return param_fail(s, RM_ERR_NOMEM, err, errlen, "cannot load '%s': out of memory", path);
    }
    if (nf) memcpy(tmp, s->params, nf * sizeof *tmp);
    for (int i = 0; i < g->n_params && st == RM_OK; i++) {
        const rm_value *v = &g->vals[g->params[i]];
        const rm_st_tensor *t = rm_st_find(f, v->name);
        char want[256], have[256];
        if (!t) {
            st = param_fail(s, RM_ERR_FORMAT, err, errlen, "'%s': missing tensor '%s'", path,
                            v->name);
            break;
        }
        if (strcmp(t->dtype, "F32") != 0) {
            st = param_fail(s, RM_ERR_FORMAT, err, errlen,
                            "'%s': tensor '%s' has dtype %s but the model expects F32", path,
                            v->name, t->dtype);
            break;
        }
        int same = t->ndim == v->ndim;
        for (int d = 0; same && d < v->ndim; d++) same = t->shape[d] == v->shape[d];
        if (!same) {
            rm_st_format_shape(t->ndim, t->shape, have, sizeof have);
            rm_st_format_shape(v->ndim, v->shape, want, sizeof want);
            st = param_fail(s, RM_ERR_FORMAT, err, errlen,
                            "'%s': tensor '%s' has shape %s but the model expects %s", path,
                            v->name, have, want);
            break;
        }
        if (t->bytes != (uint64_t)v->numel * sizeof(float) ||
            v->param_off + (size_t)v->numel > nf) {
            st = param_fail(s, RM_ERR_STATE, err, errlen, "'%s': tensor '%s': internal size "
                            "mismatch", path, v->name);
            break;
        }
        if (t->bytes) memcpy(tmp + v->param_off, t->data, (size_t)t->bytes);
    }
    if (st == RM_OK && nf) memcpy(s->params, tmp, nf * sizeof *tmp);
    free(tmp);
    rm_st_close(f);
    return st;
}
