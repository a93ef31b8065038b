/* opcheck.h: the harness of the op tests (test_ops.c, test_ops2.c): a
 * one-node graph built with the op's public builder, one buffer per value,
 * the kernels called through rm_op_get, and a finite-difference gradient
 * check that also poisons every forward tensor outside bwd_reads and tests
 * that acc = 1 adds rather than overwrites. */
#ifndef REMAT_TEST_OPCHECK_H
#define REMAT_TEST_OPCHECK_H
#include "exec/exec.h"
#include "check.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static double rnd(void) { /* xorshift64*: [0,1) with 53 bits */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}
static float rndu(float lo, float hi) { return lo + (hi - lo) * (float)rnd(); }

static int max_threads(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
static inline void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* A one-node graph and a buffer for each of its values. */
typedef struct fx {
    rm_graph *g;
    int node;
    const rm_op_def *op;
    void *data[16];
    void *work;
    int threads, train;
    uint64_t seed, step;
} fx;

static void fx_begin(fx *f) {
    memset(f, 0, sizeof *f);
    f->g = rm_graph_new();
    f->train = 1;
    f->seed = 1234;
    f->step = 7;
    f->threads = max_threads();
}
static rm_val fx_input(fx *f, rm_dtype dt, int nd, const int64_t *shape) {
    return rm_input(f->g, "in", dt, nd, shape);
}
static rm_val fx_param(fx *f, const char *name, int nd, const int64_t *shape) {
    return rm_param(f->g, name, nd, shape, RM_INIT_ZEROS, 0.0f, 0);
}
static const rm_node *fx_node(const fx *f) { return &f->g->nodes[f->node]; }
static float *fx_f(fx *f, rm_val v) { return f->data[v]; }
static int32_t *fx_i(fx *f, rm_val v) { return f->data[v]; }
static int64_t fx_numel(fx *f, rm_val v) { return f->g->vals[v].numel; }

/* After the builder: allocate every value, fill f32 with U(-1,1), i32 with 0. */
static int fx_finish(fx *f, rm_val out, const char *what) {
    CHECK(out >= 0 && f->g->n_nodes == 1, "%s: builder failed: %s", what, rm_graph_errmsg(f->g));
    if (out < 0 || f->g->n_vals > 16) return 0;
    f->node = 0;
    f->op = rm_op_get(fx_node(f)->op);
    for (int v = 0; v < f->g->n_vals; v++) {
        const rm_value *val = &f->g->vals[v];
        f->data[v] = malloc((size_t)val->numel * 4);
        for (int64_t i = 0; i < val->numel; i++) {
            if (val->dtype == RM_DTYPE_F32) fx_f(f, v)[i] = rndu(-1, 1);
            else fx_i(f, v)[i] = 0;
        }
    }
    size_t w = 0;
    if (f->op->workspace)
        for (int b = 0; b < 2; b++) {
            size_t s = f->op->workspace(fx_node(f), f->g->vals, b, f->threads);
            w = s > w ? s : w;
        }
    f->work = malloc(w ? w : 1);
    if (f->work) memset(f->work, 0xff, w); /* NaN: a kernel must write the scratch it reads */
    return 1;
}
static void fx_end(fx *f) {
    for (int v = 0; v < 16; v++) free(f->data[v]);
    free(f->work);
    rm_graph_free(f->g);
}

static rm_kernel_ctx fx_ctx(fx *f) {
    rm_kernel_ctx c;
    memset(&c, 0, sizeof c);
    const rm_node *n = fx_node(f);
    c.node = n;
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0) {
            c.vin[k] = &f->g->vals[n->in[k]];
            c.in[k] = f->data[n->in[k]];
        }
    for (int j = 0; j < n->n_out; j++) {
        c.vout[j] = &f->g->vals[n->out[j]];
        c.out[j] = f->data[n->out[j]];
    }
    c.work = f->work;
    c.threads = f->threads;
    c.seed = f->seed;
    c.step = f->step;
    c.node_id = f->node;
    c.train = f->train;
    return c;
}

/* Outputs are NaN-filled first: a forward must not read what it writes. */
static void fx_forward(fx *f) {
    const rm_node *n = fx_node(f);
    for (int j = 0; j < n->n_out; j++)
        for (int64_t i = 0; i < fx_numel(f, n->out[j]); i++) fx_f(f, n->out[j])[i] = NAN;
    rm_kernel_ctx c = fx_ctx(f);
    f->op->forward(&c);
}

/* A copy of value v poisoned: NaN for f32, 0 for i32 (a NaN id would crash
 * rather than fail a check; a zero id sends gradients to the wrong row). */
static void *poisoned(fx *f, rm_val v) {
    const rm_value *val = &f->g->vals[v];
    void *p = malloc((size_t)val->numel * 4);
    for (int64_t i = 0; i < val->numel; i++) {
        if (val->dtype == RM_DTYPE_F32) ((float *)p)[i] = NAN;
        else ((int32_t *)p)[i] = 0;
    }
    return p;
}

/* Backward with dout[0] = dout0. Every forward tensor outside the node's
 * backward reads (rm_node_bwd_reads: which parameters are frozen changes
 * them) is replaced by a poisoned copy, so an op that reads more than it
 * declares (and would read freed memory under the planner) fails its
 * gradient check. */
static void fx_backward(fx *f, const float *dout0, float *const *din, const int *acc) {
    const rm_node *n = fx_node(f);
    rm_kernel_ctx c = fx_ctx(f);
    void *tmp[RM_MAX_IN + RM_MAX_OUT] = {0};
    const unsigned reads = rm_node_bwd_reads(n, f->g->vals);
    for (int k = 0; k < n->n_in; k++)
        if (n->in[k] >= 0 && !(reads & RM_READS_IN(k))) c.in[k] = tmp[k] = poisoned(f, n->in[k]);
    for (int j = 0; j < n->n_out; j++)
        if (!(reads & RM_READS_OUT(j))) c.out[j] = tmp[RM_MAX_IN + j] = poisoned(f, n->out[j]);
    c.dout[0] = (float *)dout0;
    for (int k = 0; k < RM_MAX_IN; k++) {
        c.din[k] = din[k];
        c.acc[k] = acc[k];
    }
    f->op->backward(&c);
    for (int k = 0; k < RM_MAX_IN + RM_MAX_OUT; k++) free(tmp[k]);
}

/* L = sum(out0 * R), in double from the float forward. */
static double fx_loss(fx *f, const float *R) {
    fx_forward(f);
    const rm_val o = fx_node(f)->out[0];
    const float *y = fx_f(f, o);
    double L = 0.0;
    for (int64_t i = 0; i < fx_numel(f, o); i++) L += (double)y[i] * (double)R[i];
    return L;
}

/* ---- the gradient check ----------------------------------------------------
 *
 * Analytic: din from backward with dout = R. Numeric: (L(x+h) - L(x-h)) / 2h
 * per element, the step measured from the stored floats (x+h rounds).
 *
 * h = 1e-2. The numeric error has two parts. Truncation: the central
 * difference is off by h^2/6 * L''' ~ 2e-5 * L''' (inputs are O(1), and so
 * are third derivatives here except layernorm's, which scale like rstd^3 ~ 5).
 * Rounding: the outputs that x touches each carry ~1 ulp (6e-8 relative) of
 * fp32 error; summed against R and divided by 2h = 2e-2 that is ~3e-6 per
 * touched output, ~1e-5..1e-4 for the op sizes below. A smaller h trades
 * the first for the second; 1e-2 keeps both near 1e-4 or below.
 *
 * Criterion: |analytic - numeric| <= ATOL * scale + RTOL * |numeric|, where
 * scale = max |numeric| over the tensor. ATOL = 1e-3 of the tensor's own
 * gradient scale absorbs the absolute rounding noise (which does not shrink
 * with a small gradient element); RTOL = 1e-2 absorbs the truncation. A real
 * bug (a missing term, a wrong sign or factor) is off by O(1) relative.
 */
#define FD_H 1e-2f
#define FD_ATOL 1e-3
#define FD_RTOL 1e-2

static double worst_ratio_all;

/* skip: bitmask of f32 inputs not checked (none today; ids/targets are i32). */
static void gradcheck(fx *f, const char *name, unsigned skip) {
    const rm_node *n = fx_node(f);
    const rm_val o = n->out[0];
    const int64_t M = fx_numel(f, o);
    float *R = malloc((size_t)M * sizeof *R);
    for (int64_t i = 0; i < M; i++) R[i] = rndu(-1, 1);
    fx_forward(f);

    /* analytic, acc = 0 over NaN garbage: the kernel must overwrite */
    float *din[RM_MAX_IN] = {0};
    int acc[RM_MAX_IN] = {0};
    for (int k = 0; k < n->n_in; k++) {
        rm_val v = n->in[k];
        if (v < 0 || f->g->vals[v].dtype != RM_DTYPE_F32 || (skip & (1u << k))) continue;
        din[k] = malloc((size_t)fx_numel(f, v) * sizeof(float));
        for (int64_t i = 0; i < fx_numel(f, v); i++) din[k][i] = NAN;
    }
    fx_backward(f, R, din, acc);

    for (int k = 0; k < n->n_in; k++) {
        if (!din[k]) continue;
        const rm_val v = n->in[k];
        const int64_t E = fx_numel(f, v);
        float *x = fx_f(f, v);
        double *num = malloc((size_t)E * sizeof *num), scale = 0.0;
        for (int64_t i = 0; i < E; i++) {
            const float save = x[i];
            x[i] = save + FD_H;
            const double xp = x[i], Lp = fx_loss(f, R);
            x[i] = save - FD_H;
            const double xm = x[i], Lm = fx_loss(f, R);
            x[i] = save;
            num[i] = (Lp - Lm) / (xp - xm);
            scale = fabs(num[i]) > scale ? fabs(num[i]) : scale;
        }
        int bad = 0;
        double worst = 0.0;
        for (int64_t i = 0; i < E; i++) {
            const double a = din[k][i], err = fabs(a - num[i]);
            const double tol = FD_ATOL * scale + FD_RTOL * fabs(num[i]) + 1e-12;
            const double r = isfinite(a) ? err / tol : INFINITY;
            worst = r > worst ? r : worst;
            if (!(r <= 1.0) && bad++ == 0)
                CHECK(0, "%s: d(input %d)[%lld]: analytic %.7g numeric %.7g (tol %.3g)", name, k, (long long)i,
                      a, num[i], tol);
        }
        CHECK(bad == 0, "%s: input %d: %d of %lld gradient elements off", name, k, bad, (long long)E);
        CHECK(scale > 0.0, "%s: input %d: the numeric gradient is all zero (a useless check)", name, k);
        printf("  %-22s d(input %d): %4lld elements, worst err/tol %.3f\n", name, k, (long long)E, worst);
        worst_ratio_all = worst > worst_ratio_all ? worst : worst_ratio_all;
        free(num);
    }

    /* acc = 1: the same gradient added onto random contents */
    float *g0[RM_MAX_IN] = {0}, *dacc[RM_MAX_IN] = {0};
    for (int k = 0; k < n->n_in; k++) {
        if (!din[k]) continue;
        const int64_t E = fx_numel(f, n->in[k]);
        g0[k] = malloc((size_t)E * sizeof(float));
        dacc[k] = malloc((size_t)E * sizeof(float));
        for (int64_t i = 0; i < E; i++) dacc[k][i] = g0[k][i] = rndu(-2, 2);
        acc[k] = 1;
    }
    fx_forward(f);
    fx_backward(f, R, dacc, acc);
    for (int k = 0; k < n->n_in; k++) {
        if (!din[k]) continue;
        int bad = 0;
        for (int64_t i = 0; i < fx_numel(f, n->in[k]); i++) {
            const double want = (double)g0[k][i] + din[k][i];
            if (!(fabs(dacc[k][i] - want) <= 1e-5 * (fabs(g0[k][i]) + fabs(din[k][i])) + 1e-7)) bad++;
        }
        CHECK(bad == 0, "%s: input %d: acc=1 does not add onto din (%d elements off)", name, k, bad);
        free(g0[k]);
        free(dacc[k]);
        free(din[k]);
    }
    free(R);
}

#endif
