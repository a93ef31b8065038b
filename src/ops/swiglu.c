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

RM_WIDE_VECTORS static void swiglu_forward(const rm_kernel_ctx *c) {
    // gate is (N), up is (N), out is (N), all flattened
    const float *gt = c->in[0], *up = c->in[1];
    float *out = c->out[0];
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = gt[i] * rm_sigmoidf(gt[i]) * up[i];
}

RM_WIDE_VECTORS static void swiglu_backward(const rm_kernel_ctx *c) {
    // dout is (N); dgate and dup are (N)
    const float *gt = c->in[0], *up = c->in[1], *dout = c->dout[0];
    float *dg = c->din[0], *du = c->din[1];
    const int64_t N = c->vin[0]->numel;
    const int ag = c->acc[0], au = c->acc[1];
    if (!dg && !du) return;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float x = gt[i], s = rm_sigmoidf(x), d = dout[i];
        if (du) du[i] = au ? du[i] + d * x * s : d * x * s;
        if (dg) {
            const float v = d * up[i] * s * (1.0f + x * (1.0f - s));
            dg[i] = ag ? dg[i] + v : v;
        }
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
};
