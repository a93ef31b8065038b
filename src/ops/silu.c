/* silu.c: the Sigmoid Linear Unit (Elfwing et al. 2017; "swish"), the
 * activation of SwiGLU:
 *   silu(x) = x * s,   s = sigmoid(x) = 1 / (1 + exp(-x))
 * With s' = s (1 - s), the product rule gives
 *   silu'(x) = s + x s (1 - s) = s (1 + x (1 - s))
 * The backward reads x (recomputing s is cheaper than storing it).
 */
#include "ops/ops.h"
#include "util/fastmath.h"

rm_val rm_silu(rm_graph *g, rm_val x) { return rm_elementwise(g, &rm_op_silu, &x, 1); }

RM_WIDE_VECTORS static void silu_forward(const rm_kernel_ctx *c) {
    // x is (N), out is (N), flattened
    const float *x = c->in[0];
    float *out = c->out[0];
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = x[i] * rm_sigmoidf(x[i]);
}

RM_WIDE_VECTORS static void silu_backward(const rm_kernel_ctx *c) {
    // x is (N), dout is (N), dx is (N)
    float *dx = c->din[0];
    if (!dx) return;
    const float *x = c->in[0], *dout = c->dout[0];
    const int64_t N = c->vin[0]->numel;
    const int acc = c->acc[0];
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float s = rm_sigmoidf(x[i]);
        const float d = dout[i] * s * (1.0f + x[i] * (1.0f - s));
        dx[i] = acc ? dx[i] + d : d;
    }
}

static double silu_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->in[0]].numel;
    return backward ? 10.0 * e : 7.0 * e; /* counting exp as ~5 */
}

const rm_op_def rm_op_silu = {
    .kind = RM_OP_SILU,
    .name = "silu",
    .bwd_reads = RM_READS_IN(0),
    .forward = silu_forward,
    .backward = silu_backward,
    .flops = silu_flops,
    .workspace = NULL,
    .cheap = 1,
};
