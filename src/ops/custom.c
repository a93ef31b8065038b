/* custom.c: a user-defined elementwise op, y = f(x), with the user's
 * forward and backward callbacks. The engine treats it like any other node:
 * it can be kept, freed and recomputed. */
#include "ops/ops.h"
#include <string.h>

rm_val rm_custom(rm_graph *g, const char *name, rm_val x, rm_custom_forward forward, rm_custom_backward backward,
                 void *user) {
    if (!rm_val_ok(g, x, "custom")) return -1;
    if (!forward || !backward || g->vals[x].dtype != RM_DTYPE_F32) {
        rm_graph_fail(g, RM_ERR_ARG, "custom op '%s': needs forward and backward callbacks and an f32 input",
                      name ? name : "?");
        return -1;
    }
    rm_val y = rm_elementwise(g, &rm_op_custom, &x, 1);
    if (y < 0) return -1;
    rm_node *n = &g->nodes[g->vals[y].node];
    n->custom_forward = forward;
    n->custom_backward = backward;
    n->custom_user = user;
    return y;
}

/* x is (n), y is (n) */
static void custom_forward(const rm_kernel_ctx *c) {
    c->node->custom_forward(c->in[0], c->out[0], c->vin[0]->numel, c->node->custom_user);
}

static void custom_backward(const rm_kernel_ctx *c) {
    if (!c->din[0]) return;
    if (!c->acc[0]) memset(c->din[0], 0, (size_t)c->vin[0]->numel * sizeof(float)); /* the callback adds */
    c->node->custom_backward(c->in[0], c->dout[0], c->din[0], c->vin[0]->numel, c->node->custom_user);
}

static double custom_flops(const rm_node *n, const rm_value *vals, int backward) {
    (void)backward;
    return (double)vals[n->in[0]].numel;
}

const rm_op_def rm_op_custom = {
    .kind = RM_OP_CUSTOM,
    .name = "custom",
    .bwd_reads = RM_READS_IN(0),
    .forward = custom_forward,
    .backward = custom_backward,
    .flops = custom_flops,
    .workspace = NULL,
};
