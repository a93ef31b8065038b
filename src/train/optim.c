/* optim.c: AdamW and SGD over the session's flat parameter buffer, with
 * gradient clipping by global norm. All state is allocated once here.
 * Sharded (ZeRO stage 1, dist/dist.c): this rank updates the floats
 * [lo, hi) of the flat buffer and holds the moments of those only. */
#include "dist/dist.h"
#include "exec/trace.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rm_optim {
    rm_session *s;
    rm_optim_config c;
    float *m, *v;     /* AdamW moments of floats [lo, hi), laid out as the params */
    size_t lo, hi;    /* [0, param_floats) unless sharded */
    int sharded;
    float *full_m, *full_v; /* rm_optim_unshard: every rank's moments, until rm_optim_reshard */
    double *partial;  /* per-chunk squared norms: a fixed-order reduction */
    size_t n_chunks;
    uint64_t t;       /* updates applied so far */
};

enum { NORM_CHUNK = 4096 };

void rm_optim_config_default(rm_optim_config *c) {
    if (!c) return;
    c->kind = RM_OPTIM_ADAMW;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
}

rm_status rm_optim_new(rm_session *s, const rm_optim_config *c, rm_optim **out) {
    if (!out) return s ? rm_session_fail(s, RM_ERR_ARG, "rm_optim_new: out must not be NULL") : RM_ERR_ARG;
    *out = NULL;
    if (!s) return RM_ERR_ARG;
    if (!c) c = &s->opt.optim;
    rm_optim *o = calloc(1, sizeof *o);
    if (!o) return rm_session_fail(s, RM_ERR_NOMEM, "out of memory creating the optimizer");
    o->s = s;
    o->c = *c;
    o->sharded = s->dist && s->dist->shard && s->dist->size > 1;
    o->lo = o->sharded ? s->dist->lo : 0;
    o->hi = o->sharded ? s->dist->hi : s->g->param_floats;
    size_t n = o->hi - o->lo;
    o->n_chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    o->partial = calloc(o->n_chunks ? o->n_chunks : 1, sizeof *o->partial);
    if (c->kind == RM_OPTIM_ADAMW) {
        /* touched now, not lazily inside the first timed step */
        o->m = malloc((n ? n : 1) * sizeof *o->m);
        o->v = malloc((n ? n : 1) * sizeof *o->v);
        if (o->m) memset(o->m, 0, (n ? n : 1) * sizeof *o->m);
        if (o->v) memset(o->v, 0, (n ? n : 1) * sizeof *o->v);
    }
    if (!o->partial || (c->kind == RM_OPTIM_ADAMW && (!o->m || !o->v))) {
        rm_optim_free(o);
        return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for optimizer state");
    }
    *out = o;
    return RM_OK;
}

void rm_optim_free(rm_optim *o) {
    if (!o) return;
    free(o->m);
    free(o->v);
    free(o->partial);
    free(o->full_m);
    free(o->full_v);
    free(o);
}

/* The global L2 norm of all gradients. Padding between parameters is zero,
 * so the flat buffer can be summed whole; chunk sums are added in order, so
 * the result does not depend on the thread count. */
static double grad_norm(rm_optim *o) {
    const float *g = o->s->grads + o->lo;
    size_t n = o->hi - o->lo;
    #pragma omp parallel for schedule(static)
    for (size_t k = 0; k < o->n_chunks; k++) {
        size_t end = (k + 1) * NORM_CHUNK < n ? (k + 1) * NORM_CHUNK : n;
        double acc = 0.0;
        for (size_t i = k * NORM_CHUNK; i < end; i++) acc += (double)g[i] * g[i];
        o->partial[k] = acc;
    }
    double total = 0.0;
    for (size_t k = 0; k < o->n_chunks; k++) total += o->partial[k];
    if (o->sharded) rm_dist_sum(o->s, &total, 1); /* the shards' squares, over the ranks */
    return sqrt(total);
}

rm_status rm_optim_step(rm_optim *o, float lr, float *norm_out) {
    if (!o) return RM_ERR_ARG;
    rm_session *s = o->s;
    const rm_graph *g = s->g;
    double t_start = s->trace ? rm_trace_now_ms() : 0; /* a traced step: its update is timed too */
    double norm = grad_norm(o);
    if (norm_out) *norm_out = (float)norm;
    if (!isfinite(norm))
        return rm_session_fail(s, RM_ERR_ARG, "gradient norm is %g at update %llu: training diverged (try a lower learning rate)",
                               norm, (unsigned long long)o->t + 1);
    if (o->t == UINT64_MAX) /* t + 1 would wrap to 0: bias correction 1 - beta^0 = 0 divides by zero */
        return rm_session_fail(s, RM_ERR_STATE, "the optimizer's update count %llu cannot grow: it would wrap to 0",
                               (unsigned long long)o->t);
    float clip = 1.0f;
    if (o->c.grad_clip > 0.0f && norm > o->c.grad_clip) clip = (float)(o->c.grad_clip / (norm + 1e-6));
    o->t++;
    const float b1 = o->c.beta1, b2 = o->c.beta2, eps = o->c.eps;
    const float bc1 = 1.0f - powf(b1, (float)o->t), bc2 = 1.0f - powf(b2, (float)o->t);
    for (int pi = 0; pi < g->n_params; pi++) {
        const rm_value *v = &g->vals[g->params[pi]];
        if (!v->trainable) continue; /* state such as running statistics */
        /* this rank's part of the parameter: floats [a, b) of the flat buffer */
        size_t a = v->param_off > o->lo ? v->param_off : o->lo;
        size_t b = v->param_off + (size_t)v->numel < o->hi ? v->param_off + (size_t)v->numel : o->hi;
        if (a >= b) continue;
        float *w = s->params + a, *gr = s->grads + a;
        int64_t n = (int64_t)(b - a);
        if (o->c.kind == RM_OPTIM_SGD) {
            #pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < n; i++) w[i] -= lr * clip * gr[i];
            continue;
        }
        float *m = o->m + (a - o->lo), *vv = o->v + (a - o->lo);
        /* decoupled weight decay (Loshchilov & Hutter): shrink, then Adam step */
        const float decay = v->decay ? 1.0f - lr * o->c.weight_decay : 1.0f;
        #pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            float gi = gr[i] * clip;
            m[i] = b1 * m[i] + (1.0f - b1) * gi;
            vv[i] = b2 * vv[i] + (1.0f - b2) * gi * gi;
            float mhat = m[i] / bc1, vhat = vv[i] / bc2;
            w[i] = w[i] * decay - lr * mhat / (sqrtf(vhat) + eps);
        }
    }
    if (o->sharded) rm_dist_allgather_params(s); /* every rank's updated shard to all */
    if (s->trace) rm_trace_optimizer(s, t_start, rm_trace_now_ms());
    return RM_OK;
}

/* For checkpoint files: the moments are the optimizer's own buffers, laid
 * out as the parameter buffer, so a loader restores them in place. */
rm_status rm_optim_state(rm_optim *o, float **m, float **v, uint64_t *t) {
    if (!o) return RM_ERR_ARG;
    if (o->sharded && !o->full_m && (m || v))
        return rm_session_fail(o->s, RM_ERR_STATE, "rm_optim_state: the optimizer is sharded: rm_optim_unshard first");
    if (m) *m = o->sharded ? o->full_m : o->m;
    if (v) *v = o->sharded ? o->full_v : o->v;
    if (t) *t = o->t;
    return RM_OK;
}

rm_status rm_optim_set_updates(rm_optim *o, uint64_t t) {
    if (!o) return RM_ERR_ARG;
    o->t = t;
    return RM_OK;
}

rm_status rm_optim_unshard(rm_optim *o) {
    if (!o) return RM_ERR_ARG;
    if (!o->sharded || o->c.kind != RM_OPTIM_ADAMW || o->full_m) return RM_OK;
    size_t n = o->s->g->param_floats;
    o->full_m = malloc((n ? n : 1) * sizeof(float));
    o->full_v = malloc((n ? n : 1) * sizeof(float));
    int ok = o->full_m && o->full_v, all = ok;
    double okd = ok; /* every rank must take part, or none */
    rm_dist_sum(o->s, &okd, 1);
    all = okd == (double)o->s->dist->size;
    if (!all) {
        free(o->full_m), free(o->full_v);
        o->full_m = o->full_v = NULL;
        return rm_session_fail(o->s, RM_ERR_NOMEM, "out of memory gathering the optimizer's moments (%.1f MiB)%s",
                               2.0 * (double)(n * sizeof(float)) / (1 << 20), ok ? " on another rank" : "");
    }
    rm_dist_allgather(o->s, o->m, o->full_m);
    rm_dist_allgather(o->s, o->v, o->full_v);
    return RM_OK;
}

rm_status rm_optim_reshard(rm_optim *o) {
    if (!o) return RM_ERR_ARG;
    if (!o->full_m) return RM_OK;
    memcpy(o->m, o->full_m + o->lo, (o->hi - o->lo) * sizeof(float));
    memcpy(o->v, o->full_v + o->lo, (o->hi - o->lo) * sizeof(float));
    free(o->full_m), free(o->full_v);
    o->full_m = o->full_v = NULL;
    return RM_OK;
}

size_t rm_optim_bytes(const rm_optim *o) {
    return o && o->c.kind == RM_OPTIM_ADAMW ? 2 * (o->hi - o->lo) * sizeof(float) : 0;
}

rm_session *rm_optim_session(const rm_optim *o) { return o ? o->s : NULL; }
