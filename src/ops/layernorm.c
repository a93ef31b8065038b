/* layernorm.c: layer normalisation over the last dimension (Ba et al. 2016).
 *
 * For each row x of C numbers:
 *   mean = (1/C) sum_i x_i
 *   var  = (1/C) sum_i (x_i - mean)^2        (biased, as in PyTorch)
 *   rstd = 1 / sqrt(var + eps)
 *   xhat = (x - mean) * rstd                 (zero mean, unit variance)
 *   out  = xhat * w + b                      (w, b: per-channel scale and shift)
 *
 * mean and rstd are kept as small auxiliary outputs (one float per row):
 * with them and x, the backward rebuilds xhat without storing it, and the
 * normalised output itself is never needed again. Under --precision bf16
 * the output may be kept in bf16 (the products that read it round it so).
 */
#include "ops/ops.h"
#include "util/fastmath.h"
#include <math.h>
#include <string.h>

#define LN_EPS 1e-5f

rm_val rm_layernorm(rm_graph *g, rm_val x, rm_val w, rm_val b) {
    if (!rm_val_ok(g, x, "layernorm") || !rm_val_ok(g, w, "layernorm") || !rm_val_ok(g, b, "layernorm"))
        return -1;
    const rm_value *vx = &g->vals[x], *vw = &g->vals[w], *vb = &g->vals[b];
    if (vx->dtype != RM_DTYPE_F32 || vw->dtype != RM_DTYPE_F32 || vb->dtype != RM_DTYPE_F32) {
        rm_graph_fail(g, RM_ERR_ARG, "layernorm: x, w and b must be f32");
        return -1;
    }
    const int64_t C = rm_cols(vx);
    if (vw->ndim != 1 || vw->shape[0] != C || vb->ndim != 1 || vb->shape[0] != C) {
        rm_graph_fail(g, RM_ERR_ARG, "layernorm: w '%s' and b '%s' must be (%lld), the last dim of '%s'",
                      vw->name, vb->name, (long long)C, vx->name);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    const int nd = vx->ndim;
    memcpy(shape, vx->shape, (size_t)nd * sizeof *shape);
    const int64_t rows[1] = {rm_rows(vx)};
    int ins[3] = {x, w, b};
    int n = rm_op_node(g, &rm_op_layernorm, ins, 3);
    if (n < 0) return -1;
    g->nodes[n].farg[0] = LN_EPS;
    rm_val out = rm_node_output(g, n, RM_DTYPE_F32, nd, shape);
    rm_node_output(g, n, RM_DTYPE_F32, 1, rows); /* mean */
    rm_node_output(g, n, RM_DTYPE_F32, 1, rows); /* rstd */
    return g->status == RM_OK ? out : -1;
}

static void layernorm_forward(const rm_kernel_ctx *c) {
    // x is (N,C), w is (C), b is (C); out is (N,C), mean is (N), rstd is (N)
    const float *x = c->in[0], *w = c->in[1], *b = c->in[2];
    void *out = c->out[0];
    float *mean = c->out[1], *rstd = c->out[2];
    const rm_dtype yt = c->vout[0]->dtype;
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]);
    const float eps = c->node->farg[0];
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        /* two passes (mean, then squared deviations) rather than E[x^2]-E[x]^2,
         * which cancels catastrophically when |mean| >> std; sums in lanes */
        const float m = rm_sumf(xr, C) / (float)C;
        const float v = rm_sqdevf(xr, m, C) / (float)C;
        const float s = 1.0f / sqrtf(v + eps);
        for (int64_t i0 = 0; i0 < C; i0 += RM_ACT_CHUNK) { /* out may be bf16 (--precision bf16) */
            const int64_t k = C - i0 < RM_ACT_CHUNK ? C - i0 : RM_ACT_CHUNK;
            float buf[RM_ACT_CHUNK], *o = rm_act_dst(out, yt, n * C + i0, buf);
            for (int64_t i = 0; i < k; i++) o[i] = (xr[i0 + i] - m) * s * w[i0 + i] + b[i0 + i];
            rm_act_write(out, yt, n * C + i0, k, o);
        }
        mean[n] = m;
        rstd[n] = s;
    }
}

/* Backward. With g = dout * w (the gradient reaching xhat), the chain rule
 * through mean and rstd collapses to
 *   dx = rstd * (g - mean_i(g) - xhat * mean_i(g * xhat))
 * (the two subtracted terms remove the components of g along the directions
 * that normalisation projects out: a constant shift and a rescale). And
 *   dw_i = sum_n dout[n,i] * xhat[n,i],   db_i = sum_n dout[n,i].
 */
#define LN_COL_BLOCK 32

static void layernorm_backward(const rm_kernel_ctx *c) {
    // x is (N,C), w is (C), mean is (N), rstd is (N), dout is (N,C)
    // dx is (N,C), dw is (C), db is (C)
    const float *x = c->in[0], *w = c->in[1];
    const float *mean = c->out[1], *rstd = c->out[2];
    const float *dout = c->dout[0];
    float *dx = c->din[0], *dw = c->din[1], *db = c->din[2];
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]);

    const int acc = c->acc[0];
    const int64_t nblocks = (C + LN_COL_BLOCK - 1) / LN_COL_BLOCK;
    /* one parallel region: the rows of dx and the column sums of dw, db are
     * independent (no barrier between them) */
#pragma omp parallel
    {
        if (dx) {
#pragma omp for schedule(static) nowait
            for (int64_t n = 0; n < N; n++) {
                const float *xr = x + n * C, *gr = dout + n * C;
                const float m = mean[n], s = rstd[n];
                // means over the row of g and g*xhat
                const float gmean = rm_dotf(gr, w, C) / (float)C;
                const float gxmean = rm_dot_devf(gr, w, xr, m, C) * s / (float)C;
                float *d = dx + n * C;
                for (int64_t i = 0; i < C; i++) {
                    const float xhat = (xr[i] - m) * s;
                    const float v = s * (gr[i] * w[i] - gmean - xhat * gxmean);
                    d[i] = acc ? d[i] + v : v;
                }
            }
        }

        if (dw || db) {
            /* Column sums over all rows. Threads own blocks of columns and walk
             * the rows in order, so each sum has one fixed order whatever the
             * thread count (no atomics, no per-thread partials to combine). */
#pragma omp for schedule(static)
            for (int64_t blk = 0; blk < nblocks; blk++) {
                const int64_t c0 = blk * LN_COL_BLOCK;
                const int64_t c1 = c0 + LN_COL_BLOCK < C ? c0 + LN_COL_BLOCK : C;
                float sw[LN_COL_BLOCK] = {0}, sb[LN_COL_BLOCK] = {0};
                for (int64_t n = 0; n < N; n++) {
                    const float *xr = x + n * C, *gr = dout + n * C;
                    const float m = mean[n], s = rstd[n];
                    for (int64_t i = c0; i < c1; i++) {
                        sw[i - c0] += gr[i] * (xr[i] - m) * s;
                        sb[i - c0] += gr[i];
                    }
                }
                for (int64_t i = c0; i < c1; i++) {
                    if (dw) dw[i] = c->acc[1] ? dw[i] + sw[i - c0] : sw[i - c0];
                    if (db) db[i] = c->acc[2] ? db[i] + sb[i - c0] : sb[i - c0];
                }
            }
        }
    }
}

static double layernorm_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->in[0]].numel;
    /* forward: sum, deviations, squares, normalise + affine ~ 8 per element;
     * backward: two row means, dx, and the dw/db column sums ~ 14 */
    return backward ? 14.0 * e : 8.0 * e;
}

const rm_op_def rm_op_layernorm = {
    .kind = RM_OP_LAYERNORM,
    .name = "layernorm",
    /* x, w, mean, rstd: not b, and not out (xhat is rebuilt from x) */
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1) | RM_READS_OUT(1) | RM_READS_OUT(2),
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .flops = layernorm_flops,
    .workspace = NULL,
    .cheap = 1,
    .bf16_outs = 1u,
};
