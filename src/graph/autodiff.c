/* autodiff.c: reverse-mode differentiation of a recorded graph.
 *
 * A node's backward is not a new set of nodes here: each op supplies one
 * backward kernel (ops/), and the step program runs "backward of node n" as
 * an instruction. What autodiff decides is *which* backwards run and which
 * gradient values exist:
 *   - a value needs a gradient if it depends on a parameter (forward
 *     reachability) and the loss depends on it (backward reachability);
 *   - such an activation gets a GRAD value of its shape, living in the arena;
 *     parameter gradients live in the flat gradient buffer instead. */
#include "graph/graph.h"
#include <stdio.h>
#include <stdlib.h>

rm_status rm_autodiff(rm_graph *g) {
    if (g->diffed) return RM_OK;
    if (g->loss < 0) return rm_graph_fail(g, RM_ERR_STATE, "autodiff: the graph has no loss (rm_set_loss)");
    int nv = g->n_vals;
    char *from_param = calloc((size_t)nv, 1), *to_loss = calloc((size_t)nv, 1);
    if (!from_param || !to_loss) {
        free(from_param);
        free(to_loss);
        return rm_graph_fail(g, RM_ERR_NOMEM, "autodiff: out of memory");
    }
    for (int i = 0; i < g->n_params; i++) from_param[g->params[i]] = (char)g->vals[g->params[i]].trainable;
    /* nodes are recorded in topological order: one forward sweep suffices */
    for (int n = 0; n < g->n_nodes; n++) {
        const rm_node *nd = &g->nodes[n];
        int any = 0;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && from_param[nd->in[i]]) any = 1;
        for (int j = 0; j < nd->n_out; j++) from_param[nd->out[j]] = (char)any;
    }
    to_loss[g->loss] = 1;
    for (int n = g->n_nodes - 1; n >= 0; n--) {
        rm_node *nd = &g->nodes[n];
        int reaches = 0;
        for (int j = 0; j < nd->n_out; j++)
            if (to_loss[nd->out[j]]) reaches = 1;
        nd->needs_grad = 0;
        if (!reaches) continue;
        for (int i = 0; i < nd->n_in; i++)
            if (nd->in[i] >= 0 && from_param[nd->in[i]]) {
                to_loss[nd->in[i]] = 1;
                nd->needs_grad = 1;
            }
    }
    int n_orig = nv;
    for (int v = 0; v < n_orig; v++) {
        if (g->vals[v].kind != RM_VALUE_ACT || !from_param[v] || !to_loss[v]) continue;
        char name[RM_NAME_LEN + 8];
        snprintf(name, sizeof name, "d(%s)", g->vals[v].name);
        rm_value copy = g->vals[v];
        /* rm_input appends a value of the right shape; we retag it as GRAD */
        rm_val d = rm_input_value(g, name, RM_DTYPE_F32, copy.ndim, copy.shape);
        if (d < 0) break;
        g->input_bytes = g->vals[d].input_off; /* it takes no input storage */
        g->vals[d].kind = RM_VALUE_GRAD;
        g->vals[d].node = v; /* GRAD: the value it is the gradient of */
        g->vals[d].stage = copy.stage;
        g->vals[v].grad = d;
    }
    free(from_param);
    free(to_loss);
    if (g->status != RM_OK) return g->status;
    g->diffed = 1;
    return RM_OK;
}
