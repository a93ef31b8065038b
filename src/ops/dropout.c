/* dropout.c: inverted dropout (Srivastava et al. 2014).
 *
 * In training each element is kept with probability 1-p and scaled by
 * 1/(1-p), so E[out] = x and evaluation needs no rescaling: with train == 0
 * (or p == 0) dropout is the identity.
 *
 * The mask is never stored. Element i of node k at step s is kept iff
 *   rm_philox_uniform(seed, k, s, row0 * E + i) >= p
 * where the first dimension of x is the batch, E the elements per batch
 * row and row0 the global batch row of this micro-batch's first row
 * (rm_step_micro): a pure function of the element's place in the global
 * batch, so a recompute of the forward and the backward both regenerate
 * exactly the mask the first forward used, the backward reads no forward
 * tensor at all (bwd_reads = 0), and splitting a batch into micro-batches
 * leaves every mask as it was.
 */
#include "ops/ops.h"
#include <string.h>

rm_val rm_dropout(rm_graph *g, rm_val x, float p) {
    if (!rm_val_ok(g, x, "dropout")) return -1;
    const rm_value *vx = &g->vals[x];
    if (vx->dtype != RM_DTYPE_F32) {
        rm_graph_fail(g, RM_ERR_ARG, "dropout: '%s' must be f32", vx->name);
        return -1;
    }
    if (!(p >= 0.0f && p < 1.0f)) { /* written so NaN fails too */
        rm_graph_fail(g, RM_ERR_ARG, "dropout: p = %g must be in [0, 1)", (double)p);
        return -1;
    }
    int64_t shape[RM_MAX_DIMS];
    const int nd = vx->ndim;
    memcpy(shape, vx->shape, (size_t)nd * sizeof *shape);
    int n = rm_op_node(g, &rm_op_dropout, &x, 1);
    if (n < 0) return -1;
    g->nodes[n].farg[0] = p;
    return rm_node_output(g, n, RM_DTYPE_F32, nd, shape);
}

/* y = mask(i) * scale * v, the same map for forward (v = x) and backward
 * (v = dout): dropout is linear, its Jacobian is the diagonal of mask*scale.
 * The mask is keyed by c's node: LoRA's op (lora.c) drops its input with it. */
void rm_dropout_apply(const rm_kernel_ctx *c, float p, const float *v, float *y, int acc) {
    // v is (N), y is (N), flattened, shaped as input 0
    const int64_t N = c->vin[0]->numel;
    if (!c->train || p == 0.0f) {
        if (acc) {
#pragma omp parallel for schedule(static)
            for (int64_t i = 0; i < N; i++) y[i] += v[i];
        } else if (y != v) {
            memcpy(y, v, (size_t)N * sizeof *y);
        }
        return;
    }
    const float scale = 1.0f / (1.0f - p);
    const uint64_t seed = c->seed;
    const uint32_t a = (uint32_t)c->node_id, b = (uint32_t)c->step;
    const int64_t rows = c->vin[0]->shape[0];
    const uint64_t base = rows > 0 ? (uint64_t)c->row0 * (uint64_t)(N / rows) : 0; /* row0 * E */
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; i++) {
        const float keep = rm_philox_uniform(seed, a, b, base + (uint64_t)i) >= p ? scale : 0.0f;
        const float d = v[i] * keep;
        y[i] = acc ? y[i] + d : d;
    }
}

static void dropout_forward(const rm_kernel_ctx *c) {
    // x is (N), out is (N)
    rm_dropout_apply(c, c->node->farg[0], c->in[0], c->out[0], 0);
}

static void dropout_backward(const rm_kernel_ctx *c) {
    // dout is (N), dx is (N)
    if (c->din[0]) rm_dropout_apply(c, c->node->farg[0], c->dout[0], c->din[0], c->acc[0]);
}

static double dropout_flops(const rm_node *n, const rm_value *vals, int backward) {
    (void)backward;
    /* a Philox call is ~10 rounds of 2 multiplies and a few xors */
    return 40.0 * (double)vals[n->in[0]].numel;
}

const rm_op_def rm_op_dropout = {
    .kind = RM_OP_DROPOUT,
    .name = "dropout",
    .bwd_reads = 0, /* the mask is regenerated, not stored */
    .forward = dropout_forward,
    .backward = dropout_backward,
    .flops = dropout_flops,
    .workspace = NULL,
    .cheap = 1,
};
