/* batchnorm.c: batch normalisation over the rows of x (N,C), per column c:
 *   mean_c = 1/N sum_i x_ic,  var_c = 1/N sum_i (x_ic - mean_c)^2
 *   y_ic = w_c (x_ic - mean_c) rstd_c + b_c,  rstd_c = 1/sqrt(var_c + eps)
 * and, as a side effect of a training forward, the running statistics
 *   running_mean = (1-m) running_mean + m mean,  running_var likewise with
 *   the unbiased variance var * N/(N-1)   (PyTorch's BatchNorm1d, m = 0.1).
 * The side effect is skipped when the forward is a recomputation, so running
 * statistics are the same under every recompute strategy. */
#include "ops/ops.h"
#include <math.h>
#include <string.h>

#define BN_EPS 1e-5f
#define BN_MOMENTUM 0.1f

rm_val rm_batchnorm(rm_graph *g, rm_val x, rm_val w, rm_val b, rm_val rmean, rm_val rvar) {
    if (!rm_val_ok(g, x, "batchnorm") || !rm_val_ok(g, w, "batchnorm") || !rm_val_ok(g, b, "batchnorm") ||
        !rm_val_ok(g, rmean, "batchnorm") || !rm_val_ok(g, rvar, "batchnorm"))
        return -1;
    const rm_value *vx = &g->vals[x];
    int64_t C = rm_cols(vx);
    int ins[5] = {x, w, b, rmean, rvar};
    for (int i = 1; i < 5; i++)
        if (g->vals[ins[i]].numel != C || g->vals[ins[i]].kind != RM_VALUE_PARAM) {
            rm_graph_fail(g, RM_ERR_ARG, "batchnorm: '%s' must be a parameter or state of %lld elements",
                          g->vals[ins[i]].name, (long long)C);
            return -1;
        }
    if (rm_rows(vx) < 2) {
        rm_graph_fail(g, RM_ERR_ARG, "batchnorm: '%s' needs at least 2 rows (a batch) to normalise", vx->name);
        return -1;
    }
    int n = rm_op_node(g, &rm_op_batchnorm, ins, 5);
    int64_t cs[1] = {C};
    rm_val y = rm_node_output(g, n, RM_DTYPE_F32, vx->ndim, vx->shape);
    rm_node_output(g, n, RM_DTYPE_F32, 1, cs); /* batch mean (C) */
    rm_node_output(g, n, RM_DTYPE_F32, 1, cs); /* batch rstd (C) */
    return y;
}

/* x is (N,C), y is (N,C), mean and rstd are (C). Columns are independent,
 * so blocks of columns run in parallel, each summing rows in order. */
static void batchnorm_forward(const rm_kernel_ctx *c) {
    const float *x = c->in[0], *w = c->in[1], *b = c->in[2];
    float *rmean = c->in[3], *rvar = c->in[4];
    float *y = c->out[0], *mean = c->out[1], *rstd = c->out[2];
    int N = (int)rm_rows(c->vin[0]), C = (int)rm_cols(c->vin[0]);
    int update = c->train && !c->recompute;
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < C; j++) {
        float m, r;
        if (c->train) {
            double s = 0, ss = 0;
            for (int i = 0; i < N; i++) s += x[(size_t)i * C + j];
            m = (float)(s / N);
            for (int i = 0; i < N; i++) {
                double d = x[(size_t)i * C + j] - m;
                ss += d * d;
            }
            float var = (float)(ss / N);
            r = 1.0f / sqrtf(var + BN_EPS);
            if (update) {
                rmean[j] = (1.0f - BN_MOMENTUM) * rmean[j] + BN_MOMENTUM * m;
                rvar[j] = (1.0f - BN_MOMENTUM) * rvar[j] + BN_MOMENTUM * var * (float)N / (float)(N - 1);
            }
        } else {
            m = rmean[j];
            r = 1.0f / sqrtf(rvar[j] + BN_EPS);
        }
        if (mean) mean[j] = m;
        if (rstd) rstd[j] = r;
        for (int i = 0; i < N; i++) y[(size_t)i * C + j] = w[j] * (x[(size_t)i * C + j] - m) * r + b[j];
    }
}

/* With xh = (x - mean) rstd and g = dy * w:
 *   dx = rstd (g - mean_i(g) - xh mean_i(g xh))
 *   dw += sum_i dy xh,  db += sum_i dy */
static void batchnorm_backward(const rm_kernel_ctx *c) {
    const float *x = c->in[0], *w = c->in[1], *mean = c->out[1], *rstd = c->out[2], *dy = c->dout[0];
    float *dx = c->din[0], *dw = c->din[1], *db = c->din[2];
    int N = (int)rm_rows(c->vin[0]), C = (int)rm_cols(c->vin[0]);
    #pragma omp parallel for schedule(static)
    for (int j = 0; j < C; j++) {
        double sg = 0, sgx = 0, sdy = 0, sdyx = 0;
        for (int i = 0; i < N; i++) {
            float xh = (x[(size_t)i * C + j] - mean[j]) * rstd[j], d = dy[(size_t)i * C + j];
            sdy += d;
            sdyx += d * xh;
            sg += d * w[j];
            sgx += d * w[j] * xh;
        }
        if (dw) dw[j] = c->acc[1] ? dw[j] + (float)sdyx : (float)sdyx;
        if (db) db[j] = c->acc[2] ? db[j] + (float)sdy : (float)sdy;
        if (!dx) continue;
        float mg = (float)(sg / N), mgx = (float)(sgx / N);
        for (int i = 0; i < N; i++) {
            size_t k = (size_t)i * C + j;
            float xh = (x[k] - mean[j]) * rstd[j];
            float v = rstd[j] * (dy[k] * w[j] - mg - xh * mgx);
            dx[k] = c->acc[0] ? dx[k] + v : v;
        }
    }
}

static double batchnorm_flops(const rm_node *n, const rm_value *vals, int backward) {
    double e = (double)vals[n->in[0]].numel;
    return backward ? 12.0 * e : 6.0 * e;
}

const rm_op_def rm_op_batchnorm = {
    .kind = RM_OP_BATCHNORM,
    .name = "batchnorm",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1) | RM_READS_OUT(1) | RM_READS_OUT(2),
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .flops = batchnorm_flops,
    .workspace = NULL,
    .side_effect = 1,
};
