/* mul.c: elementwise product of two same-shaped tensors (SwiGLU's gate).
 * out = a * b, so by the product rule
 *   dL/da = dL/dout * b,   dL/db = dL/dout * a
 * and the backward reads both inputs (never the output). */
#include "ops/ops.h"

rm_val rm_mul(rm_graph *g, rm_val a, rm_val b) {
    const rm_val in[2] = {a, b};
    return rm_elementwise(g, &rm_op_mul, in, 2);
}

static void mul_forward(const rm_kernel_ctx *c) {
    // a is (N), b is (N), out is (N), all flattened
    const float *a = c->in[0], *b = c->in[1];
    float *out = c->out[0];
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = a[i] * b[i];
}

static void mul_backward(const rm_kernel_ctx *c) {
    // dout is (N); da = dout * b and db = dout * a are (N)
    const float *dout = c->dout[0];
    const int64_t N = c->vin[0]->numel;
    for (int k = 0; k < 2; k++) {
        float *d = c->din[k];
        if (!d) continue;
        const float *other = c->in[1 - k];
        const int acc = c->acc[k];
#pragma omp parallel for simd schedule(static)
        for (int64_t i = 0; i < N; i++) {
            const float v = dout[i] * other[i];
            d[i] = acc ? d[i] + v : v;
        }
    }
}

static double mul_flops(const rm_node *n, const rm_value *vals, int backward) {
    const double e = (double)vals[n->out[0]].numel;
    return backward ? 2.0 * e : e;
}

const rm_op_def rm_op_mul = {
    .kind = RM_OP_MUL,
    .name = "mul",
    .bwd_reads = RM_READS_IN(0) | RM_READS_IN(1),
    .forward = mul_forward,
    .backward = mul_backward,
    .flops = mul_flops,
    .workspace = NULL,
    .cheap = 1,
};
