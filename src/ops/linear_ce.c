/* linear_ce.c: a language model's head and its loss in one op, so the
 * (N,V) logits never exist whole: loss = mean_n CE(x_n W^T, t_n).
 *
 * x is (N,C) (any leading dims), W is (V,C) as nn.Linear keeps it (lm_head
 * or a tied embedding), t (N) i32 targets in [0, V). Unfused, the head
 * keeps the logits (N,V), softmax_ce keeps the probabilities (N,V), and
 * the backward writes their gradient (N,V): three (N,V) arrays, 400 MB
 * each for 2048 tokens of a 49,152-token vocabulary. Here rows go through
 * in chunks of R (about 16 MiB of logits at a time):
 *
 * forward, per chunk:   z = x_c W^T                   (R,V) scratch
 *                       lse_n = log sum_v exp(z_nv)   (kept: N floats)
 *                       loss_n = lse_n - z_{n,t_n}
 * backward, per chunk:  z = x_c W^T                   (recomputed)
 *                       dz = (exp(z - lse) - onehot(t)) * dloss / N
 *                       dx_c = dz W                   (R,C)
 *                       dW += dz^T x_c                (V,C), chunks in order
 *
 * The price is one more x W^T in the backward; the memory, R*V floats of
 * scratch and N floats kept (the "cut cross-entropy" of Wijmans et al.
 * 2024 and Liger's fused linear cross-entropy do the same on GPUs).
 * Sums run in a fixed order (row losses in order, dW's chunks in order),
 * so a recomputed or re-run step gives the same bits. */
#include "ops/ops.h"
#include "util/fastmath.h"
#include <math.h>

#define LCE_SCRATCH_BYTES ((int64_t)16 << 20) /* z of one chunk */

rm_val rm_linear_ce(rm_graph *g, rm_val x, rm_val w, rm_val targets) {
    if (!rm_val_ok(g, x, "linear_ce") || !rm_val_ok(g, w, "linear_ce") || !rm_val_ok(g, targets, "linear_ce"))
        return -1;
    const rm_value *vx = &g->vals[x], *vw = &g->vals[w], *vt = &g->vals[targets];
    if (vx->dtype != RM_DTYPE_F32 || vw->ndim != 2 || vw->shape[1] != rm_cols(vx)) {
        rm_graph_fail(g, RM_ERR_ARG, "linear_ce: '%s' has %lld features but weight '%s' expects %lld", vx->name,
                      (long long)rm_cols(vx), vw->name, vw->ndim == 2 ? (long long)vw->shape[1] : -1LL);
        return -1;
    }
    if (vt->dtype != RM_DTYPE_I32 || vt->numel != rm_rows(vx) || vw->shape[0] < 1) {
        rm_graph_fail(g, RM_ERR_ARG, "linear_ce: targets '%s' must be i32 with one per row of '%s' (%lld)", vt->name,
                      vx->name, (long long)rm_rows(vx));
        return -1;
    }
    int ins[3] = {x, w, targets};
    int n = rm_op_node(g, &rm_op_linear_ce, ins, 3);
    if (n < 0) return -1;
    const int64_t one[1] = {1}, rows[1] = {rm_rows(vx)};
    rm_val loss = rm_node_output(g, n, RM_DTYPE_F32, 1, one);
    rm_node_output(g, n, RM_DTYPE_F32, 1, rows); /* lse: log-sum-exp of each row */
    return g->status == RM_OK ? loss : -1;
}

/* Rows per chunk: as many as LCE_SCRATCH_BYTES of logits hold, and at
 * most a quarter of the rows (a small model's scratch stays a quarter of
 * its logits, not all of them), but at least 16 (a GEMM of a few rows
 * wastes the machine) and at most N. */
static int64_t chunk_rows(int64_t N, int64_t V) {
    int64_t r = LCE_SCRATCH_BYTES / (V * (int64_t)sizeof(float));
    if (r > (N + 3) / 4) r = (N + 3) / 4;
    if (r < 16) r = 16;
    return r < N ? r : N;
}

/* x is (N,C), w is (V,C), targets (N); loss (1), lse (N). Scratch: z (R,V)
 * and the row losses (N), summed in order. */
RM_WIDE_VECTORS static void linear_ce_forward(const rm_kernel_ctx *c) {
    const float *x = c->in[0], *w = c->in[1];
    const int32_t *t = c->in[2];
    float *loss = c->out[0], *lse = c->out[1];
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]), V = c->vin[1]->shape[0], R = chunk_rows(N, V);
    float *z = c->work, *row_loss = z + R * V;
    for (int64_t n0 = 0; n0 < N; n0 += R) {
        const int64_t r = N - n0 < R ? N - n0 : R;
        rm_sgemm(0, 1, (int)r, (int)V, (int)C, 1.0f, x + n0 * C, (int)C, w, (int)C, 0.0f, z, (int)V);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < r; i++) {
            const float *zi = z + i * V;
            const float mx = rm_maxf(zi, V);
            float acc[RM_LANES] = {0};
            int64_t v = 0;
            for (; v + RM_LANES <= V; v += RM_LANES)
                for (int l = 0; l < RM_LANES; l++) acc[l] += rm_fast_expf(zi[v + l] - mx);
            for (int l = 0; v + l < V; l++) acc[l] += rm_fast_expf(zi[v + l] - mx);
            lse[n0 + i] = mx + logf(rm_lanes_combine(acc));
            row_loss[n0 + i] = lse[n0 + i] - zi[t[n0 + i]];
        }
    }
    double s = 0.0;
    for (int64_t n = 0; n < N; n++) s += row_loss[n];
    loss[0] = (float)(s / (double)N);
}

/* dloss (1); dx (N,C) and dW (V,C), either may be absent. */
RM_WIDE_VECTORS static void linear_ce_backward(const rm_kernel_ctx *c) {
    float *dx = c->din[0], *dw = c->din[1];
    if (!dx && !dw) return;
    const float *x = c->in[0], *w = c->in[1], *lse = c->out[1];
    const int32_t *t = c->in[2];
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]), V = c->vin[1]->shape[0], R = chunk_rows(N, V);
    const float scale = c->dout[0][0] / (float)N;
    float *z = c->work;
    for (int64_t n0 = 0; n0 < N; n0 += R) {
        const int64_t r = N - n0 < R ? N - n0 : R;
        rm_sgemm(0, 1, (int)r, (int)V, (int)C, 1.0f, x + n0 * C, (int)C, w, (int)C, 0.0f, z, (int)V);
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < r; i++) {
            float *zi = z + i * V;
            const float l = lse[n0 + i];
            for (int64_t v = 0; v < V; v++) zi[v] = scale * rm_fast_expf(zi[v] - l);
            zi[t[n0 + i]] -= scale;
        }
        /* dx[n0:n0+r] = dz W;  dW (+)= dz^T x[n0:n0+r] */
        if (dx)
            rm_sgemm(0, 0, (int)r, (int)C, (int)V, 1.0f, z, (int)V, w, (int)C, c->acc[0] ? 1.0f : 0.0f, dx + n0 * C,
                     (int)C);
        if (dw)
            rm_sgemm(1, 0, (int)V, (int)C, (int)r, 1.0f, z, (int)V, x + n0 * C, (int)C,
                     n0 > 0 || c->acc[1] ? 1.0f : 0.0f, dw, (int)C);
    }
}

static rm_status linear_ce_check(const rm_kernel_ctx *c, char *err, size_t errlen) {
    if (!c->in[2]) return RM_OK;
    return rm_check_ids(c->in[2], c->vin[2]->numel, c->vin[1]->shape[0], "target", c->vin[2]->name, err, errlen);
}

/* Forward: x W^T and the row sums. Backward: x W^T again, then dx and dW
 * for each that is needed (a frozen head has no dW). */
static double linear_ce_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *x = &vals[n->in[0]], *w = &vals[n->in[1]];
    const double gemm = 2.0 * (double)rm_rows(x) * (double)rm_cols(x) * (double)w->shape[0];
    const double nv = (double)rm_rows(x) * (double)w->shape[0];
    if (!backward) return gemm + 8.0 * nv;
    return gemm * (1 + rm_din_needed(n, vals, 0) + rm_din_needed(n, vals, 1)) + 8.0 * nv;
}

static size_t linear_ce_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    (void)threads;
    const rm_value *x = &vals[n->in[0]], *w = &vals[n->in[1]];
    const int64_t N = rm_rows(x), V = w->shape[0];
    return (size_t)(chunk_rows(N, V) * V + (backward ? 0 : N)) * sizeof(float);
}

const rm_op_def rm_op_linear_ce = {
    .kind = RM_OP_LINEAR_CE,
    .name = "linear_ce",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1) | RM_READS_IN(2) | RM_READS_OUT(1), /* x, W, targets, lse */
    .forward = linear_ce_forward,
    .backward = linear_ce_backward,
    .flops = linear_ce_flops,
    .workspace = linear_ce_workspace,
    .check = linear_ce_check,
};
