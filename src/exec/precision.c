/* precision.c: a session's precision applied to its graph (rm_compile).
 *
 * Under --precision bf16, as PyTorch's CPU autocast: every matrix product
 * takes bf16 inputs and sums in fp32 (rm_node.bf16: the op's kernels call
 * rm_gemm_bf16), and an activation between a product and the op next to it
 * is stored in bf16, half the bytes, where both sides take it so
 * (rm_op_def.bf16_outs of its producer, bf16_ins of every reader): a
 * normalisation's output read only by products, a projection's output read
 * only by GELU, SwiGLU, RoPE or attention, attention's probabilities and
 * output. Everything else stays fp32: the residual stream, what norms,
 * softmax and the loss read, gradients, parameters and optimizer state.
 * The dtypes live on the graph's values, so the planner, the memory limit
 * and paging count the bytes as they are; every session of one graph
 * therefore has the same precision. */
#include "exec/exec.h"
#include <stdlib.h>

/* Value v may be kept in bf16: produced as output j of an op that writes
 * it so, read only by inputs that take it, next to a product, not a value
 * the caller reads (an output, the loss). */
static int keeps_bf16(const rm_graph *g, int v, const rm_op_def *prod, int j, const char *ok, const char *near_mm,
                      const int *uses) {
    const rm_value *val = &g->vals[v];
    if (val->kind != RM_VALUE_ACT || val->dtype != RM_DTYPE_F32 || val->is_output || v == g->loss) return 0;
    if (!(prod->bf16_outs & (1u << j)) || !ok[v]) return 0;
    return prod->matmul || (near_mm[v] && uses[v] > 0);
}

static rm_status mark_bf16(rm_graph *g) {
    char *ok = malloc((size_t)g->n_vals), *near_mm = calloc((size_t)g->n_vals, 1);
    int *uses = calloc((size_t)g->n_vals, sizeof *uses);
    if (!ok || !near_mm || !uses) {
        free(ok), free(near_mm), free(uses);
        return rm_graph_fail(g, RM_ERR_NOMEM, "rm_compile: out of memory applying --precision bf16");
    }
    for (int v = 0; v < g->n_vals; v++) ok[v] = 1;
    for (int n = 0; n < g->n_nodes; n++) {
        rm_node *nd = &g->nodes[n];
        const rm_op_def *d = rm_op_get(nd->op);
        nd->bf16 = d->matmul;
        for (int i = 0; i < nd->n_in; i++) {
            const int v = nd->in[i];
            if (v < 0) continue;
            uses[v]++;
            if (!(d->bf16_ins & (1u << i))) ok[v] = 0;
            if (d->matmul) near_mm[v] = 1;
        }
    }
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        const rm_op_def *d = rm_op_get(nd->op);
        for (int j = 0; j < nd->n_out; j++)
            if (keeps_bf16(g, nd->out[j], d, j, ok, near_mm, uses)) g->vals[nd->out[j]].dtype = RM_DTYPE_BF16;
    }
    free(ok), free(near_mm), free(uses);
    return RM_OK;
}

rm_status rm_graph_precision(rm_graph *g, rm_precision p) {
    if (g->precision_users > 0 && g->precision != p)
        return rm_graph_fail(g, RM_ERR_ARG, "rm_compile: precision %s, but this graph has a live session in %s (the "
                             "activations' dtypes are the graph's): free that session first, or build the model again "
                             "on another graph", rm_precision_name(p), rm_precision_name(g->precision));
    /* the graph as the builders recorded it: no op builds a bf16 activation */
    for (int n = 0; n < g->n_nodes; n++) g->nodes[n].bf16 = 0;
    for (int v = 0; v < g->n_vals; v++)
        if (g->vals[v].kind == RM_VALUE_ACT && g->vals[v].dtype == RM_DTYPE_BF16) g->vals[v].dtype = RM_DTYPE_F32;
    g->precision = p;
    return p == RM_PRECISION_BF16 ? mark_bf16(g) : RM_OK;
}

void rm_graph_release(rm_graph *g) {
    if (g && g->precision_users > 0) g->precision_users--;
}
