/* session.c: compiling a graph into a session (autodiff, schedule, program,
 * memory layout, one allocation per group of tensors) and running steps. */
#include "exec/exec.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parameters start from N(0, std) or U(-std, std) drawn from Philox keyed
 * by (seed, param index): a pure function of the seed, independent of
 * thread count. */
static float init_value(const rm_session *s, const rm_value *v, int i, int64_t e) {
    switch (v->init) {
    case RM_INIT_ZEROS: return 0.0f;
    case RM_INIT_ONES: return 1.0f;
    case RM_INIT_NORMAL: return v->init_std * rm_philox_normal(s->opt.seed, 0x70617261u, (uint32_t)i, (uint64_t)e);
    case RM_INIT_UNIFORM: {
        const float u = rm_philox_uniform(s->opt.seed, 0x70617261u, (uint32_t)i, (uint64_t)e);
        return v->init_std * (2.0f * u - 1.0f);
    }
    }
    return 0.0f;
}

/* Parameter i's first values into w, kept as the parameter is (floats,
 * or 2 bytes rounded: exec/store.c). The narrowing rule
 * (docs/RELIABILITY.md): RM_ERR_ARG when a value the init draws is
 * infinite in the parameter's 2 bytes (a frozen F16 weight of std 1e5). */
static rm_status init_param(rm_session *s, int i, void *w) {
    const rm_value *v = &s->g->vals[s->g->params[i]];
    int64_t bad = INT64_MAX;
    /* each element depends only on (seed, i, e): parallel, same values */
    #pragma omp parallel for schedule(static) reduction(min : bad)
    for (int64_t e = 0; e < v->numel; e++) {
        float x = init_value(s, v, i, e);
        if (v->store == RM_DTYPE_F32) ((float *)w)[e] = x;
        else rm_store_round(&x, (uint16_t *)w + e, 1, v->store);
        if (v->store != RM_DTYPE_F32 && isfinite(x) && !isfinite(rm_store_value((uint16_t *)w + e, v->store)) && e < bad)
            bad = e;
    }
    if (bad == INT64_MAX) return RM_OK;
    return rm_graph_fail(s->g, RM_ERR_ARG, "rm_compile: the initial value %g of parameter '%s' (element %lld) does "
                         "not fit %s, which it is kept in (rm_param_store): keep it in %s, or initialise it smaller",
                         (double)init_value(s, v, i, bad), v->name, (long long)bad,
                         v->store == RM_DTYPE_F16 ? "F16 (largest 65504)" : "BF16", v->store == RM_DTYPE_F16
                         ? "BF16 or F32" : "F32");
}

/* Every parameter's first values. A parameter paged to the scratch file
 * gets them there (staged in the arena), and its part of the flat buffer
 * is never touched: it costs address space, not memory. */
static rm_status init_params(rm_session *s) {
    const rm_graph *g = s->g;
    if (!s->page.params) memset(s->params, 0, g->param_floats * sizeof(float)); /* the padding too */
    for (int i = 0; i < g->n_params; i++) {
        const rm_value *v = &g->vals[g->params[i]];
        rm_status rc;
        if (v->init == RM_INIT_ZEROS && !s->page.params) continue; /* zero already (rm_hf_mark_loaded: ~100 s of
                                                                     * draws for a 7B model's weights) */
        if (!rm_session_state_paged(s, i, 0)) {
            if ((rc = init_param(s, i, s->params + v->param_off)) != RM_OK) return rc;
            continue;
        }
        /* the whole parameter fits: its staged buffer is in the arena */
        if ((rc = init_param(s, i, (float *)s->arena)) != RM_OK) return rc;
        rc = rm_session_state_store(s, i, 0, (float *)s->arena);
        if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", s->errmsg);
    }
    return RM_OK;
}

static void *alloc_aligned(size_t bytes) {
    if (bytes == 0) bytes = RM_ALIGN;
    bytes = (bytes + RM_ALIGN - 1) / RM_ALIGN * RM_ALIGN;
    return aligned_alloc(RM_ALIGN, bytes);
}

/* The arena: its paged buffers are O_DIRECT transfers, page-aligned. */
static void *alloc_arena(size_t bytes) { return aligned_alloc(RM_PAGE_ALIGN, rm_page_round(bytes ? bytes : 1)); }

/* The notes about what the user's marks changed under `strategy`. */
static void word_notes(rm_session *s, const char *strategy, const rm_marks *m) {
    char *out = s->notes;
    size_t cap = sizeof s->notes, len = 0;
    out[0] = 0;
    if (m->forced)
        len += (size_t)snprintf(out + len, cap - len, "note: %d node(s) marked for recompute by the user are "
                                "recomputed, although strategy '%s' would keep them\n", m->forced, strategy);
    if (m->kept && len < cap)
        len += (size_t)snprintf(out + len, cap - len, "note: %d node(s) whose values the user marked must-save "
                                "are kept, although strategy '%s' would recompute them\n", m->kept, strategy);
    if (m->ignored && len < cap)
        snprintf(out + len, cap - len, "note: revolve schedules whole stages; per-node user marks are not "
                 "applied under it\n");
}

rm_status rm_session_program(rm_session *s, const char *strategy, int backward, rm_program *p) {
    rm_schedule sch;
    rm_marks marks;
    char err[256];
    rm_status rc = rm_schedule_build(s->g, strategy, backward, &marks, &sch, err, sizeof err);
    if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", err);
    if ((rc = rm_session_page_schedule(s, &sch, NULL, backward)) != RM_OK) {
        rm_schedule_free(&sch);
        return rc;
    }
    if (backward) word_notes(s, strategy && *strategy ? strategy : "none", &marks);
    rc = rm_program_build(s->g, &sch, s->threads, p, err, sizeof err);
    rm_schedule_free(&sch);
    if (rc != RM_OK) return rm_graph_fail(s->g, rc, "%s", err);
    rm_memplan(p);
    return RM_OK;
}

static rm_status compile(rm_graph *g, const rm_options *o, rm_session **out) {
    if (g->n_nodes == 0) return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: the graph has no nodes");
    rm_session *s = calloc(1, sizeof *s);
    if (!s) return rm_graph_fail(g, RM_ERR_NOMEM, "out of memory creating a session");
    s->g = g;
    rm_status rc = rm_session_options(s, o);
    if (rc != RM_OK) {
        free(s);
        return rc;
    }
    s->threads = s->opt.threads > 0 ? s->opt.threads : rm_default_threads();
    s->loss_seed = 1.0f;
    if ((rc = rm_graph_precision(g, s->opt.precision)) != RM_OK) { /* before anything counts a value's bytes */
        free(s);
        return rc;
    }
    s->precision_user = 1, g->precision_users++;
    g->sessions++; /* rm_session_free says when it is done with g */
    if ((rc = rm_store_check(g)) != RM_OK) { /* 2-byte parameters are read only by ops that take them */
        rm_session_free(s);
        return rc;
    }
    rm_graph_layout(g); /* trainable | state | frozen: the gradients cover the first part only */
    g->fuse_grads = s->opt.fuse_optimizer; /* the programs planned from here on (rm_compile resets it) */
    if ((rc = rm_session_scratch_open(s)) != RM_OK) {
        rm_session_free(s);
        return rc;
    }
    if (g->loss >= 0 && !s->opt.forward_only) {
        rc = rm_autodiff(g);
        if (rc == RM_OK && s->opt.limit_bytes > 0 && s->opt.strategy == RM_STRATEGY_NONE) {
            rc = rm_session_limit_program(s);
        } else if (rc == RM_OK && s->opt.memory_budget) {
            s->opt.checkpoint = "auto";
            rc = rm_session_budget_program(s, NULL, &s->train);
        } else if (rc == RM_OK) {
            rc = rm_session_program(s, s->opt.checkpoint, 1, &s->train);
        }
    }
    if (rc == RM_OK) rc = rm_session_program(s, s->opt.checkpoint, 0, &s->infer);
    if (rc != RM_OK) {
        rm_session_free(s);
        return rc;
    }
    s->arena_bytes = s->train.arena_bytes > s->infer.arena_bytes ? s->train.arena_bytes : s->infer.arena_bytes;
    if ((rc = rm_session_limit_check(s)) != RM_OK) {
        rm_session_free(s);
        return rc;
    }
    if (s->opt.dry_run) { /* a plan to look at: nothing to run */
        *out = s;
        return RM_OK;
    }
    if (s->opt.precision == RM_PRECISION_BF16) rm_gemm_bf16_prepare(); /* oneDNN's primitives: not in a step */
    if ((rc = rm_session_scratch_start(s)) != RM_OK) {
        rm_session_free(s);
        return rc;
    }
    const int flat_grads = !s->opt.fuse_optimizer; /* fused: the gradients are arena buffers */
    const size_t grad_bytes = g->train_floats * sizeof(float); /* trainable parameters only */
    s->arena = alloc_arena(s->arena_bytes);
    s->params = alloc_aligned(g->param_floats * sizeof(float));
    if (flat_grads) s->grads = alloc_aligned(grad_bytes);
    if (flat_grads && s->opt.accumulate) s->grads_micro = alloc_aligned(grad_bytes);
    s->inputs = alloc_aligned(g->input_bytes);
    rm_profile_alloc(&s->timing, g); /* all NULL when out of memory */
    if (s->opt.verify_recompute) s->hashes = calloc((size_t)g->n_vals, sizeof *s->hashes);
    if (!s->arena || !s->params || (flat_grads && !s->grads) || (flat_grads && s->opt.accumulate && !s->grads_micro) ||
        !s->inputs || !s->timing.node_fwd || (s->opt.verify_recompute && !s->hashes)) {
        size_t total = s->arena_bytes + g->param_floats * sizeof(float) + (size_t)flat_grads * grad_bytes;
        rm_session_free(s);
        return rm_graph_fail(g, RM_ERR_NOMEM, "cannot allocate %.1f MiB for activations and parameters",
                             (double)total / (1 << 20));
    }
    memset(s->inputs, 0, g->input_bytes);
    if (s->grads) memset(s->grads, 0, grad_bytes); /* rm_grad before the first step: zeros */
    for (int v = 0; v < g->n_vals; v++) {
        const rm_value *c = &g->vals[v];
        int32_t *dst = (int32_t *)(s->inputs + c->input_off);
        if (c->const_data) memcpy(dst, c->const_data, (size_t)c->numel * sizeof(int32_t));
        for (int64_t i = 0; c->const_period && i < c->numel; i++) dst[i] = (int32_t)(i % c->const_period);
    }
    memset(s->arena, 0, s->arena_bytes); /* touch it once, before any step */
    if ((rc = init_params(s)) != RM_OK) {
        rm_session_free(s);
        return rc;
    }
    if (s->opt.memory_budget && s->train.n_instrs && (rc = rm_session_profile(s)) != RM_OK) {
        rm_session_free(s);
        return rc;
    }
    *out = s;
    return RM_OK;
}

rm_status rm_compile(rm_graph *g, const rm_options *o, rm_session **out) {
    if (out) *out = NULL;
    if (!g) return RM_ERR_ARG;
    if (!out) return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: out must not be NULL");
    if (g->status != RM_OK) return g->status; /* a builder's error sticks */
    rm_status rc = compile(g, o, out);
    g->fuse_grads = 0; /* the graph as it was: the session's programs are built */
    /* A failed compile changes nothing the graph records: its message stays
     * readable (rm_graph_errmsg) but does not stick, so the caller can retry
     * with other options (e.g. a larger budget) on the same graph. */
    if (rc != RM_OK) g->status = RM_OK;
    else g->errmsg[0] = '\0';
    return rc;
}

void rm_session_free(rm_session *s) {
    if (!s) return;
    while (s->refs) rm_session_ref_detach(s->refs); /* its optimizers outlive it, detached */
    if (s->precision_user) rm_graph_release(s->g);
    rm_program_free(&s->train);
    rm_program_free(&s->infer);
    free(s->arena);
    free(s->params);
    free(s->grads);
    free(s->grads_micro);
    free(s->dist); /* one allocation (dist/dist.h); the communicator is the caller's */
    free(s->inputs);
    free(s->hashes);
    rm_profile_free(&s->prof);
    rm_profile_free(&s->timing);
    rm_trace_free(s);
    rm_session_scratch_close(s);
    rm_graph *g = s->precision_user ? s->g : NULL;
    free(s);
    rm_graph_session_done(g); /* last: frees g where rm_graph_free came first */
}

void *rm_session_input(rm_session *s, rm_val v, rm_dtype dt, int64_t numel, const char *fn, const char *what) {
    if (rm_session_runnable(s, fn) != RM_OK) return NULL;
    const rm_value *val = v >= 0 && v < s->g->n_vals ? &s->g->vals[v] : NULL;
    if (!val || val->kind != RM_VALUE_INPUT || rm_value_constant(val) || val->dtype != dt || val->numel != numel) {
        rm_session_fail(s, RM_ERR_ARG, "%s: io's %s (value %d) is not an %s input of %lld elements", fn, what, (int)v,
                        dt == RM_DTYPE_I32 ? "int32" : "f32", (long long)numel);
        return NULL;
    }
    return s->inputs + val->input_off;
}

void *rm_value_data(rm_session *s, rm_val v) {
    if (!s || rm_session_runnable(s, "rm_value_data") != RM_OK || v < 0 || v >= s->g->n_vals) return NULL;
    const rm_value *val = &s->g->vals[v];
    if (val->kind == RM_VALUE_INPUT) return s->inputs + val->input_off;
    for (int pi = 0; val->kind == RM_VALUE_PARAM && s->page.params && pi < s->g->n_params; pi++)
        if (s->g->params[pi] == v && rm_session_state_paged(s, pi, 0)) return NULL; /* in the scratch file */
    if (val->kind == RM_VALUE_PARAM) return s->params + val->param_off;
    if (!s->last || !val->is_output) return NULL;
    int b = s->last->final_buf[v];
    return b >= 0 ? s->arena + s->last->bufs[b].offset : NULL;
}

float *rm_grad(rm_session *s, rm_val v) {
    if (!s || rm_session_runnable(s, "rm_grad") != RM_OK || !s->grads || v < 0 || v >= s->g->n_vals ||
        s->g->vals[v].kind != RM_VALUE_PARAM || !s->g->vals[v].trainable)
        return NULL;
    return s->grads + s->g->vals[v].param_off;
}

static float read_loss(rm_session *s) {
    float *l = rm_value_data(s, s->g->loss);
    return l ? *l : NAN;
}

/* The caller's inputs are checked before every step: ops with a check
 * (embedding ids, softmax_ce targets) name what is out of range. */
rm_status rm_session_check_inputs(rm_session *s, const char *fn) {
    const rm_graph *g = s->g;
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        const rm_op_def *op = rm_op_get(nd->op);
        if (!op->check) continue;
        rm_kernel_ctx c;
        memset(&c, 0, sizeof c);
        c.node = nd;
        c.node_id = n;
        for (int k = 0; k < nd->n_in; k++) {
            const int v = nd->in[k];
            if (v < 0) continue;
            c.vin[k] = &g->vals[v];
            if (g->vals[v].kind == RM_VALUE_INPUT) c.in[k] = s->inputs + g->vals[v].input_off;
        }
        char err[200];
        if (op->check(&c, err, sizeof err) != RM_OK) return rm_session_fail(s, RM_ERR_ARG, "%s: %s", fn, err);
    }
    return RM_OK;
}

/* An accumulating micro-batch: its gradients are computed on their own,
 * from zero, into a second buffer (allocated at the first such step), then
 * added to the total: total += g_j. So k micro-batches give
 * ((g_0 + g_1) + g_2) + ..., bit for bit the sum data-parallel ranks form
 * of the same micro-batches (dist/dist.c; for 2 ranks g_0 + g_1 exactly). */
static rm_status accumulate(rm_session *s, uint64_t step) {
    const size_t n = s->g->train_floats;
    if (!s->grads_micro && s->opt.limit_bytes > 0)
        return rm_session_fail(s, RM_ERR_STATE, "rm_step_micro: accumulating needs a second gradient buffer "
                               "(%.1f MiB) that the memory limit did not count: compile with rm_options.accumulate",
                               (double)(n * sizeof(float)) / (1 << 20));
    if (!s->grads_micro && !(s->grads_micro = alloc_aligned(n * sizeof(float))))
        return rm_session_fail(s, RM_ERR_NOMEM, "out of memory for the micro-batch gradients (%.1f MiB)",
                               (double)(n * sizeof(float)) / (1 << 20));
    float *total = s->grads, *micro = s->grads_micro;
    s->grads = micro;
    s->accumulate = 0; /* rm_execute zeroes the micro-batch's buffer */
    rm_status rc = rm_execute(s, &s->train, step, 1);
    s->grads = total;
    if (rc != RM_OK) return rc;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) total[i] += micro[i];
    return RM_OK;
}

rm_status rm_step_micro(rm_session *s, uint64_t step, const rm_micro *m, float *loss) {
    if (!s) return RM_ERR_ARG;
    rm_status rc = rm_session_runnable(s, "rm_step");
    if (rc != RM_OK) return rc;
    const int ready = s->grads_ready; /* the gradients are the last step's; any step that fails leaves none */
    s->grads_ready = 0;
    if (s->g->loss < 0 || s->opt.forward_only)
        return rm_session_fail(s, RM_ERR_STATE, "rm_step: the session is forward-only (no loss, or forward_only set)");
    const rm_micro whole = {0, 1.0f, 0};
    if (!m) m = &whole;
    if (m->row_offset < 0 || !isfinite(m->loss_scale))
        return rm_session_fail(s, RM_ERR_ARG, "rm_step_micro: row_offset %lld must be >= 0 and loss_scale finite",
                               (long long)m->row_offset);
    const int fused = s->train.fused;
    if (fused && m->accumulate)
        return rm_session_fail(s, RM_ERR_ARG, "rm_step_micro: the session fuses its optimizer (rm_options."
                               "fuse_optimizer), so no gradient outlives its update: it cannot accumulate "
                               "micro-batches; compile without fuse_optimizer to accumulate");
    if (m->accumulate && !ready)
        return rm_session_fail(s, RM_ERR_STATE, "rm_step_micro: no gradients to accumulate into yet: the first "
                               "micro-batch of a step has accumulate 0 (it overwrites the gradients)");
    if (fused && !s->fused.o)
        return rm_session_fail(s, RM_ERR_STATE, "rm_step: the session fuses its optimizer (rm_options."
                               "fuse_optimizer): create it with rm_optim_new and give the learning rate with "
                               "rm_optim_set_lr first");
    if ((rc = rm_session_check_inputs(s, "rm_step")) != RM_OK) return rc;
    if (fused && (rc = s->fused.begin(s->fused.o)) != RM_OK) return rc;
    s->row0 = m->row_offset;
    s->loss_seed = m->loss_scale;
    if (m->accumulate) rc = accumulate(s, step);
    else rc = rm_execute(s, &s->train, step, 1);
    s->grads_ready = rc == RM_OK;
    s->row0 = 0, s->accumulate = 0, s->loss_seed = 1.0f;
    if (fused && rc == RM_OK) rc = s->fused.end(s->fused.o);
    if (rc == RM_OK && loss) *loss = read_loss(s);
    return rc;
}

/* rm_step is in dist/dist.c: with a communicator it is a step of all ranks. */

rm_status rm_forward(rm_session *s, float *loss) {
    if (!s) return RM_ERR_ARG;
    rm_status rc = rm_session_runnable(s, "rm_forward");
    if (rc != RM_OK || (rc = rm_session_check_inputs(s, "rm_forward")) != RM_OK) return rc;
    rc = rm_execute(s, &s->infer, 0, 0);
    if (rc == RM_OK && loss) *loss = s->g->loss >= 0 ? read_loss(s) : NAN;
    return rc;
}

