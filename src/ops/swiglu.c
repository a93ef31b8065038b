/* swiglu.c: the gated unit of LLaMA's MLP (Shazeer 2020, "SwiGLU"), one op
 * for what would be silu(gate) * up:
 *   out = silu(g) * u,   silu(g) = g s,   s = sigmoid(g)
 * By the product rule, with silu'(g) = s (1 + g (1 - s)) (silu.c):
 *   du = dout * silu(g),   dg = dout * u * silu'(g)
 * One pass over memory each way instead of two (SiLU, then the product), and
 * silu(g) is never stored: the backward recomputes it from g. */
#include "ops/ops.h"
#include "util/fastmath.h"

rm_val rm_swiglu(rm_graph *g, rm_val gate, rm_val up) {
    const rm_val in[2] = {gate, up};
    return rm_elementwise(g, &rm_op_swiglu, in, 2);
}

RM_WIDE_VECTORS static void swiglu_span(const float *gt, const float *up, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = gt[i] * rm_sigmoidf(gt[i]) * up[i];
}

RM_WIDE_VECTORS static void swiglu_grad_span(const float *gt, const float *up, const float *dout, float *dg, float *du,
                                             int64_t n, int ag, int au) {
    for (int64_t i = 0; i < n; i++) {
        const float x = gt[i], s = rm_sigmoidf(x), d = dout[i];
        if (du) du[i] = au ? du[i] + d * x * s : d * x * s;
        if (dg) {
            const float v = d * up[i] * s * (1.0f + x * (1.0f - s));
            dg[i] = ag ? dg[i] + v : v;
        }
    }
}

/* In chunks of floats: under --precision bf16 gate, up (projections'
 * outputs) and out (read by the down projection) may be kept in bf16. */
static void swiglu_forward(const rm_kernel_ctx *c) {
    // gate is (N), up is (N), out is (N), all flattened
    const rm_dtype gt = c->vin[0]->dtype, ut = c->vin[1]->dtype, yt = c->vout[0]->dtype;
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < N; i0 += RM_ACT_CHUNK) {
        const int64_t k = N - i0 < RM_ACT_CHUNK ? N - i0 : RM_ACT_CHUNK;
        float gb[RM_ACT_CHUNK], ub[RM_ACT_CHUNK], yb[RM_ACT_CHUNK], *y = rm_act_dst(c->out[0], yt, i0, yb);
        swiglu_span(rm_act_read(c->in[0], gt, i0, k, gb), rm_act_read(c->in[1], ut, i0, k, ub), y, k);
        rm_act_write(c->out[0], yt, i0, k, y);
    }
}

static void swiglu_backward(const rm_kernel_ctx *c) {
    // dout is (N); dgate and dup are (N)
    float *dg = c->din[0], *du = c->din[1];
    const int64_t N = c->vin[0]->numel;
    if (!dg && !du) return;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < N; i0 += RM_ACT_CHUNK) {
        const int64_t k = N - i0 < RM_ACT_CHUNK ? N - i0 : RM_ACT_CHUNK;
        float gb[RM_ACT_CHUNK], ub[RM_ACT_CHUNK];
        swiglu_grad_span(rm_act_read(c->in[0], c->vin[0]->dtype, i0, k, gb),
                         rm_act_read(c->in[1], c->vin[1]->dtype, i0, k, ub), c->dout[0] + i0, dg ? dg + i0 : NULL,
                         du ? du + i0 : NULL, k, c->acc[0], c->acc[1]);
    }
}

static double swiglu_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->in[0]].numel;
    return backward ? 14.0 * e : 8.0 * e; /* counting exp as ~5 */
}

const rm_op_def rm_op_swiglu = {
    .kind = RM_OP_SWIGLU,
    .name = "swiglu",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1),
    .forward = swiglu_forward,
    .backward = swiglu_backward,
    .flops = swiglu_flops,
    .workspace = NULL,
    .cheap = 1,
    .bf16_ins = RM_READS_IN(0) | RM_READS_IN(1),
    .bf16_outs = 1u,
};
