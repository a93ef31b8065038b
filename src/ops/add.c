/* add.c: elementwise sum of two same-shaped tensors (the residual stream).
 * out = a + b, so dL/da = dL/db = dL/dout: the backward reads no forward
 * tensor, which lets the planner free both inputs right away. */
#include "ops/ops.h"
#include <string.h>

rm_val rm_add(rm_graph *g, rm_val a, rm_val b) {
    const rm_val in[2] = {a, b};
    return rm_elementwise(g, &rm_op_add, in, 2);
}

static void add_forward(const rm_kernel_ctx *c) {
    // a is (N), b is (N), out is (N), all flattened
    const float *a = c->in[0], *b = c->in[1];
    float *out = c->out[0];
    const int64_t N = c->vin[0]->numel;
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) out[i] = a[i] + b[i];
}

static void add_backward(const rm_kernel_ctx *c) {
    // dout is (N); da and db are (N)
    const float *dout = c->dout[0];
    const int64_t N = c->vin[0]->numel;
    for (int k = 0; k < 2; k++) {
        float *d = c->din[k];
        if (!d) continue;
        if (c->acc[k]) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < N; i++) d[i] += dout[i];
        } else {
            memmove(d, dout, (size_t)N * sizeof *d); /* memmove: safe if an executor aliases them */
        }
    }
}

static double add_flops(const rm_node *n, const rm_value *vals, int backward) {
    (void)backward;
    return (double)vals[n->out[0]].numel;
}

const rm_op_def rm_op_add = {
    .kind = RM_OP_ADD,
    .name = "add",
    .bwd_reads = 0,
    .forward = add_forward,
    .backward = add_backward,
    .flops = add_flops,
    .workspace = NULL,
};
