/* rmsnorm.c: root-mean-square layer normalisation (Zhang & Sennrich 2019),
 * as LLaMA uses it: no mean subtraction and no bias.
 *
 * For each row x of C numbers:
 *   rstd = 1 / sqrt((1/C) sum_i x_i^2 + eps)
 *   xhat = x * rstd                 (unit root-mean-square)
 *   out  = xhat * w                 (w: per-channel gain)
 *
 * rstd is kept as a small auxiliary output (one float per row): with it and
 * x the backward rebuilds xhat, so the normalised output is never stored.
 * eps is a parameter (Hugging Face LlamaConfig's rms_norm_eps is 1e-6).
 */
#include "ops/ops.h"
#include "util/fastmath.h"
#include <math.h>
#include <string.h>

rm_val rm_rmsnorm(rm_graph *g, rm_val x, rm_val w, float eps) {
    if (!rm_val_ok(g, x, "rmsnorm") || !rm_val_ok(g, w, "rmsnorm")) return -1;
    const rm_value *vx = &g->vals[x], *vw = &g->vals[w];
    if (vx->dtype != RM_DTYPE_F32 || vw->dtype != RM_DTYPE_F32) {
        rm_graph_fail(g, RM_ERR_ARG, "rmsnorm: x '%s' and w '%s' must be f32", vx->name, vw->name);
        return -1;
    }
    const int64_t C = rm_cols(vx);
    if (vw->ndim != 1 || vw->shape[0] != C) {
        rm_graph_fail(g, RM_ERR_ARG, "rmsnorm: w '%s' must be (%lld), the last dim of '%s'", vw->name,
                      (long long)C, vx->name);
        return -1;
    }
    if (!rm_norm_eps_ok(eps)) {
        rm_graph_fail(g, RM_ERR_ARG, "rmsnorm: eps = %g must be in (0, 1)", (double)eps);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    const int nd = vx->ndim;
    memcpy(shape, vx->shape, (size_t)nd * sizeof *shape);
    const int64_t rows[1] = {rm_rows(vx)};
    int ins[2] = {x, w};
    int n = rm_op_node(g, &rm_op_rmsnorm, ins, 2);
    if (n < 0) return -1;
    g->nodes[n].farg[0] = eps;
    rm_val out = rm_node_output(g, n, RM_DTYPE_F32, nd, shape);
    rm_node_output(g, n, RM_DTYPE_F32, 1, rows); /* rstd */
    return g->status == RM_OK ? out : -1;
}

static void rmsnorm_forward(const rm_kernel_ctx *c) {
    // x is (N,C), w is (C); out is (N,C), rstd is (N)
    const float *x = c->in[0], *w = c->in[1];
    float *rstd = c->out[1];
    const rm_dtype yt = c->vout[0]->dtype; /* bf16 under --precision bf16 when products read it */
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]);
    const float eps = c->node->farg[0];
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * C;
        const float s = 1.0f / sqrtf(rm_dotf(xr, xr, C) / (float)C + eps); /* lanes: vectorised */
        for (int64_t i0 = 0; i0 < C; i0 += RM_ACT_CHUNK) {
            const int64_t k = C - i0 < RM_ACT_CHUNK ? C - i0 : RM_ACT_CHUNK;
            float buf[RM_ACT_CHUNK], *o = rm_act_dst(c->out[0], yt, n * C + i0, buf);
            for (int64_t i = 0; i < k; i++) o[i] = xr[i0 + i] * s * w[i0 + i];
            rm_act_write(c->out[0], yt, n * C + i0, k, o);
        }
        rstd[n] = s;
    }
}

/* Backward. With g = dout * w (the gradient reaching xhat) and
 * d rstd / d x_j = -rstd^3 x_j / C, the chain rule gives
 *   dx = rstd * (g - xhat * mean_i(g * xhat))
 * (layernorm's formula without the mean term: there is no shift to undo),
 *   dw_i = sum_n dout[n,i] * xhat[n,i].
 */
#define RMS_COL_BLOCK 32

static void rmsnorm_backward(const rm_kernel_ctx *c) {
    // x is (N,C), w is (C), rstd is (N), dout is (N,C); dx is (N,C), dw is (C)
    const float *x = c->in[0], *w = c->in[1], *rstd = c->out[1], *dout = c->dout[0];
    float *dx = c->din[0], *dw = c->din[1];
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]);
    const int acc = c->acc[0];
    const int64_t nblocks = (C + RMS_COL_BLOCK - 1) / RMS_COL_BLOCK;
#pragma omp parallel /* one region: dx's rows and dw's columns are independent */
    {
        if (dx) {
#pragma omp for schedule(static) nowait
            for (int64_t n = 0; n < N; n++) {
                const float *xr = x + n * C, *gr = dout + n * C;
                const float s = rstd[n];
                const float gx = rm_dot_devf(gr, w, xr, 0.0f, C) * s / (float)C; // mean over the row of g * xhat
                float *d = dx + n * C;
                for (int64_t i = 0; i < C; i++) {
                    const float v = s * (gr[i] * w[i] - xr[i] * s * gx);
                    d[i] = acc ? d[i] + v : v;
                }
            }
        }
        if (dw) {
            /* column sums: threads own blocks of columns and walk the rows in
             * order, so the result does not depend on the thread count */
#pragma omp for schedule(static)
            for (int64_t blk = 0; blk < nblocks; blk++) {
                const int64_t c0 = blk * RMS_COL_BLOCK, c1 = c0 + RMS_COL_BLOCK < C ? c0 + RMS_COL_BLOCK : C;
                float sw[RMS_COL_BLOCK] = {0};
                for (int64_t n = 0; n < N; n++) {
                    const float *xr = x + n * C, *gr = dout + n * C;
                    for (int64_t i = c0; i < c1; i++) sw[i - c0] += gr[i] * xr[i] * rstd[n];
                }
                for (int64_t i = c0; i < c1; i++) dw[i] = c->acc[1] ? dw[i] + sw[i - c0] : sw[i - c0];
            }
        }
    }
}

static double rmsnorm_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->in[0]].numel;
    return backward ? 10.0 * e : 4.0 * e; /* squares + sum, then scale and gain */
}

const rm_op_def rm_op_rmsnorm = {
    .kind = RM_OP_RMSNORM,
    .name = "rmsnorm",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1) | RM_READS_OUT(1), /* x, w, rstd */
    .forward = rmsnorm_forward,
    .backward = rmsnorm_backward,
    .flops = rmsnorm_flops,
    .workspace = NULL,
    .cheap = 1,
    .bf16_outs = 1u,
};
