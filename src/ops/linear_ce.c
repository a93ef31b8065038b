/* linear_ce.c: a language model's head and its loss in one op, so the
 * (N,V) logits never exist whole: loss = mean_n CE(x_n W^T, t_n).
 *
 * x is (N,C) (any leading dims), W is (V,C) as nn.Linear keeps it (lm_head
 * or a tied embedding), t (N) i32 targets in [0, V). Unfused, the head
 * keeps the logits (N,V), softmax_ce keeps the probabilities (N,V), and
 * the backward writes their gradient (N,V): three (N,V) arrays, 400 MB
 * each for 2048 tokens of a 49,152-token vocabulary. Here the vocabulary
 * goes through in panels of P rows of W (about 16 MiB of logits at a time),
 * with a running (online) log-sum-exp per row:
 *
 * forward, per panel p:   z = x W_p^T                       (N,P) scratch
 *                         m_n, s_n: running max and sum of exp(z - m)
 *                         z_{n,t_n} when t_n lies in the panel
 *                         then lse_n = m_n + log s_n (kept: N floats),
 *                         loss_n = lse_n - z_{n,t_n}
 * backward, per panel p:  z = x W_p^T                       (recomputed)
 *                         dz = (exp(z - lse) - onehot(t)) * dloss / N
 *                         dx += dz W_p                      (N,C), panels in order
 *                         dW_p = dz^T x                     (P,C)
 *
 * The price is one more x W^T in the backward; the memory, N*P floats of
 * scratch and N floats kept (the "cut cross-entropy" of Wijmans et al.
 * 2024 and Liger's fused linear cross-entropy do the same on GPUs). Every
 * sum runs in a fixed order (panels in order, row losses in order), so a
 * recomputed or re-run step gives the same bits. A frozen W may be kept in
 * BF16/F16 (rm_param_store): each panel of it is widened once a product
 * (rm_gemm_w), into the workspace after z. Under --precision bf16 the three
 * products take bf16 inputs (x may be kept in bf16; the logits and the
 * softmax stay fp32). */
#include "ops/ops.h"
#include "util/fastmath.h"
#include <math.h>

#define LCE_SCRATCH_BYTES ((int64_t)16 << 20) /* z of one panel */

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

/* Vocabulary rows per panel: as many as LCE_SCRATCH_BYTES of logits hold,
 * and at most a quarter of V (a small model's scratch stays a quarter of
 * its logits), but at least 16 (a GEMM of a few columns wastes the
 * machine) and at most V. */
static int64_t panel_rows(int64_t N, int64_t V) {
    int64_t p = LCE_SCRATCH_BYTES / (N * (int64_t)sizeof(float));
    if (p > (V + 3) / 4) p = (V + 3) / 4;
    if (p < 16) p = 16;
    return p < V ? p : V;
}

/* Rows [v0, v0 + p) of W, kept as wt (fp32 or 2-byte) */
static const void *w_rows(const void *w, rm_dtype wt, int64_t v0, int64_t C) {
    return (const char *)w + (size_t)v0 * (size_t)C * (wt == RM_DTYPE_F32 ? 4 : 2);
}

/* x is (N,C), w is (V,C), targets (N); loss (1), lse (N). Scratch: z (N,P),
 * the running max and sum and the target's logit (N each), the panel. */
RM_WIDE_VECTORS static void linear_ce_forward(const rm_kernel_ctx *c) {
    const void *x = c->in[0];
    const rm_dtype wt = c->vin[1]->store, xt = c->vin[0]->dtype;
    const int32_t *t = c->in[2];
    float *loss = c->out[0], *lse = c->out[1];
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]), V = c->vin[1]->shape[0], P = panel_rows(N, V);
    float *z = c->work, *mx = z + N * P, *sum = mx + N, *zt = sum + N, *panel = zt + N;
    for (int64_t n = 0; n < N; n++) mx[n] = -INFINITY, sum[n] = 0.0f;
    for (int64_t v0 = 0; v0 < V; v0 += P) {
        const int64_t p = V - v0 < P ? V - v0 : P;
        rm_op_gemm_w(c, 1, (int)N, (int)p, (int)C, 1.0f, x, xt, (int)C, w_rows(c->in[1], wt, v0, C), wt, (int)C,
                     0.0f, z, RM_DTYPE_F32, (int)p, panel);
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            const float *zn = z + n * p;
            const float m = fmaxf(mx[n], rm_maxf(zn, p));
            float acc[RM_LANES] = {0};
            int64_t v = 0;
            for (; v + RM_LANES <= p; v += RM_LANES)
                for (int l = 0; l < RM_LANES; l++) acc[l] += rm_fast_expf(zn[v + l] - m);
            for (int l = 0; v + l < p; l++) acc[l] += rm_fast_expf(zn[v + l] - m);
            sum[n] = sum[n] * rm_fast_expf(mx[n] - m) + rm_lanes_combine(acc);
            mx[n] = m;
            if (t[n] >= v0 && t[n] < v0 + p) zt[n] = zn[t[n] - v0];
        }
    }
    double total = 0.0;
    for (int64_t n = 0; n < N; n++) {
        lse[n] = mx[n] + logf(sum[n]);
        total += (double)(lse[n] - zt[n]);
    }
    loss[0] = (float)(total / (double)N);
}

/* dloss (1); dx (N,C) and dW (V,C), either may be absent. */
RM_WIDE_VECTORS static void linear_ce_backward(const rm_kernel_ctx *c) {
    float *dx = c->din[0], *dw = c->din[1];
    if (!dx && !dw) return;
    const void *x = c->in[0];
    const float *lse = c->out[1];
    const rm_dtype wt = c->vin[1]->store, xt = c->vin[0]->dtype; /* dW exists only for a trainable (fp32) W */
    const int32_t *t = c->in[2];
    const int64_t N = rm_rows(c->vin[0]), C = rm_cols(c->vin[0]), V = c->vin[1]->shape[0], P = panel_rows(N, V);
    const float scale = c->dout[0][0] / (float)N;
    float *z = c->work, *panel = z + N * P + 3 * N;
    for (int64_t v0 = 0; v0 < V; v0 += P) {
        const int64_t p = V - v0 < P ? V - v0 : P;
        const void *wp = w_rows(c->in[1], wt, v0, C);
        rm_op_gemm_w(c, 1, (int)N, (int)p, (int)C, 1.0f, x, xt, (int)C, wp, wt, (int)C, 0.0f, z, RM_DTYPE_F32,
                     (int)p, panel);
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            float *zn = z + n * p;
            const float l = lse[n];
            for (int64_t v = 0; v < p; v++) zn[v] = scale * rm_fast_expf(zn[v] - l);
            if (t[n] >= v0 && t[n] < v0 + p) zn[t[n] - v0] -= scale;
        }
        /* dx (+)= dz W_p;  dW_p = dz^T x */
        if (dx)
            rm_op_gemm_w(c, 0, (int)N, (int)C, (int)p, 1.0f, z, RM_DTYPE_F32, (int)p, wp, wt, (int)C,
                         v0 > 0 || c->acc[0] ? 1.0f : 0.0f, dx, RM_DTYPE_F32, (int)C, panel);
        if (dw)
            rm_op_gemm(c, 1, 0, (int)p, (int)C, (int)N, 1.0f, z, RM_DTYPE_F32, (int)p, x, xt, (int)C,
                       c->acc[1] ? 1.0f : 0.0f, dw + v0 * C, RM_DTYPE_F32, (int)C);
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

/* z (N,P), three (N) rows of the forward, and the panel a W kept in 2
 * bytes is widened into (the larger of the two products') */
static size_t linear_ce_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    (void)threads, (void)backward;
    const rm_value *x = &vals[n->in[0]], *w = &vals[n->in[1]];
    const int64_t N = rm_rows(x), V = w->shape[0], C = w->shape[1], P = panel_rows(N, V);
    size_t panel = 0;
    if (w->store != RM_DTYPE_F32 && !n->bf16) { /* bf16 products read W as it is */
        const size_t fwd = rm_gemm_w_scratch(1, (int)P, (int)C), bwd = rm_gemm_w_scratch(0, (int)C, (int)P);
        panel = fwd > bwd ? fwd : bwd;
    }
    return ((size_t)(N * P + 3 * N) + panel) * sizeof(float);
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
    .half_ins = RM_READS_IN(1),
    .matmul = 1,
    .bf16_ins = RM_READS_IN(0),
};
