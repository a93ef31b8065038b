/* relu.c: out = max(x, 0). The derivative is 1 where x > 0 and 0 elsewhere
 * (0 at the kink, by convention), and x > 0 exactly when out > 0: so the
 * backward reads the output and the input can be freed after the forward. */
#include "ops/ops.h"

rm_val rm_relu(rm_graph *g, rm_val x) { return rm_elementwise(g, &rm_op_relu, &x, 1); }

static void relu_forward(const rm_kernel_ctx *c) {
    // x is (N), out is (N), flattened
    const float *x = c->in[0];
    float *out = c->out[0];
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_backward(const rm_kernel_ctx *c) {
    // out is (N), dout is (N), dx is (N)
    float *dx = c->din[0];
    if (!dx) return;
    const float *out = c->out[0], *dout = c->dout[0];
    const int64_t N = c->vin[0]->numel;
    const int acc = c->acc[0];
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float d = out[i] > 0.0f ? dout[i] : 0.0f;
        dx[i] = acc ? dx[i] + d : d;
    }
}

static double relu_flops(const rm_node *n, const rm_value *vals, int backward) {
    (void)backward;
    return (double)vals[n->in[0]].numel;
}

const rm_op_def rm_op_relu = {
    .kind = RM_OP_RELU,
    .name = "relu",
    .bwd_reads = RM_READS_OUT(0),
    .forward = relu_forward,
    .backward = relu_backward,
    .flops = relu_flops,
    .workspace = NULL,
};
