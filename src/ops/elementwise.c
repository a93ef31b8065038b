/* elementwise.c: the builder shared by the elementwise ops (add, gelu,
 * relu, custom): out has the shape of its inputs, which must agree. */
#include "ops/ops.h"

rm_val rm_elementwise(rm_graph *g, const rm_op_def *d, const rm_val *in, int n_in) {
    for (int i = 0; i < n_in; i++)
        if (!rm_val_ok(g, in[i], d->name)) return -1;
    const rm_value *v0 = &g->vals[in[0]];
    for (int i = 0; i < n_in; i++) {
        const rm_value *vi = &g->vals[in[i]];
        if (vi->dtype != RM_DTYPE_F32) {
            if (n_in == 1) rm_graph_fail(g, RM_ERR_ARG, "%s: '%s' must be f32", d->name, vi->name);
            else rm_graph_fail(g, RM_ERR_ARG, "%s: '%s' and '%s' must both be f32", d->name, v0->name,
                               g->vals[in[i ? i : 1]].name);
            return -1;
        }
        int same = vi->ndim == v0->ndim;
        for (int k = 0; same && k < v0->ndim; k++) same = vi->shape[k] == v0->shape[k];
        if (!same) {
            rm_graph_fail(g, RM_ERR_ARG, "%s: '%s' and '%s' have different shapes", d->name, v0->name, vi->name);
            return -1;
        }
    }
    /* copy the shape first: recording the node may move g->vals */
    int64_t shape[RM_MAX_DIMS];
    const int nd = v0->ndim;
    for (int k = 0; k < nd; k++) shape[k] = v0->shape[k];
    int n = rm_op_node(g, d, in, n_in);
    if (n < 0) return -1;
    return rm_node_output(g, n, RM_DTYPE_F32, nd, shape);
}
