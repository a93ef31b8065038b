/* softmax_ce.c: softmax followed by the cross-entropy loss, fused.
 *
 * For row n with logits z (V numbers) and target class t:
 *   probs_v = exp(z_v - max z) / sum_u exp(z_u - max z)
 *             (subtracting the max changes nothing mathematically but keeps
 *              exp from overflowing; the largest term becomes exp(0) = 1)
 *   loss_n  = -log probs_t = log(sum_u exp(z_u - max z)) - (z_t - max z)
 *   loss    = (1/N) sum_n loss_n
 * Fusing the two makes the gradient simple and exact:
 *   dloss/dz_v = (probs_v - [v == t]) / N
 * so the backward reads only probs and the targets, never the logits.
 *
 * With an ignored id (rm_softmax_ce_ignore, e.g. a PAD target), rows whose
 * target is that id contribute nothing and N counts only the others (as
 * PyTorch's ignore_index); with no row left the loss is 0. The ignored id
 * is itself in [0, V).
 *
 * Every target must lie in [0, V): softmax_ce_check runs on the caller's
 * targets before each step, so z[targets[n]] never reads out of the row.
 */
#include "ops/ops.h"
#include "util/fastmath.h"
#include <math.h>

static rm_val softmax_ce_build(rm_graph *g, rm_val logits, rm_val targets, int ignore, int32_t ignore_id) {
    if (!rm_val_ok(g, logits, "softmax_ce") || !rm_val_ok(g, targets, "softmax_ce")) return -1;
    const rm_value *vl = &g->vals[logits], *vt = &g->vals[targets];
    if (vl->dtype != RM_DTYPE_F32 || vt->dtype != RM_DTYPE_I32) {
        rm_graph_fail(g, RM_ERR_ARG, "softmax_ce: logits '%s' must be f32 and targets '%s' i32",
                      vl->name, vt->name);
        return -1;
    }
    /* targets have the leading dims of logits: (..,V) and (..) */
    int same = vt->ndim == vl->ndim - 1;
    for (int d = 0; same && d < vt->ndim; d++) same = vt->shape[d] == vl->shape[d];
    if (vl->ndim == 1) same = vt->numel == 1; /* one row: a single target */
    if (!same) {
        rm_graph_fail(g, RM_ERR_ARG, "softmax_ce: targets '%s' must have the leading dims of logits '%s'",
                      vt->name, vl->name);
        return -1;
    }
    if (ignore && (ignore_id < 0 || ignore_id >= rm_cols(vl))) {
        rm_graph_fail(g, RM_ERR_ARG, "softmax_ce: the ignored id %d must be a class of logits '%s' (0..%lld)",
                      (int)ignore_id, vl->name, (long long)rm_cols(vl) - 1);
        return -1;
    }
    int ins[2] = {logits, targets};
    int n = rm_op_node(g, &rm_op_softmax_ce, ins, 2);
    if (n < 0) return -1;
    const int64_t one[1] = {1};
    const int64_t probs_shape[2] = {rm_rows(vl), rm_cols(vl)};
    g->nodes[n].iarg[0] = ignore;
    g->nodes[n].iarg[1] = ignore_id;
    rm_val loss = rm_node_output(g, n, RM_DTYPE_F32, 1, one);
    rm_node_output(g, n, RM_DTYPE_F32, 2, probs_shape); /* probs */
    return g->status == RM_OK ? loss : -1;
}

rm_val rm_softmax_ce(rm_graph *g, rm_val logits, rm_val targets) {
    return softmax_ce_build(g, logits, targets, 0, 0);
}

rm_val rm_softmax_ce_ignore(rm_graph *g, rm_val logits, rm_val targets, int32_t ignore_id) {
    return softmax_ce_build(g, logits, targets, 1, ignore_id);
}

/* Whether row n counts, and how many rows count (N without an ignored id). */
static int ce_counts(const rm_kernel_ctx *c, int32_t t) { return !c->node->iarg[0] || t != c->node->iarg[1]; }
static int64_t ce_rows(const rm_kernel_ctx *c, const int32_t *targets, int64_t N) {
    int64_t k = 0;
    for (int64_t n = 0; n < N; n++) k += ce_counts(c, targets[n]);
    return k;
}

/* The mean over rows is summed in a fixed number of chunks (not one chunk
 * per thread), so the loss is bitwise the same for any thread count. */
#define CE_CHUNKS 64

static void softmax_ce_forward(const rm_kernel_ctx *c) {
    // logits is (N,V), targets is (N) i32; loss is (1), probs is (N,V)
    const float *logits = c->in[0];
    const int32_t *targets = c->in[1];
    float *loss = c->out[0], *probs = c->out[1];
    const int64_t N = rm_rows(c->vin[0]), V = rm_cols(c->vin[0]);
    double partial[CE_CHUNKS] = {0};
    const int64_t per = (N + CE_CHUNKS - 1) / CE_CHUNKS;
#pragma omp parallel for schedule(static)
    for (int k = 0; k < CE_CHUNKS; k++) {
        const int64_t n0 = k * per, n1 = n0 + per < N ? n0 + per : N;
        double s = 0.0;
        for (int64_t n = n0; n < n1; n++) {
            const float *z = logits + n * V;
            float *p = probs + n * V;
            const float mx = rm_maxf(z, V);
            for (int64_t v = 0; v < V; v++) p[v] = rm_fast_expf(z[v] - mx);
            const float sum = rm_sumf(p, V);
            const float inv = 1.0f / sum;
            for (int64_t v = 0; v < V; v++) p[v] *= inv;
            /* from the log-sum-exp, not log(p_t): p_t may underflow to 0 */
            if (ce_counts(c, targets[n])) s += (double)logf(sum) - (double)(z[targets[n]] - mx);
        }
        partial[k] = s;
    }
    double total = 0.0;
    for (int k = 0; k < CE_CHUNKS; k++) total += partial[k];
    const int64_t rows = ce_rows(c, targets, N);
    loss[0] = rows ? (float)(total / (double)rows) : 0.0f;
}

static void softmax_ce_backward(const rm_kernel_ctx *c) {
    // probs is (N,V), targets is (N) i32, dloss is (1); dlogits is (N,V)
    float *dlogits = c->din[0];
    if (!dlogits) return;
    const float *probs = c->out[1];
    const int32_t *targets = c->in[1];
    const int64_t N = rm_rows(c->vin[0]), V = rm_cols(c->vin[0]);
    const int64_t rows = ce_rows(c, targets, N);
    const float scale = rows ? c->dout[0][0] / (float)rows : 0.0f;
    const int acc = c->acc[0];
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; n++) {
        const float *p = probs + n * V;
        float *d = dlogits + n * V;
        const int64_t t = targets[n];
        const float sc = ce_counts(c, targets[n]) ? scale : 0.0f;
        for (int64_t v = 0; v < V; v++) {
            const float g = sc * (p[v] - (v == t ? 1.0f : 0.0f));
            d[v] = acc ? d[v] + g : g;
        }
    }
}

static rm_status softmax_ce_check(const rm_kernel_ctx *c, char *err, size_t errlen) {
    // logits is (N,V), targets is (N) i32 (NULL unless an input)
    if (!c->in[1]) return RM_OK;
    return rm_check_ids(c->in[1], c->vin[1]->numel, rm_cols(c->vin[0]), "target", c->vin[1]->name, err, errlen);
}

static double softmax_ce_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->in[0]].numel;
    /* forward: max, subtract, exp (~5), sum, scale; backward: subtract, scale */
    return backward ? 3.0 * e : 9.0 * e;
}

const rm_op_def rm_op_softmax_ce = {
    .kind = RM_OP_SOFTMAX_CE,
    .name = "softmax_ce",
    .bwd_reads = RM_READS_IN(1) | RM_READS_OUT(1), /* targets and probs, not logits */
    .forward = softmax_ce_forward,
    .backward = softmax_ce_backward,
    .flops = softmax_ce_flops,
    .workspace = NULL,
    .check = softmax_ce_check,
};
