/* linear.c: y = x W^T + b, the fully connected layer (PyTorch's nn.Linear
 * layout: W is (OUT, IN), so a file's weights load unchanged). A frozen W
 * may be kept in BF16/F16 (rm_param_store): its fp32 products widen it
 * panel by panel into the workspace (rm_gemm_w). Under --precision bf16
 * its three products take bf16 inputs (rm_op_gemm: x, W and dy rounded as
 * they are packed; a bf16 W used as it is), x may be kept in bf16 and so
 * may y (then the bias is added before y is rounded, as autocast's addmm). */
#include "ops/ops.h"

rm_val rm_linear(rm_graph *g, rm_val x, rm_val w, rm_val b) {
    if (!rm_val_ok(g, x, "linear") || !rm_val_ok(g, w, "linear")) return -1;
    if (b >= 0 && !rm_val_ok(g, b, "linear")) return -1;
    const rm_value *vx = &g->vals[x], *vw = &g->vals[w];
    if (vw->ndim != 2 || vx->dtype != RM_DTYPE_F32 || rm_cols(vx) != vw->shape[1]) {
        rm_graph_fail(g, RM_ERR_ARG, "linear: '%s' has %lld features but weight '%s' expects %lld",
                      vx->name, (long long)rm_cols(vx), vw->name, vw->ndim == 2 ? (long long)vw->shape[1] : -1LL);
        return -1;
    }
    if (b >= 0 && (g->vals[b].ndim != 1 || g->vals[b].shape[0] != vw->shape[0])) {
        rm_graph_fail(g, RM_ERR_ARG, "linear: bias '%s' must have shape [%lld]", g->vals[b].name,
                      (long long)vw->shape[0]);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    int ndim = vx->ndim;
    for (int i = 0; i < ndim; i++) shape[i] = vx->shape[i];
    shape[ndim - 1] = vw->shape[0];
    int in[3] = {x, w, b};
    int n = rm_op_node(g, &rm_op_linear, in, b >= 0 ? 3 : 2);
    return rm_node_output(g, n, RM_DTYPE_F32, ndim, shape);
}

/* x is (N,IN), w is (OUT,IN), b is (OUT), y is (N,OUT) */
static void linear_forward(const rm_kernel_ctx *c) {
    const float *b = c->in[2];
    const void *w = c->in[1];
    const rm_dtype yt = c->vout[0]->dtype;
    int N = (int)rm_rows(c->vin[0]), IN = (int)rm_cols(c->vin[0]), OUT = (int)c->vin[1]->shape[0];
    if (b && c->node->bf16 && yt == RM_DTYPE_BF16) { /* the bias added as y is rounded: y is written once */
        rm_gemm_bf16_bias(N, OUT, IN, c->in[0], c->vin[0]->dtype, IN, w, c->vin[1]->store, IN, b, c->out[0], OUT,
                          &c->mm);
        return;
    }
    if (b) {
        /* start from the bias, then accumulate x W^T on top (beta = 1) */
        #pragma omp parallel for schedule(static)
        for (int i = 0; i < N; i++) {
            float *row = (float *)c->out[0] + (size_t)i * OUT;
            if (yt == RM_DTYPE_F32) for (int o = 0; o < OUT; o++) row[o] = b[o];
            else rm_act_write(c->out[0], yt, (int64_t)i * OUT, OUT, b);
        }
    }
    rm_op_gemm_w(c, 1, N, OUT, IN, 1.0f, c->in[0], c->vin[0]->dtype, IN, w, c->vin[1]->store, IN, b ? 1.0f : 0.0f,
                 c->out[0], yt, OUT, c->work);
}

/* Given dy (N,OUT):
 *   dx = dy W        (N,OUT)x(OUT,IN)
 *   dW += dy^T x     (OUT,N)x(N,IN)
 *   db += sum_i dy[i] */
static void linear_backward(const rm_kernel_ctx *c) {
    const float *dy = c->dout[0];
    const void *w = c->in[1]; /* dW exists only for a trainable (fp32) W */
    int N = (int)rm_rows(c->vin[0]), IN = (int)rm_cols(c->vin[0]), OUT = (int)c->vin[1]->shape[0];
    if (c->din[0])
        rm_op_gemm_w(c, 0, N, IN, OUT, 1.0f, dy, RM_DTYPE_F32, OUT, w, c->vin[1]->store, IN,
                     c->acc[0] ? 1.0f : 0.0f, c->din[0], RM_DTYPE_F32, IN, c->work);
    if (c->din[1])
        rm_op_gemm(c, 1, 0, OUT, IN, N, 1.0f, dy, RM_DTYPE_F32, OUT, c->in[0], c->vin[0]->dtype, IN,
                   c->acc[1] ? 1.0f : 0.0f, c->din[1], RM_DTYPE_F32, IN);
    if (c->din[2]) {
        float *db = c->din[2];
        /* column blocks in parallel, rows summed in order inside each block:
         * contiguous loads, and the same sum for any thread count */
        #pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OUT; o0 += 64) {
            int ob = OUT - o0 < 64 ? OUT - o0 : 64;
            float s[64];
            for (int o = 0; o < ob; o++) s[o] = c->acc[2] ? db[o0 + o] : 0.0f;
            for (int i = 0; i < N; i++) {
                const float *row = dy + (size_t)i * OUT + o0;
                for (int o = 0; o < ob; o++) s[o] += row[o];
            }
            for (int o = 0; o < ob; o++) db[o0 + o] = s[o];
        }
    }
}

/* Forward 2 N IN OUT; the backward 2 N IN OUT for each of dx and dW that
 * is needed (a frozen weight has no dW; the first layer no dx). */
static double linear_flops(const rm_node *n, const rm_value *vals, int backward) {
    const rm_value *x = &vals[n->in[0]], *w = &vals[n->in[1]];
    double mnk = (double)rm_rows(x) * (double)rm_cols(x) * (double)w->shape[0];
    if (!backward) return 2.0 * mnk;
    return 2.0 * mnk * (rm_din_needed(n, vals, 0) + rm_din_needed(n, vals, 1));
}

/* dx reads W (a parameter, always there); only dW reads x. */
static unsigned linear_bwd_reads(const rm_node *n, const rm_value *vals) {
    return RM_READS_IN(1) | (rm_din_needed(n, vals, 1) ? RM_READS_IN(0) : 0u);
}

/* The panel W is widened into, for a W kept in 2 bytes; nothing for fp32
 * nor under bf16 (its products read W as it is). */
static size_t linear_workspace(const rm_node *n, const rm_value *vals, int backward, int threads) {
    (void)threads;
    const rm_value *w = &vals[n->in[1]];
    if (w->store == RM_DTYPE_F32 || n->bf16) return 0;
    const int OUT = (int)w->shape[0], IN = (int)w->shape[1];
    return (backward ? rm_gemm_w_scratch(0, IN, OUT) : rm_gemm_w_scratch(1, OUT, IN)) * sizeof(float);
}

const rm_op_def rm_op_linear = {
    .kind = RM_OP_LINEAR,
    .name = "linear",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1),
    .bwd_reads_of = linear_bwd_reads,
    .forward = linear_forward,
    .backward = linear_backward,
    .flops = linear_flops,
    .workspace = linear_workspace,
    .half_ins = RM_READS_IN(1),
    .matmul = 1,
    .bf16_ins = RM_READS_IN(0),
    .bf16_outs = 1u,
};
