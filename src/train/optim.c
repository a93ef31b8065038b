/* optim.c: AdamW and SGD over the session's flat parameter buffer, with
 * gradient clipping by global norm. All state is allocated once here.
 * Gradients and moments cover the trainable parameters only, the first
 * train_floats floats of the parameter buffer (graph/freeze.c): frozen
 * parameters and state have neither.
 * Sharded (ZeRO stage 1, dist/dist.c): this rank updates the floats
 * [lo, hi) of that part and holds the moments of those only.
 * Fused (rm_options.fuse_optimizer): the session calls begin, then update
 * for each parameter as its gradient becomes final in the backward pass,
 * then end; every parameter gets the same arithmetic as rm_optim_step
 * gives it (update_range), so the weights are the same bit for bit. */
#include "dist/dist.h"
#include "exec/trace.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rm_optim {
    rm_session_ref ref; /* ref.s: the session; NULL once rm_session_free freed it */
    rm_optim_config c;
    float *m, *v;     /* AdamW moments of floats [lo, hi), laid out as the params */
    size_t lo, hi;    /* [0, train_floats) unless sharded */
    int sharded;
    float *full_m, *full_v; /* rm_optim_unshard: every rank's moments, until rm_optim_reshard */
    double *partial;  /* per-chunk squared norms: a fixed-order reduction */
    size_t n_chunks;
    uint64_t t;       /* updates applied so far */
    float bc1, bc2;   /* AdamW's bias corrections of update t */
    /* fused: attached to the session, the learning rate of rm_optim_set_lr,
     * and per parameter its gradient's squared norm in the current step */
    int fused, lr_set;
    float lr;
    double *param_sq;
};

enum { NORM_CHUNK = 4096 };

static rm_status fused_begin(rm_optim *o);
static void fused_update(rm_optim *o, int pi, float *grad);
static rm_status fused_end(rm_optim *o);
static void fused_update_chunk(rm_optim *o, int pi, int64_t lo, int64_t hi, float *grad, float *w, float *m, float *v);

/* A fused session's optimizer: one per session, without clipping. */
static rm_status attach(rm_optim *o) {
    rm_session *s = o->ref.s;
    if (s->fused.o)
        return rm_session_fail(s, RM_ERR_STATE, "rm_optim_new: the session already has its fused optimizer (one per "
                               "session: rm_optim_free the first)");
    if (!(o->c.grad_clip == 0.0f))
        return rm_session_fail(s, RM_ERR_ARG, "rm_optim_new: a fused optimizer cannot clip by the global gradient "
                               "norm (grad_clip %g): set grad_clip to 0", (double)o->c.grad_clip);
    o->param_sq = calloc((size_t)(s->g->n_params ? s->g->n_params : 1), sizeof *o->param_sq);
    if (!o->param_sq) return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for optimizer state");
    o->fused = 1;
    s->fused = (struct rm_fused){o, fused_begin, fused_update, fused_end, fused_update_chunk};
    return RM_OK;
}

/* Hyperparameters the update can use without dividing by zero (beta 1:
 * bias correction 1 - beta^t is 0) or producing NaN (eps 0 on a zero
 * gradient); NaN fails every range test. */
static rm_status config_check(rm_session *s, const rm_optim_config *c) {
    const char *bad = NULL;
    double v = 0;
    if (c->kind != RM_OPTIM_ADAMW && c->kind != RM_OPTIM_SGD) bad = "kind (RM_OPTIM_ADAMW or RM_OPTIM_SGD)", v = c->kind;
    else if (!rm_adam_beta_ok(c->beta1)) bad = "beta1 (in [0, 1))", v = c->beta1;
    else if (!rm_adam_beta_ok(c->beta2)) bad = "beta2 (in [0, 1))", v = c->beta2;
    else if (!rm_adam_eps_ok(c->eps)) bad = "eps (in (0, 1])", v = c->eps;
    else if (!(c->weight_decay >= 0.0f && c->weight_decay <= 10.0f)) bad = "weight_decay (in [0, 10])", v = c->weight_decay;
    else if (!(c->grad_clip >= 0.0f && c->grad_clip <= 1e9f)) bad = "grad_clip (in [0, 1e9]; 0 disables)", v = c->grad_clip;
    if (!bad) return RM_OK;
    return rm_session_fail(s, RM_ERR_ARG, "rm_optim_new: %s is %g", bad, v);
}

/* The moments start at zero: touched now, not lazily inside the first
 * timed step. Moments paged to the scratch file (exec/page.c) are zeroed
 * there, and their part of o->m and o->v is never touched (address space
 * only, no memory). */
static rm_status moments_zero(rm_optim *o) {
    rm_session *s = o->ref.s;
    const size_t n = o->hi - o->lo;
    if (!s->page.moments || o->sharded) {
        memset(o->m, 0, (n ? n : 1) * sizeof *o->m);
        memset(o->v, 0, (n ? n : 1) * sizeof *o->v);
        return RM_OK;
    }
    for (int pi = 0; pi < s->g->n_params; pi++) {
        const rm_value *v = &s->g->vals[s->g->params[pi]];
        if (!v->trainable) continue; /* moments: [0, train_floats), trainable parameters only */
        if (!rm_session_state_paged(s, pi, 1)) {
            memset(o->m + v->param_off, 0, (size_t)v->numel * sizeof *o->m);
            memset(o->v + v->param_off, 0, (size_t)v->numel * sizeof *o->v);
            continue;
        }
        rm_status rc = rm_session_state_store(s, pi, 1, NULL);
        if (rc == RM_OK) rc = rm_session_state_store(s, pi, 2, NULL);
        if (rc != RM_OK) return rc;
    }
    return RM_OK;
}

rm_status rm_optim_new(rm_session *s, const rm_optim_config *c, rm_optim **out) {
    if (!out) return s ? rm_session_fail(s, RM_ERR_ARG, "rm_optim_new: out must not be NULL") : RM_ERR_ARG;
    *out = NULL;
    if (!s) return RM_ERR_ARG;
    if (rm_session_runnable(s, "rm_optim_new") != RM_OK) return RM_ERR_STATE;
    if (!c) c = &s->opt.optim;
    if (config_check(s, c) != RM_OK) return RM_ERR_ARG;
    rm_optim *o = calloc(1, sizeof *o);
    if (!o) return rm_session_fail(s, RM_ERR_NOMEM, "out of memory creating the optimizer");
    rm_session_ref_attach(s, &o->ref);
    o->c = *c;
    o->sharded = s->dist && s->dist->shard && s->dist->size > 1;
    o->lo = o->sharded ? s->dist->lo : 0;
    o->hi = o->sharded ? s->dist->hi : s->g->train_floats;
    size_t n = o->hi - o->lo;
    o->n_chunks = (n + NORM_CHUNK - 1) / NORM_CHUNK;
    o->partial = calloc(o->n_chunks ? o->n_chunks : 1, sizeof *o->partial);
    if (c->kind == RM_OPTIM_ADAMW) {
        o->m = malloc((n ? n : 1) * sizeof *o->m);
        o->v = malloc((n ? n : 1) * sizeof *o->v);
    }
    if (!o->partial || (c->kind == RM_OPTIM_ADAMW && (!o->m || !o->v))) {
        rm_optim_free(o);
        return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for optimizer state");
    }
    if (c->kind == RM_OPTIM_ADAMW && moments_zero(o) != RM_OK) {
        rm_optim_free(o);
        return RM_ERR_IO;
    }
    rm_status rc = s->opt.fuse_optimizer ? attach(o) : RM_OK;
    if (rc != RM_OK) {
        rm_optim_free(o);
        return rc;
    }
    *out = o;
    return RM_OK;
}

void rm_optim_free(rm_optim *o) {
    if (!o) return;
    if (o->fused && o->ref.s && o->ref.s->fused.o == o) memset(&o->ref.s->fused, 0, sizeof o->ref.s->fused);
    rm_session_ref_detach(&o->ref);
    free(o->param_sq);
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
    const float *g = o->ref.s->grads + o->lo;
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
    if (o->sharded) rm_dist_sum(o->ref.s, &total, 1); /* the shards' squares, over the ranks */
    return sqrt(total);
}

/* The next update's count and AdamW bias corrections. */
static rm_status next_update(rm_optim *o) {
    if (o->t == UINT64_MAX) /* t + 1 would wrap to 0: bias correction 1 - beta^0 = 0 divides by zero */
        return rm_session_fail(o->ref.s, RM_ERR_STATE, "the optimizer's update count %llu cannot grow: it would wrap to 0",
                               (unsigned long long)o->t);
    o->t++;
    o->bc1 = 1.0f - powf(o->c.beta1, (float)o->t);
    o->bc2 = 1.0f - powf(o->c.beta2, (float)o->t);
    return RM_OK;
}

/* AdamW's constants for one parameter in one update. */
typedef struct adamw_k { float b1, b2, eps, bc1, bc2, lr, decay; } adamw_k;

/* One AdamW element: decoupled weight decay (Loshchilov & Hutter), then
 * the Adam step. The one expression both the fused and unfused paths use. */
static inline void adamw_elem(float *w, float *m, float *v, float gi, adamw_k k) {
    *m = k.b1 * *m + (1.0f - k.b1) * gi;
    *v = k.b2 * *v + (1.0f - k.b2) * gi * gi;
    float mhat = *m / k.bc1, vhat = *v / k.bc2;
    *w = *w * k.decay - k.lr * mhat / (sqrtf(vhat) + k.eps);
}

/* Sum of squares in eight lanes, added in a fixed order (vectorizes, and
 * the thread count changes nothing). */
static double sum_sq(const float *g, size_t n) {
    double lane[8] = {0}, s = 0.0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) lane[j] += (double)g[i + j] * g[i + j];
    for (; i < n; i++) s += (double)g[i] * g[i];
    for (int j = 0; j < 8; j++) s += lane[j];
    return s;
}

/* n elements of parameter storage w (moments m, v) from gradients g (NULL:
 * zero, through the same arithmetic) times clip. */
static void update_elems(const rm_optim *o, float *w, float *m, float *v, const float *g, size_t n, float lr,
                         float clip, float decay) {
    if (o->c.kind == RM_OPTIM_SGD) {
        if (g) for (size_t i = 0; i < n; i++) w[i] -= lr * clip * g[i];
        else for (size_t i = 0; i < n; i++) w[i] -= lr * clip * 0.0f;
        return;
    }
    const adamw_k k = {o->c.beta1, o->c.beta2, o->c.eps, o->bc1, o->bc2, lr, decay};
    if (g) for (size_t i = 0; i < n; i++) adamw_elem(&w[i], &m[i], &v[i], g[i] * clip, k);
    else for (size_t i = 0; i < n; i++) adamw_elem(&w[i], &m[i], &v[i], 0.0f * clip, k);
}

/* Updates n floats of parameter v: storage w, moments m and vv (NULL for
 * SGD), from gradients gr (NULL: zero) times clip, chunk by chunk. With
 * want_sq, returns the squared norm of gr, summed per chunk and then in
 * chunk order. Elementwise, so fused, unfused and paged runs get the same
 * bits. */
static double update_span(rm_optim *o, const rm_value *v, float *w, float *m, float *vv, const float *gr, size_t n,
                          float lr, float clip, int want_sq) {
    const int64_t chunks = (int64_t)((n + NORM_CHUNK - 1) / NORM_CHUNK);
    const float decay = v->decay ? 1.0f - lr * o->c.weight_decay : 1.0f;
    #pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < chunks; k++) {
        const size_t lo = (size_t)k * NORM_CHUNK, len = n - lo < NORM_CHUNK ? n - lo : NORM_CHUNK;
        if (want_sq) o->partial[k] = gr ? sum_sq(gr + lo, len) : 0.0; /* read while the chunk is in cache */
        update_elems(o, w + lo, m ? m + lo : NULL, vv ? vv + lo : NULL, gr ? gr + lo : NULL, len, lr, clip, decay);
    }
    double total = 0.0;
    for (int64_t k = 0; want_sq && k < chunks; k++) total += o->partial[k];
    return total;
}

/* Floats [a, b) of the flat parameters, all of parameter v, from their
 * gradients gr (NULL: zero). */
static double update_range(rm_optim *o, const rm_value *v, size_t a, size_t b, const float *gr, float lr, float clip,
                           int want_sq) {
    float *m = o->m ? o->m + (a - o->lo) : NULL, *vv = o->v ? o->v + (a - o->lo) : NULL;
    return update_span(o, v, o->ref.s->params + a, m, vv, gr, b - a, lr, clip, want_sq);
}

/* RM_OK for an optimizer whose session is alive: RM_ERR_ARG for NULL,
 * RM_ERR_STATE once rm_session_free freed its session (no message: it had
 * its home on the session). */
static rm_status alive(const rm_optim *o) { return !o ? RM_ERR_ARG : !o->ref.s ? RM_ERR_STATE : RM_OK; }

rm_status rm_optim_step(rm_optim *o, float lr, float *norm_out) {
    if (alive(o) != RM_OK) return alive(o);
    rm_session *s = o->ref.s;
    const rm_graph *g = s->g;
    if (o->fused)
        return rm_session_fail(s, RM_ERR_STATE, "rm_optim_step: the optimizer is fused into the session's backward "
                               "pass (rm_options.fuse_optimizer): rm_step applied the update; give the learning rate "
                               "with rm_optim_set_lr before rm_step");
    if (!s->grads_ready)
        return rm_session_fail(s, RM_ERR_STATE, "rm_optim_step: no gradients yet: the last rm_step failed or none ran "
                               "(call rm_step, rm_step_micro or rm_step_accumulate first)");
    if (!isfinite(lr))
        return rm_session_fail(s, RM_ERR_ARG, "rm_optim_step: the learning rate is %g; give a finite one", lr);
    double t_start = s->trace ? rm_now_ms() : 0; /* a traced step: its update is timed too */
    double norm = grad_norm(o);
    if (norm_out) *norm_out = (float)norm;
    if (!isfinite(norm))
        return rm_session_fail(s, RM_ERR_ARG, "gradient norm is %g at update %llu: training diverged (try a lower learning rate)",
                               norm, (unsigned long long)o->t + 1);
    rm_status rc = next_update(o);
    if (rc != RM_OK) return rc;
    float clip = 1.0f;
    if (o->c.grad_clip > 0.0f && norm > o->c.grad_clip) clip = (float)(o->c.grad_clip / (norm + 1e-6));
    for (int pi = 0; pi < g->n_params; pi++) {
        const rm_value *v = &g->vals[g->params[pi]];
        if (!v->trainable) continue; /* state such as running statistics, frozen parameters */
        /* this rank's part of the parameter: floats [a, b) of the flat buffer */
        size_t a = v->param_off > o->lo ? v->param_off : o->lo;
        size_t b = v->param_off + (size_t)v->numel < o->hi ? v->param_off + (size_t)v->numel : o->hi;
        if (a < b) update_range(o, v, a, b, s->grads + a, lr, clip, 0);
    }
    if (o->sharded) rm_dist_allgather_params(s); /* every rank's updated shard to all */
    if (s->trace) rm_trace_optimizer(s, t_start, rm_now_ms());
    return RM_OK;
}

/* Fused: a step begins (the session calls it before the train program). */
static rm_status fused_begin(rm_optim *o) {
    if (!o->lr_set)
        return rm_session_fail(o->ref.s, RM_ERR_STATE, "rm_step: the fused optimizer has no learning rate: "
                               "rm_optim_set_lr first");
    for (int pi = 0; pi < o->ref.s->g->n_params; pi++) o->param_sq[pi] = 0.0;
    return next_update(o);
}

/* Fused: parameter pi is final; grad is its gradient (NULL: zero, on
 * every rank: they run the same program). Several ranks first sum it:
 * each rank's is its rows' share (loss scaled by 1/P), so the sum is the
 * global batch's gradient, as the unfused allreduce gives. */
static void fused_update(rm_optim *o, int pi, float *grad) {
    const rm_value *v = &o->ref.s->g->vals[o->ref.s->g->params[pi]];
    if (!v->trainable) return;
    if (grad) rm_dist_sum_floats(o->ref.s, grad, (size_t)v->numel);
    o->param_sq[pi] = update_range(o, v, v->param_off, v->param_off + (size_t)v->numel, grad, o->lr, 1.0f, 1);
}

/* Fused, with the state paged to the scratch file (exec/page.c): floats
 * [lo, hi) of parameter pi, from its staged moments m and v (those floats
 * only) into its storage w (the whole parameter, staged when it is paged
 * too). The same arithmetic as fused_update, chunk by chunk; the squared
 * norms add up per parameter (for the divergence check only). */
static void fused_update_chunk(rm_optim *o, int pi, int64_t lo, int64_t hi, float *grad, float *w, float *m, float *v) {
    const rm_value *val = &o->ref.s->g->vals[o->ref.s->g->params[pi]];
    if (!val->trainable) return;
    if (grad && lo == 0) rm_dist_sum_floats(o->ref.s, grad, (size_t)val->numel); /* several ranks: once per parameter */
    o->param_sq[pi] += update_span(o, val, w + lo, o->c.kind == RM_OPTIM_ADAMW ? m : NULL,
                                   o->c.kind == RM_OPTIM_ADAMW ? v : NULL, grad ? grad + lo : NULL, (size_t)(hi - lo),
                                   o->lr, 1.0f, 1);
}

/* Fused: the step's gradient norm, in parameter order, must be finite. */
static rm_status fused_end(rm_optim *o) {
    double total = 0.0;
    for (int pi = 0; pi < o->ref.s->g->n_params; pi++) total += o->param_sq[pi];
    if (!isfinite(total))
        return rm_session_fail(o->ref.s, RM_ERR_ARG, "gradient norm is %g at update %llu: training diverged (try a lower "
                               "learning rate); the fused update was applied", sqrt(total), (unsigned long long)o->t);
    return RM_OK;
}

rm_status rm_optim_set_lr(rm_optim *o, float lr) {
    if (alive(o) != RM_OK) return alive(o);
    if (!o->fused)
        return rm_session_fail(o->ref.s, RM_ERR_STATE, "rm_optim_set_lr: the optimizer is not fused (rm_options."
                               "fuse_optimizer): rm_optim_step takes the learning rate");
    if (!isfinite(lr)) return rm_session_fail(o->ref.s, RM_ERR_ARG, "rm_optim_set_lr: the learning rate %g is not finite", (double)lr);
    o->lr = lr, o->lr_set = 1;
    return RM_OK;
}

/* For checkpoint files: the moments are the optimizer's own buffers, laid
 * out as the trainable part of the parameter buffer, so a loader restores
 * them in place. */
rm_status rm_optim_state(rm_optim *o, float **m, float **v, uint64_t *t) {
    if (alive(o) != RM_OK) return alive(o);
    if (o->sharded && !o->full_m && (m || v))
        return rm_session_fail(o->ref.s, RM_ERR_STATE, "rm_optim_state: the optimizer is sharded: rm_optim_unshard first");
    if (m) *m = o->sharded ? o->full_m : o->m;
    if (v) *v = o->sharded ? o->full_v : o->v;
    if (t) *t = o->t;
    return RM_OK;
}

rm_status rm_optim_set_updates(rm_optim *o, uint64_t t) {
    if (alive(o) != RM_OK) return alive(o);
    o->t = t;
    return RM_OK;
}

rm_status rm_optim_unshard(rm_optim *o) {
    if (alive(o) != RM_OK) return alive(o);
    if (!o->sharded || o->c.kind != RM_OPTIM_ADAMW || o->full_m) return RM_OK;
    size_t n = o->ref.s->g->train_floats;
    o->full_m = malloc((n ? n : 1) * sizeof(float));
    o->full_v = malloc((n ? n : 1) * sizeof(float));
    int ok = o->full_m && o->full_v, all = ok;
    double okd = ok; /* every rank must take part, or none */
    rm_dist_sum(o->ref.s, &okd, 1);
    all = okd == (double)o->ref.s->dist->size;
    if (!all) {
        free(o->full_m), free(o->full_v);
        o->full_m = o->full_v = NULL;
        return rm_session_fail(o->ref.s, RM_ERR_NOMEM, "out of memory gathering the optimizer's moments (%.1f MiB)%s",
                               2.0 * (double)(n * sizeof(float)) / (1 << 20), ok ? " on another rank" : "");
    }
    rm_dist_allgather(o->ref.s, o->m, o->full_m);
    rm_dist_allgather(o->ref.s, o->v, o->full_v);
    return RM_OK;
}

rm_status rm_optim_reshard(rm_optim *o) {
    if (alive(o) != RM_OK) return alive(o);
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

rm_session *rm_optim_session(const rm_optim *o) { return o ? o->ref.s : NULL; }
