/* gelu.c: the Gaussian Error Linear Unit (Hendrycks & Gimpel 2016), in the
 * tanh approximation GPT-2 uses:
 *   gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
 * computed as x s with s = sigmoid(2u), since 0.5 (1 + tanh u) = sigmoid(2u)
 * (one exp and one division). Its derivative, by the product rule and
 * tanh' = 1 - tanh^2 = 4 s (1 - s):
 *   gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3*0.044715 x^2)
 * The backward needs x (not the output: gelu is not invertible cheaply).
 */
#include "ops/pointwise.h"
#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

rm_val rm_gelu(rm_graph *g, rm_val x) { return rm_elementwise(g, &rm_op_gelu, &x, 1); }

/* sigmoid(2u) = 0.5 (1 + tanh u) */
static inline float gelu_s(float v) { return rm_sigmoidf(2.0f * GELU_K * (v + GELU_A * v * v * v)); }

/* gelu(x) = x s */
static inline float gelu_y(float v) { return v * gelu_s(v); }

/* gelu'(x) dout, gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3*0.044715 x^2) */
static inline float gelu_dx(float v, float dout) {
    const float s = gelu_s(v);
    const float du = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
    const float grad = s + 2.0f * v * s * (1.0f - s) * du;
    return grad * dout;
}

RM_POINTWISE_KERNELS(gelu, gelu_y, gelu_dx)

static double gelu_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->in[0]].numel;
    return backward ? 16.0 * e : 10.0 * e; /* counting tanh as ~5 */
}

const rm_op_def rm_op_gelu = {
    .kind = RM_OP_GELU,
    .name = "gelu",
    .bwd_reads = RM_READS_IN(0),
    .forward = gelu_forward,
    .backward = gelu_backward,
    .flops = gelu_flops,
    .workspace = NULL,
    .cheap = 1,
    .bf16_ins = RM_READS_IN(0),
    .bf16_outs = 1u,
};
