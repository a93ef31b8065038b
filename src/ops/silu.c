/* silu.c: the Sigmoid Linear Unit (Elfwing et al. 2017; "swish"), the
 * activation of SwiGLU:
 *   silu(x) = x * s,   s = sigmoid(x) = 1 / (1 + exp(-x))
 * With s' = s (1 - s), the product rule gives
 *   silu'(x) = s + x s (1 - s) = s (1 + x (1 - s))
 * The backward reads x (recomputing s is cheaper than storing it).
 */
#include "ops/pointwise.h"

rm_val rm_silu(rm_graph *g, rm_val x) { return rm_elementwise(g, &rm_op_silu, &x, 1); }

/* silu(x) = x s */
static inline float silu_y(float v) { return v * rm_sigmoidf(v); }

/* silu'(x) dout = dout s (1 + x (1 - s)) */
static inline float silu_dx(float v, float dout) {
    const float s = rm_sigmoidf(v);
    return dout * s * (1.0f + v * (1.0f - s));
}

RM_POINTWISE_KERNELS(silu, silu_y, silu_dx)

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
