/* gelu.c: the Gaussian Error Linear Unit (Hendrycks & Gimpel 2016), in the
 * tanh approximation GPT-2 uses:
 *   gelu(x) = 0.5 x (1 + tanh(u)),   u = sqrt(2/pi) (x + 0.044715 x^3)
 * computed as x s with s = sigmoid(2u), since 0.5 (1 + tanh u) = sigmoid(2u)
 * (one exp and one division). Its derivative, by the product rule and
 * tanh' = 1 - tanh^2 = 4 s (1 - s):
 *   gelu'(x) = s + 2 x s (1 - s) sqrt(2/pi) (1 + 3*0.044715 x^2)
 * The backward needs x (not the output: gelu is not invertible cheaply).
 */
#include "ops/ops.h"
#include "util/fastmath.h"
#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

rm_val rm_gelu(rm_graph *g, rm_val x) { return rm_elementwise(g, &rm_op_gelu, &x, 1); }

/* sigmoid(2u) = 0.5 (1 + tanh u) */
static inline float gelu_s(float v) { return rm_sigmoidf(2.0f * GELU_K * (v + GELU_A * v * v * v)); }

RM_WIDE_VECTORS static void gelu_span(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * gelu_s(x[i]);
}

RM_WIDE_VECTORS static void gelu_grad_span(const float *x, const float *dout, float *dx, int64_t n, int acc) {
    for (int64_t i = 0; i < n; i++) {
        const float v = x[i], s = gelu_s(v);
        const float du = GELU_K * (1.0f + 3.0f * GELU_A * v * v);
        const float grad = s + 2.0f * v * s * (1.0f - s) * du;
        const float d = grad * dout[i];
        dx[i] = acc ? dx[i] + d : d;
    }
}

/* In chunks of floats: under --precision bf16, x (a projection's output)
 * and out (read by the next projection) may be kept in bf16 (rm_act_*);
 * in fp32 the chunks are views of x and out themselves. */
static void gelu_forward(const rm_kernel_ctx *c) {
    // x is (N), out is (N), flattened
    const rm_dtype xt = c->vin[0]->dtype, yt = c->vout[0]->dtype;
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < N; i0 += RM_ACT_CHUNK) {
        const int64_t k = N - i0 < RM_ACT_CHUNK ? N - i0 : RM_ACT_CHUNK;
        float xb[RM_ACT_CHUNK], yb[RM_ACT_CHUNK], *y = rm_act_dst(c->out[0], yt, i0, yb);
        gelu_span(rm_act_read(c->in[0], xt, i0, k, xb), y, k);
        rm_act_write(c->out[0], yt, i0, k, y);
    }
}

static void gelu_backward(const rm_kernel_ctx *c) {
    // x is (N), dout is (N), dx is (N)
    if (!c->din[0]) return;
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for schedule(static)
    for (int64_t i0 = 0; i0 < N; i0 += RM_ACT_CHUNK) {
        const int64_t k = N - i0 < RM_ACT_CHUNK ? N - i0 : RM_ACT_CHUNK;
        float xb[RM_ACT_CHUNK];
        gelu_grad_span(rm_act_read(c->in[0], c->vin[0]->dtype, i0, k, xb), c->dout[0] + i0, c->din[0] + i0, k,
                       c->acc[0]);
    }
}

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
