/* add.c: elementwise sum of two same-shaped tensors (the residual stream).
 * out = a + b, so dL/da = dL/db = dL/dout: the backward reads no forward
 * tensor, which lets the planner free both inputs right away. */
#include "ops/ops.h"
#include <string.h>

rm_val rm_add(rm_graph *g, rm_val a, rm_val b) {
    if (!rm_val_ok(g, a, "add") || !rm_val_ok(g, b, "add")) return -1;
    const rm_value *va = &g->vals[a], *vb = &g->vals[b];
    if (va->dtype != RM_DTYPE_F32 || vb->dtype != RM_DTYPE_F32) {
        rm_graph_fail(g, RM_ERR_ARG, "add: '%s' and '%s' must both be f32", va->name, vb->name);
        return -1;
    }
    int same = va->ndim == vb->ndim;
    for (int d = 0; same && d < va->ndim; d++) same = va->shape[d] == vb->shape[d];
    if (!same) {
        rm_graph_fail(g, RM_ERR_ARG, "add: '%s' and '%s' have different shapes", va->name, vb->name);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    int nd = va->ndim;
    memcpy(shape, va->shape, (size_t)nd * sizeof *shape);
    int ins[2] = {a, b};
    int n = rm_node_new(g, RM_OP_ADD, ins, 2);
    if (n < 0) return -1;
    return rm_node_output(g, n, RM_DTYPE_F32, nd, shape);
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
    .name = "add",
    .bwd_reads = 0,
    .forward = add_forward,
    .backward = add_backward,
    .flops = add_flops,
    .workspace = NULL,
};
